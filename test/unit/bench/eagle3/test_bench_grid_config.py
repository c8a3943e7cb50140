"""Grid configs (`[workload] contexts`): the shipped ones load as the grid they say; every bad grid key is one line
naming the file and the key, exit 2 through the CLI, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench_fakes import write_config, write_grid_config

from sglang_blackwell.bench.eagle3.config import default_crosscheck_python, load_config
from sglang_blackwell.bench.eagle3.config_section import ConfigError
from sglang_blackwell.cli import main

BENCHMARK = Path(__file__).resolve().parents[4] / "benchmark"


def test_lab_grid_config_is_the_grid_the_issue_asks_for() -> None:
    cfg = load_config(BENCHMARK / "lab-kimi61-grid.toml")
    lab = load_config(BENCHMARK / "lab-kimi61.toml")
    w = cfg.workload
    assert cfg.grid and w.contexts == (256, 2048, 8192) and w.concurrency == (1, 4, 16)
    assert (w.api, w.output_len, w.rounds, w.repeats, w.prompt_seed) == ("completions", 256, 2, 1, 0)
    assert w.prompts_path is None and w.prompts == ()
    assert cfg.model == lab.model and cfg.speculative_args == lab.speculative_args
    assert cfg.server.launcher == ("python3", "-m", "sglang.launch_server")
    # lab-kimi61's server flags, decode graphs up to the grid's largest batch
    assert cfg.server.args == tuple(a if a != "8" else "16" for a in lab.server.args)
    assert "--mem-fraction-static" in cfg.server.args and cfg.server.env == lab.server.env
    assert {a: (x.speculative, x.env) for a, x in cfg.arms.items()} == {
        "baseline": (False, {}), "eagle3": (True, {}),
        "eagle3-p8-p9-off": (True, {"SGLANG_ENABLE_SPLITKV_VERIFY": "0", "SGLANG_ENABLE_BATCH_SIZE_WARMUP": "0",
                                    "TRITON_CACHE_DIR": "/tmp/jit/triton-cold"})}
    v = cfg.verdict
    assert v.baseline == "baseline" and v.speculative == ("eagle3",) and v.min_ratio == {}
    bars = {1: 1.35, 4: 1.10, 16: 0.95}
    assert v.grid_min_ratio == {256: bars, 2048: bars, 8192: {1: 1.25, 16: 0.95}}
    assert v.first_burst_min_ratio == 0.85
    assert cfg.profile.steps == 8 and cfg.profile.contexts == (256, 2048, 8192)
    assert cfg.profile.arms == ("baseline", "eagle3", "eagle3-p8-p9-off")
    assert cfg.crosscheck is not None and cfg.crosscheck.cells == ((2048, 1), (2048, 4))
    assert (cfg.crosscheck.num_prompts, cfg.crosscheck.python) == (4, "python3")


def test_box_grid_config_has_the_box_and_the_goals() -> None:
    cfg = load_config(BENCHMARK / "kimi-k2.5-8xpcie-grid.toml")
    box = load_config(BENCHMARK / "kimi-k2.5-8xpcie.toml")
    assert cfg.workload.contexts == (2048, 8192, 32768, 131072) and cfg.workload.concurrency == (1, 4, 16)
    assert cfg.workload.api == "completions" and cfg.model == box.model and cfg.server.args == box.server.args
    assert cfg.arms == box.arms and cfg.verdict.speculative == box.verdict.speculative
    lab = load_config(BENCHMARK / "lab-kimi61-grid.toml").verdict.grid_min_ratio
    g = cfg.verdict.grid_min_ratio
    assert g[2048] == lab[2048] and g[8192] == lab[8192] and g[32768] == g[131072] == {1: 1.25}
    assert "target_layers" not in cfg.raw["model"] and cfg.workload.token_range is None


def test_grid_hash_is_the_raw_dict(tmp_path: Path) -> None:
    a = load_config(write_grid_config(tmp_path))
    text = a.path.read_text()
    a.path.write_text("# a comment changes nothing\n" + text)
    assert load_config(a.path).sha256 == a.sha256
    a.path.write_text(text.replace("contexts = [16, 64]", "contexts = [16, 64]\nprompt_seed = 1"))
    assert load_config(a.path).sha256 != a.sha256


GRID_ERRORS = [
    ("contexts = [16, 64]", "contexts = [16, 16]", "[workload] contexts: expected a non-empty list of distinct"),
    ("contexts = [16, 64]", "contexts = [0]", "[workload] contexts: expected"),
    ("contexts = [16, 64]", "contexts = [16, 64]\nprompts = \"p.jsonl\"", "[workload] prompts: grid mode"),
    ("contexts = [16, 64]", "contexts = [16, 64]\nprompt_template = \"{prompt}\"", "[workload] prompt_template: grid"),
    ("contexts = [16, 64]", "contexts = [16, 64]\nprompt_seed = -1", "[workload] prompt_seed: expected an integer"),
    ('api = "completions"', 'api = "chat"', "[workload] api: grid mode (workload.contexts) sends token-id prompts"),
    ("min_ratio = { 16 = { 1 = 1.3, 2 = 1.1 }, 64 = { 1 = 1.2 } }", "min_ratio = { 16 = 1.3 }",
     "[verdict] min_ratio.16: expected a table of <concurrency> = <ratio>"),
    ("min_ratio = { 16 = { 1 = 1.3, 2 = 1.1 }, 64 = { 1 = 1.2 } }", "min_ratio = { 32 = { 1 = 1.3 } }",
     "[verdict] min_ratio.32: context 32 is not in workload.contexts [16, 64]"),
    ("min_ratio = { 16 = { 1 = 1.3, 2 = 1.1 }, 64 = { 1 = 1.2 } }", "min_ratio = { 16 = { 8 = 1.3 } }",
     "[verdict] min_ratio.16.8: concurrency 8 is not in workload.concurrency [1, 2]"),
    ("min_ratio = { 16 = { 1 = 1.3, 2 = 1.1 }, 64 = { 1 = 1.2 } }", "min_ratio = { 16 = { 1 = 0 } }",
     "[verdict] min_ratio.16.1: expected a positive number"),
    ("min_ratio = { 16 = { 1 = 1.3, 2 = 1.1 }, 64 = { 1 = 1.2 } }", "min_ratio = { x = { 1 = 1.3 } }",
     "[verdict] min_ratio.x: keys are context lengths"),
    ("min_ratio = { 16 = { 1 = 1.3, 2 = 1.1 }, 64 = { 1 = 1.2 } }", "min_ratio = 1.3",
     "[verdict] min_ratio: grid mode (workload.contexts): expected a table of <context>"),
    ("expect_break_even = 1.5", "expect_break_even = 1.5\nfirst_burst_min_ratio = 1.5",
     "[verdict] first_burst_min_ratio: expected a number in (0, 1]"),
    ("expect_break_even = 1.5", "expect_break_even = 1.5\nfirst_burst_min_ratio = 0",
     "[verdict] first_burst_min_ratio: expected a number in (0, 1]"),
    ("[verdict]", "[profile]\nsteps = 4\ncontexts = [32]\n[verdict]",
     "[profile] contexts: expected distinct values of workload.contexts [16, 64]"),
    ("[verdict]", "[profile]\ncontexts = [16]\n[verdict]", "[profile] contexts: needs profile.steps > 0"),
    ("[verdict]", "[crosscheck]\ncells = [[16, 3]]\n[verdict]", "[crosscheck] cells: [16, 3]: expected"),
    ("[verdict]", "[crosscheck]\ncells = [[16, 1], [16, 1]]\n[verdict]", "[crosscheck] cells: [16, 1] is listed"),
    ("[verdict]", "[crosscheck]\ncells = []\n[verdict]", "[crosscheck] cells: expected a list of [context"),
    ("[verdict]", "[crosscheck]\ncells = [[16, 1]]\nnum_prompts = 0\n[verdict]", "[crosscheck] num_prompts"),
    ("[verdict]", "[crosscheck]\ncells = [[16, 1]]\npyhton = \"x\"\n[verdict]", "[crosscheck] pyhton: unknown"),
]


@pytest.mark.parametrize(("old", "new", "expect"), GRID_ERRORS, ids=[e[2][:40] for e in GRID_ERRORS])
def test_bad_grid_key_names_file_and_key(tmp_path: Path, old: str, new: str, expect: str) -> None:
    p = write_grid_config(tmp_path)
    text = p.read_text()
    assert old in text
    p.write_text(text.replace(old, new, 1))
    with pytest.raises(ConfigError) as e:
        load_config(p)
    msg = str(e.value)
    assert msg.startswith(f"{p}: ") and expect in msg and len(msg.splitlines()) == 1, msg


NOT_GRID_ERRORS = [
    ("prompt_seed = 1", "[workload] prompt_seed: grid mode only"),
    ("", "[verdict] first_burst_min_ratio: grid mode only"),
    ("[profile]\nsteps = 2\ncontexts = [16]", "[profile] contexts: grid mode only"),
    ("[crosscheck]\ncells = [[16, 1]]", "[crosscheck]: grid mode only"),
]


@pytest.mark.parametrize(("extra", "expect"), NOT_GRID_ERRORS)
def test_grid_keys_need_grid_mode(tmp_path: Path, extra: str, expect: str) -> None:
    if "first_burst" in expect:
        p = write_config(tmp_path, verdict_extra="first_burst_min_ratio = 0.9")
    elif "prompt_seed" in expect:
        p = write_config(tmp_path, extra=extra)
    else:
        p = write_config(tmp_path)
        p.write_text(p.read_text() + "\n" + extra + "\n")
    with pytest.raises(ConfigError, match=expect.replace("[", r"\[").replace("]", r"\]")):
        load_config(p)


def test_crosscheck_needs_a_tokenizer_and_defaults_its_python(tmp_path: Path) -> None:
    p = write_grid_config(tmp_path, api="generate", extra="[crosscheck]\ncells = [[16, 1]]")
    with pytest.raises(ConfigError, match=r"\[crosscheck\]: sglang.bench_serving needs the model's tokenizer"):
        load_config(p)
    launcher = ("/opt/py/bin/python3.12", "-m", "sglang.launch_server")
    assert default_crosscheck_python(launcher) == "/opt/py/bin/python3.12"
    assert default_crosscheck_python(("/usr/bin/fake_server.py",)) == "python3"
    cfg = load_config(write_grid_config(tmp_path / "b", extra="[crosscheck]\ncells = [[64, 2]]"))
    assert cfg.crosscheck is not None and cfg.crosscheck.python == "python3" and cfg.crosscheck.timeout_s == 300


def test_cli_grid_config_error_is_exit_2_and_writes_nothing(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    p = write_grid_config(tmp_path, min_ratio="{ 16 = 1.3 }")
    rc = main(["bench", "eagle3", "--config", str(p), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and f"{p}: [verdict] min_ratio.16: expected a table" in err[0]
    assert not (tmp_path / "out").exists()


def test_no_token_range_and_no_tokenizer_is_exit_2_before_any_launch(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    p = write_grid_config(tmp_path, token_range=None)
    p.write_text(p.read_text().replace(str(tmp_path / "models" / "target"), "org/hub-model"))
    rc = main(["bench", "eagle3", "--config", str(p), "--out", str(tmp_path / "out"),
               "--attach", "baseline=http://127.0.0.1:1", "eagle3=http://127.0.0.1:1"])
    assert rc == 2 and "no healthy server" in capsys.readouterr().err  # attach checks come first
    (tmp_path / "models" / "target" / "tokenizer.json").unlink()
    p.write_text(p.read_text().replace("org/hub-model", str(tmp_path / "models" / "target")))
    rc = main(["bench", "eagle3", "--config", str(p), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2 and "[workload] token_range: not set" in err and "set workload.token_range" in err
    assert not (tmp_path / "out").exists()
