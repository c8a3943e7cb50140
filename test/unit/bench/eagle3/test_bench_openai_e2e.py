"""`bench eagle3` over the OpenAI-compatible API, end to end with real server processes: the target box's config
against OpenAI-only servers (no SGLang endpoint) with every proxy variable pointing at a dead address (the real
CLI in its own process), the vLLM recipe (a peer's baseline + EAGLE-3 pair, accept length from its /metrics),
a server that produces fewer tokens than asked, a dead --attach URL, SGLang's extras over the chat API in launch
mode. (That the committed receipts rebuild unchanged: test_committed_receipts.py.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from bench_fakes import dead_port, dead_proxy_env, openai_servers, requests_of, write_config

from sglang_blackwell.bench.eagle3.config import load_config
from sglang_blackwell.cli import main
from sglang_blackwell.receipts import validate_receipt

REPO = Path(__file__).resolve().parents[4]
KIMI = REPO / "benchmark" / "kimi-k2.5-8xpcie.toml"
KIMI_MODEL = "moonshotai/Kimi-K2.5"  # what `vllm serve moonshotai/Kimi-K2.5` lists at /v1/models


def only(out: Path, pattern: str) -> Path:
    (p,) = sorted(out.glob(pattern))
    return p


def chunks_after_first(n: int, pattern: list[int]) -> int:
    """How many chunks fake_openai_server.py streams after the first token, cycling `pattern`, last capped."""
    made, k = 1, 0
    while made < n:
        made += min(pattern[k % len(pattern)], n - made)
        k += 1
    return k


def test_done_when_kimi_config_against_openai_only_servers_behind_a_dead_proxy(tmp_path: Path) -> None:
    base = {"FAKE_TTFT_MS": "5", "FAKE_STEP_MS": "1"}
    specs = {"baseline": base, "eagle3": {**base, "FAKE_CHUNKS": "2,3,1,3", "FAKE_NO_HEALTH": "1"},
             "eagle3+fusion": {**base, "FAKE_CHUNKS": "3,2,3"}}
    with openai_servers(tmp_path, specs, model=KIMI_MODEL) as urls:
        baseline = urls["baseline"].replace("127.0.0.1", "localhost")  # a loopback name, not only the address
        cmd = [sys.executable, "-m", "sglang_blackwell.cli", "bench", "eagle3", "--config", str(KIMI),
               "--attach", f"baseline={baseline}", f"eagle3={urls['eagle3']}",
               f"eagle3+fusion={urls['eagle3+fusion']}", "--repeats", "1", "--out", str(tmp_path / "out")]
        p = subprocess.run(cmd, env=dead_proxy_env(), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "VERDICT: PASS" in p.stdout
    r = json.loads(only(tmp_path / "out", "bench-eagle3_kimi-k2.5-8xpcie_*.json").read_text())
    assert validate_receipt(r) == [] and r["mode"] == "attach" and r["complete"] is True
    s = r["summary"]
    print("done-when summary:", json.dumps(s, indent=1))
    assert s["api"] == "openai" and s["engine"] == "openai-compatible" and s["passed"] is True
    assert s["ttft_ms_p50"] >= 5.0  # FAKE_TTFT_MS: the first token never comes sooner
    assert s["itl_ms_p99"] > 0 and s["tpot_ms_p50"] > 0 and s["speedup_c1"] > 1.10
    assert s["accept_len"] is None and s["break_even_accept_len"] is None  # no SGLang stats, no vLLM /metrics
    assert r["workload"]["api"] == "chat" and r["config"]["sha256"] == load_config(KIMI).sha256
    # one line per arm run says what was skipped (the profiler window of the config included)
    skipped = [ln for ln in p.stderr.splitlines() if "no SGLang /server_info" in ln]
    assert len(skipped) == 3 and all("profiler window" in ln for ln in skipped), p.stderr
    runs = {x["arm"]: x for x in r["runs"]}
    assert all(not x["error"] and x["profile"] is None for x in runs.values())
    assert runs["eagle3"]["server"] == {"engine": "openai-compatible", "engine_version": None, "api": "chat",
                                        "model_id": KIMI_MODEL}
    # tokens from usage, chunks counted: 256 tokens = 1 + 255 in chunks of 2,3,1,3
    lv = runs["eagle3"]["levels"]["1"]
    assert lv["tokens_per_chunk"] == pytest.approx(256 / (1 + chunks_after_first(256, [2, 3, 1, 3])), abs=1e-4)
    assert lv["ttft_source"] == "stream" and lv["itl_samples"] == 4 * chunks_after_first(256, [2, 3, 1, 3])
    assert runs["baseline"]["levels"]["4"]["tokens_per_chunk"] == 1.0
    # the same prompts, the same greedy fixed-length requests, to all three servers
    prompts = [json.loads(ln)["text"] for ln in (REPO / "benchmark/prompts/chat-short.jsonl").read_text().splitlines()]
    measured = {}
    for arm in specs:
        bodies = [q["body"] for q in requests_of(tmp_path, arm)]
        assert {q["path"] for q in requests_of(tmp_path, arm)} == {"/v1/chat/completions"}
        assert all(b["model"] == KIMI_MODEL and b["temperature"] == 0.0 and b["ignore_eos"] is True
                   and b["stream"] is True and b["stream_options"] == {"include_usage": True} for b in bodies)
        measured[arm] = sorted(b["messages"][0]["content"] for b in bodies if b["max_tokens"] == 256)
        assert sorted(b["max_tokens"] for b in bodies) == [16] * 5 + [256] * 20  # warm-up c=1 + c=4; 4 + 16
    assert measured["baseline"] == measured["eagle3"] == measured["eagle3+fusion"] == sorted(prompts[:20])


def test_vllm_recipe_peer_pair_with_accept_length_from_its_metrics(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """What benchmark/README.md tells a user to run against `vllm serve` (baseline, and EAGLE-3 with
    --speculative-config): --arms baseline,eagle3 of the target box's config."""
    vllm = {"FAKE_METRICS": "vllm", "FAKE_STEP_MS": "0.5"}
    specs = {"baseline": vllm, "eagle3": {**vllm, "FAKE_CHUNKS": "2,3,1"}}
    with openai_servers(tmp_path, specs, model=KIMI_MODEL) as urls:
        out = tmp_path / "out"
        assert main(["bench", "eagle3", "--config", str(KIMI), "--arms", "baseline,eagle3", "--repeats", "1",
                     "--no-plots", "--out", str(out),
                     "--attach", f"baseline={urls['baseline']}", f"eagle3={urls['eagle3']}"]) == 0
        captured = capsys.readouterr()
        r = json.loads(only(out, "*.json").read_text())
        # the wrong server behind an arm is caught from its /metrics as it is from SGLang's /server_info
        cfg = write_config(tmp_path, api="chat", fusion_env=None, repeats=1, concurrency="[1]", output_len=8)
        assert main(["bench", "eagle3", "--config", str(cfg), "--no-plots", "--out", str(tmp_path / "o2"),
                     "--attach", f"baseline={urls['eagle3']}", f"eagle3={urls['baseline']}"]) == 1
        wrong = json.loads(only(tmp_path / "o2", "*.json").read_text())
    assert "note: the verdict's speculative arm(s) eagle3+fusion not run (--arms): judging eagle3" in captured.out
    assert "accept length from vLLM's /metrics spec-decode counters" in captured.err
    s = r["summary"]
    assert s["engine"] == "vllm 0.18.0-fake" and r["versions"]["vllm"] == "0.18.0-fake" and s["api"] == "openai"
    # every request: 1 + 255 tokens in chunks of 2,3,1 (the last capped); accepted = 255 - chunks, bonus excluded
    k = chunks_after_first(256, [2, 3, 1])
    for c in ("1", "4"):
        lv = r["runs"][1]["levels"][c]
        assert lv["accept_len"] == pytest.approx(1 + (255 - k) / k, abs=1e-4) and lv["accept_len_source"] == "metrics"
    assert r["runs"][0]["levels"]["1"]["accept_len"] is None  # the baseline has no spec counters
    assert s["accept_len"] == pytest.approx(1 + (255 - k) / k, abs=1e-4) and s["passed"] is True
    errors = [x["error"] for x in wrong["runs"]]
    assert "is the non-speculative baseline but" in errors[0] and "exposes vllm:spec_decode_num_drafts" in errors[0]
    assert "is speculative but" in errors[1] and "(no --speculative-config?)" in errors[1]
    assert wrong["summary"]["passed"] is False


def test_a_server_that_produces_fewer_tokens_fails_the_run(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    cfg = write_config(tmp_path, api="completions", fusion_env={}, repeats=1, concurrency="[1]", output_len=16)
    specs = {"baseline": {}, "eagle3": {"FAKE_CHUNKS": "3", "FAKE_SHORT": "1"},
             "eagle3+fusion": {"FAKE_CHUNKS": "3", "FAKE_NO_USAGE": "1"}}
    with openai_servers(tmp_path, specs) as urls:
        out = tmp_path / "out"
        rc = main(["bench", "eagle3", "--config", str(cfg), "--no-plots", "--out", str(out),
                   "--attach", *(f"{a}={u}" for a, u in urls.items())])
    assert rc == 1
    assert "VERDICT: FAIL" in capsys.readouterr().out
    r = json.loads(only(out, "*.json").read_text())
    reasons = "\n".join(r["verdict"]["reasons"])
    # the warm-up (4 tokens) already comes back short
    assert ("arm eagle3 repeat 1: asked for 4 tokens with ignore_eos, but 1 of 1 request(s) at concurrency 1 "
            "produced 3 (usage.completion_tokens") in reasons
    assert "arm eagle3+fusion repeat 1: " in reasons and "reported no usage.completion_tokens" in reasons
    assert r["summary"]["passed"] is False and r["summary"]["api"] == "openai"


def test_a_dead_attach_url_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = write_config(tmp_path, api="completions", fusion_env=None)
    out = tmp_path / "out"
    dead = f"http://127.0.0.1:{dead_port()}"
    with openai_servers(tmp_path, {"up": {}}) as urls:
        assert main(["bench", "eagle3", "--config", str(cfg), "--out", str(out),
                     "--attach", f"baseline={urls['up']}", f"eagle3={dead}"]) == 2
    err = capsys.readouterr().err
    assert f"--attach eagle3={dead}: no healthy server there (/health: URLError" in err and "refused" in err
    assert main(["bench", "eagle3", "--config", str(cfg), "--out", str(out), "--attach", "baseline=x", "eagle3=y"]) == 2
    assert "--attach baseline=x: expected an http:// or https:// URL" in capsys.readouterr().err
    assert not out.exists()  # nothing written


def test_launch_mode_chat_api_uses_sglangs_extras(tmp_path: Path) -> None:
    """The target box's path: our SGLang server launched, the chat API measured, SGLang's accept length
    (/server_info after a reset: the OpenAI API carries no spec counts) and step times read around it."""
    cfg = write_config(tmp_path, api="chat", fusion_env=None, repeats=1, concurrency="[1]", model_dirs=True)
    out = tmp_path / "out"
    assert main(["bench", "eagle3", "--config", str(cfg), "--no-plots", "--out", str(out)]) == 0
    r = json.loads(only(out, "*.json").read_text())
    s = r["summary"]
    assert s["api"] == "openai" and s["engine"] == "sglang 0.5.14-fake" and r["versions"]["sglang"] == "0.5.14-fake"
    eagle = next(x for x in r["runs"] if x["arm"] == "eagle3")
    lv = eagle["levels"]["1"]
    # 32 tokens: the prefill's, then 31 in rounds of 3 tokens (the last 1): 11 rounds, 12 chunks
    assert lv["accept_len_source"] == "server_info" and lv["accept_len"] == pytest.approx(31 / 11, abs=1e-6)
    assert lv["tokens_per_chunk"] == pytest.approx(32 / 12, abs=1e-4) and lv["step_samples"] > 0
    assert eagle["server"]["engine"] == "sglang" and eagle["server"]["model_id"] == str(tmp_path / "models" / "target")
    assert s["ttft_ms_p50"] >= 5.0 and s["itl_ms_p99"] >= 6.0 * 0.5  # FAKE_PREFILL_MS 5; rounds of 6 ms
