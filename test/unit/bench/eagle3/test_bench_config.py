"""Benchmark configs: the shipped ones load; every bad input names the file and the key at fault."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench_fakes import write_config

from sglang_blackwell.bench.eagle3.config import load_config, select_arms
from sglang_blackwell.bench.eagle3.config_section import ConfigError
from sglang_blackwell.cli import main
from sglang_blackwell.errors import UserError

BENCHMARK = Path(__file__).resolve().parents[4] / "benchmark"


@pytest.mark.parametrize("name", ["lab-synthetic", "lab-synthetic-untrained", "kimi-k2.5-8xpcie",
                                  "llama-3.1-8b-eagle3"])
def test_shipped_configs_load(name: str) -> None:
    cfg = load_config(BENCHMARK / f"{name}.toml")
    assert cfg.name == name
    assert cfg.verdict.baseline in cfg.arms and not cfg.arms[cfg.verdict.baseline].speculative
    assert all(cfg.arms[a].speculative for a in cfg.verdict.speculative)
    assert 1 in cfg.verdict.min_ratio


def test_lab_config_matches_the_lab_line() -> None:
    cfg = load_config(BENCHMARK / "lab-synthetic.toml")
    assert cfg.server.tp == 2 and cfg.skip_tokenizer_init
    assert cfg.verdict.min_ratio == {1: 1.3} and cfg.workload.repeats == 3
    assert set(cfg.arms) == {"baseline", "eagle3", "eagle3+fusion"}
    assert "--disable-custom-all-reduce" in cfg.server.args
    assert "--enforce-disable-flashinfer-allreduce-fusion" in cfg.arms["eagle3"].args
    assert cfg.arms["eagle3+fusion"].args == ("--flashinfer-allreduce-fusion-backend", "trtllm")
    no_multicast = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                    "NVSHMEM_DISABLE_NVLS": "1"}
    assert no_multicast.items() <= cfg.server.env.items()
    # every prompt token lies in the generator's closed token set [100, 2148)
    ids = [i for p in cfg.workload.prompts for i in p.input_ids or ()]
    assert ids and min(ids) >= 100 and max(ids) < 2148
    untrained = load_config(BENCHMARK / "lab-synthetic-untrained.toml")
    assert "dummy" in untrained.arms["eagle3"].args


def test_untrained_config_differs_from_the_trained_one_only_in_the_draft_weights() -> None:
    trained = load_config(BENCHMARK / "lab-synthetic.toml")
    untrained = load_config(BENCHMARK / "lab-synthetic-untrained.toml")
    assert untrained.server == trained.server and untrained.speculative_args == trained.speculative_args
    assert untrained.arms["baseline"] == trained.arms["baseline"]
    extra = list(untrained.arms["eagle3"].args)
    for a in trained.arms["eagle3"].args:
        extra.remove(a)
    assert extra == ["--speculative-draft-load-format", "dummy"]
    assert (untrained.workload.prompts, untrained.workload.output_len, untrained.workload.concurrency) == (
        trained.workload.prompts, trained.workload.output_len, trained.workload.concurrency)
    assert untrained.verdict.expect_accept_len == trained.verdict.expect_accept_len


def test_api_of_the_shipped_configs() -> None:
    kimi = load_config(BENCHMARK / "kimi-k2.5-8xpcie.toml")
    assert (kimi.workload.api, kimi.workload.api_family, kimi.workload.stream) == ("chat", "openai", True)
    assert load_config(BENCHMARK / "llama-3.1-8b-eagle3.toml").workload.api == "completions"
    for lab in ("lab-synthetic", "lab-synthetic-untrained"):
        cfg = load_config(BENCHMARK / f"{lab}.toml")
        # tokenizer-less: /generate by default, and the default does not enter the hash (receipts still merge)
        assert cfg.workload.api == "generate" and not cfg.workload.stream and "api" not in cfg.raw["workload"]


def test_api_default_and_hash(tmp_path: Path) -> None:
    ids = load_config(write_config(tmp_path))
    assert ids.workload.api == "generate"
    text = load_config(write_config(tmp_path, api="completions"))
    assert text.workload.api == "completions" and text.workload.stream
    p = tmp_path / "fake.toml"
    p.write_text(p.read_text().replace('api = "completions"', ""))
    default = load_config(p)
    assert default.workload.api == "completions"  # the model has a tokenizer
    assert default.sha256 != text.sha256  # a written key is part of the hash like any other


@pytest.mark.parametrize("api, old, new, expect", [
    (None, "output_len = 32", 'output_len = 32\napi = "chat"',
     "[workload] api: 'chat' needs the model's tokenizer, but [model] tokenizer = \"none\""),
    (None, "output_len = 32", 'output_len = 32\napi = "grpc"',
     "[workload] api: expected one of 'completions', 'chat', 'generate', got 'grpc'"),
    ("chat", "output_len = 32", "output_len = 32\nstream = false",
     "[workload] stream: api 'chat' is always streamed"),
    ("chat", "output_len = 32", 'output_len = 32\nprompt_template = "<u>{prompt}</u>"',
     "[workload] prompt_template: api = \"chat\" applies the model's chat template on the server"),
])
def test_bad_api_names_file_and_key(tmp_path: Path, api: str | None, old: str, new: str, expect: str) -> None:
    p = write_config(tmp_path, api=api)
    p.write_text(p.read_text().replace(old, new, 1))
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert str(p) in str(e.value) and expect in str(e.value)


def test_chat_needs_text_prompts(tmp_path: Path) -> None:
    p = write_config(tmp_path, api="chat")
    (tmp_path / "prompts.jsonl").write_text('{"input_ids": [100, 101]}\n')
    with pytest.raises(ConfigError, match=r"\[workload\] api: \"chat\" sends text messages, but the prompt file "
                                          "has input_ids"):
        load_config(p)
    p.write_text(p.read_text().replace('api = "chat"', 'api = "completions"'))
    assert load_config(p).workload.prompts[0].input_ids == (100, 101)  # token-id prompts over /v1/completions


def test_llama_prompts_get_the_chat_template() -> None:
    cfg = load_config(BENCHMARK / "llama-3.1-8b-eagle3.toml")
    assert set(cfg.arms) == {"baseline", "eagle3"}
    t = cfg.workload.prompts[0].text
    assert t.startswith("<|start_header_id|>user<|end_header_id|>\n\n") and "{prompt}" not in t


def _broken(tmp_path: Path, old: str, new: str) -> Path:
    p = write_config(tmp_path, fusion_env={"FAKE_ROUND_MS": "5"})
    text = p.read_text()
    assert old in text, old
    p.write_text(text.replace(old, new, 1))
    return p


@pytest.mark.parametrize("old,new,expect", [
    ("tp = 2", "tpp = 2", "[server] tpp: unknown key"),
    ("tp = 2", "tp = 0", "[server] tp: expected an integer from 1 to 1024"),
    ('target = "/fake/target"', "", "[model] target: missing (required)"),
    ("concurrency = [1, 2]", 'concurrency = "1"', "[workload] concurrency: expected a non-empty list"),
    ("output_len = 32", "output_len = 32\nouput_len = 3", "[workload] ouput_len: unknown key"),
    ("min_ratio = { 1 = 1.3 }", "min_ratio = { 8 = 1.3 }", "[verdict] min_ratio.8: concurrency 8 is not in"),
    ("min_ratio = { 1 = 1.3 }", 'min_ratio = { 1 = "fast" }',
     "[verdict] min_ratio.1: expected a positive number"),
    ('baseline = "baseline"', 'baseline = "base"', "[verdict] baseline: names arm 'base'"),
    ('baseline = "baseline"', 'baseline = "eagle3"',
     "[verdict] baseline: arm 'eagle3' must have speculative = false"),
    ('speculative = ["eagle3"]', 'speculative = ["baseline"]',
     "[verdict] speculative: arm 'baseline' must have"),
    ('fusion = ["eagle3+fusion", "eagle3"]', 'fusion = ["eagle3+fusion"]', "[verdict] fusion: expected"),
    ('args = ["--disable-radix-cache"]', 'args = ["--port", "1"]',
     "[server] args: --port is set by the harness"),
    ('args = ["--fake-fusion-on"]', 'args = ["--tp-size=4"]', "[arms.eagle3+fusion] args: --tp-size is set"),
    ('FAKE_STARTUP_S = "0.2"', "FAKE_STARTUP_S = 0.2", "[server] env.FAKE_STARTUP_S: expected a string"),
    ("[arms.baseline]", "[arms.baseline]\nspeculatve = false", "[arms.baseline] speculatve: unknown key"),
    ("token_range = [100, 2148]", "token_range = [100, 101]", "token id"),
    ('draft = "/fake/draft"', "", "[model] draft: missing: arms with speculative = true"),
    ('name = "fake"', 'name = "fake"\n[profile]\nsteps = 4\narms = ["nope"]',
     "[profile] arms: names arm 'nope'"),
    # found by test_bench_config_fuzz.py (issue 18): the name becomes receipt file names, so one file-name part
    ('name = "fake"', 'name = "../../x"', "top level name: '../../x': it names the receipt files"),
    ('name = "fake"', 'name = "a\\u0000b"', "top level name: 'a\\x00b': it names the receipt files"),
    ('name = "fake"', 'name = "/"', "top level name: '/': it names the receipt files"),
    # a key or value with a line break stays one line of message
    ('name = "fake"', '"a\\nb" = 1\nname = "fake"', "top level a\\nb: unknown key"),
    ('[arms.baseline]', '[arms."base\\u2028line"]', "(arms: base\\u2028line, eagle3, eagle3+fusion)"),
    ('prompts = "prompts.jsonl"', 'prompts = "a\\u0000b"', "[workload] prompts: 'a\\x00b' is not a usable path"),
    ('prompts = "prompts.jsonl"', f'prompts = "{"x" * 300}"', "is not a usable path"),
    ("port = 0", "port = 70000", "[server] port: expected an integer from 0 to 65535, got 70000"),
    ("startup_timeout_s = 20", "startup_timeout_s = nan", "[server] startup_timeout_s: expected a finite number"),
    ("min_ratio = { 1 = 1.3 }", "min_ratio = { 1 = inf }", "[verdict] min_ratio.1: expected a positive number"),
])
def test_bad_config_names_file_and_key(tmp_path: Path, old: str, new: str, expect: str) -> None:
    p = _broken(tmp_path, old, new)
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert str(p) in str(e.value)
    assert expect in str(e.value)
    assert len(str(e.value).splitlines()) == 1


def test_bad_prompt_file_names_file_and_line(tmp_path: Path) -> None:
    p = write_config(tmp_path)
    (tmp_path / "prompts.jsonl").write_text('{"input_ids": [100, 101]}\n{"text": "hello"}\n')
    with pytest.raises(ConfigError, match=r"prompts\.jsonl:2: \"text\" prompt, but \[model\] tokenizer"):
        load_config(p)
    (tmp_path / "prompts.jsonl").write_text('{"input_ids": [100, 5000]}\n')
    with pytest.raises(ConfigError, match=r"prompts\.jsonl:1: token id 5000 outside workload.token_range"):
        load_config(p)
    (tmp_path / "prompts.jsonl").write_text("not json\n")
    with pytest.raises(ConfigError, match=r"prompts\.jsonl:1: not JSON"):
        load_config(p)
    (tmp_path / "prompts.jsonl").unlink()
    with pytest.raises(ConfigError, match=r"\[workload\] prompts: prompt file .* not found"):
        load_config(p)


def test_not_toml_and_missing_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("name = \n")
    with pytest.raises(ConfigError, match="bad.toml: not valid TOML"):
        load_config(bad)
    with pytest.raises(ConfigError, match="nope.toml: benchmark config not found"):
        load_config(tmp_path / "nope.toml")


def test_select_arms(tmp_path: Path) -> None:
    cfg = load_config(write_config(tmp_path, fusion_env={"FAKE_ROUND_MS": "5"}))
    assert select_arms(cfg, None) == ["baseline", "eagle3", "eagle3+fusion"]
    assert select_arms(cfg, "eagle3+fusion,baseline") == ["baseline", "eagle3+fusion"]  # config order
    with pytest.raises(UserError, match="--arms: unknown arm 'eagle'"):
        select_arms(cfg, "baseline,eagle")


def test_cli_reports_config_errors_with_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = _broken(tmp_path, "tp = 2", "tp = -1")
    rc = main(["bench", "eagle3", "--config", str(p), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2
    assert f"{p}: [server] tp: expected an integer from 1 to 1024" in err
    assert not (tmp_path / "out").exists()  # nothing half-written


def test_with_tp_changes_the_size_and_the_hash():
    from sglang_blackwell.bench.eagle3.config import load_config, with_tp

    cfg = load_config(BENCHMARK / "lab-synthetic.toml")
    tp4 = with_tp(cfg, 4)
    assert (cfg.server.tp, tp4.server.tp) == (2, 4) and tp4.raw["server"]["tp"] == 4
    assert tp4.sha256 != cfg.sha256 and with_tp(cfg, 2) is cfg and cfg.raw["server"]["tp"] == 2
    with pytest.raises(UserError, match="--tp"):
        with_tp(cfg, 0)



def test_target_layers_and_accept_tolerance_keys(tmp_path):
    import copy

    from sglang_blackwell import tomlio
    from sglang_blackwell.bench.eagle3.harness import check_target_layers

    cfg = load_config(BENCHMARK / "lab-kimi61.toml")
    assert cfg.model.target_layers == 61 and cfg.verdict.accept_len_tolerance == 0.03
    assert cfg.verdict.expect_accept_len == pytest.approx(2.0399)
    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text('{"num_hidden_layers": 10}')
    raw = copy.deepcopy(cfg.raw)
    raw["model"]["target"] = str(target)
    raw["workload"]["prompts"] = str(cfg.workload.prompts_path)
    p = tmp_path / "c.toml"
    p.write_text(tomlio.dumps(raw))
    with pytest.raises(UserError, match=r"target_layers = 61, but .*config.json says num_hidden_layers = 10"):
        check_target_layers(load_config(p))
    del raw["verdict"]["expect_accept_len"]
    p.write_text(tomlio.dumps(raw))
    with pytest.raises(ConfigError, match=r"\[verdict\] accept_len_tolerance: needs expect_accept_len"):
        load_config(p)


def test_an_arm_may_name_its_own_draft(tmp_path: Path) -> None:
    """Two drafts side by side (the GQA and the MLA lab drafts): an arm's `draft` replaces [model] draft in its
    server command; a baseline arm with a draft is refused; the server must report the arm's draft."""
    from sglang_blackwell.bench.eagle3.arm_run import check_identity, server_command
    from sglang_blackwell.bench.eagle3.run_error import BenchRunError

    p = write_config(tmp_path, fusion_env=None)
    text = p.read_text()
    p.write_text(text.replace("[arms.eagle3]\n", "[arms.eagle3]\ndraft = \"/fake/draft-mla\"\n", 1))
    cfg = load_config(p)
    cmd = server_command(cfg, cfg.arms["eagle3"], 1234)
    assert cmd[cmd.index("--speculative-draft-model-path") + 1] == "/fake/draft-mla"
    info = {"speculative_algorithm": "EAGLE3", "tp_size": cfg.server.tp}
    check_identity({**info, "speculative_draft_model_path": "/fake/draft-mla"}, cfg, cfg.arms["eagle3"], "u")
    with pytest.raises(BenchRunError, match="draft"):
        check_identity({**info, "speculative_draft_model_path": "/fake/draft"}, cfg, cfg.arms["eagle3"], "u")
    p.write_text(text.replace("[arms.baseline]\n", "[arms.baseline]\ndraft = \"/fake/draft-mla\"\n", 1))
    with pytest.raises(ConfigError, match=r"arms\.baseline.*draft"):
        load_config(p)
