"""`sglang-blackwell bench eagle3` end to end against real fake-server processes (launched and attached):
a fast EAGLE-3 passes, a slow one fails and says which side regressed; receipts validate; plots are
written."""

from __future__ import annotations

import gzip
import json
import os
import sys
from pathlib import Path

import pytest
from bench_fakes import FAKE_SERVER, write_config

from sglang_blackwell.bench.eagle3.server import Server, free_port, launched_server
from sglang_blackwell.cli import main
from sglang_blackwell.receipts import validate_receipt

REQUIRED_SUMMARY = {"machine", "tp", "config", "speedup_c1", "accept_len", "break_even_accept_len",
                    "verify_ms_fusion_on", "verify_ms_fusion_off", "passed"}


def bench(*args: str) -> int:
    return main(["bench", "eagle3", *args])


def only(out: Path, pattern: str) -> Path:
    (p,) = sorted(out.glob(pattern))
    return p


def test_launch_mode_fast_eagle3_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = write_config(tmp_path, eagle_env={"FAKE_ROUND_MS": "5", "FAKE_ACCEPT_LEN": "3"},
                       fusion_env={"FAKE_ROUND_MS": "3", "FAKE_ACCEPT_LEN": "3"}, model_dirs=True)
    out = tmp_path / "out"
    assert bench("--config", str(cfg), "--out", str(out)) == 0
    printed = capsys.readouterr()
    assert "VERDICT: PASS" in printed.out
    r = json.loads(only(out, "bench-eagle3_fake_*.json").read_text())
    assert validate_receipt(r) == [] and r["kind"] == "bench-eagle3" and r["complete"] is True
    assert set(r["summary"]) >= REQUIRED_SUMMARY and r["summary"]["passed"] is True
    assert r["summary"]["tp"] == 2 and r["summary"]["config"] == "fake"
    # the fake makes 3 tokens per 5 ms round vs 1 token per 4 ms: ~2.3x, accept = 32 tokens / 11 verifies
    # (wide bounds: sleeps overshoot on a loaded CI machine)
    assert 1.4 < r["summary"]["speedup_c1"] < 4.0
    assert r["summary"]["accept_len"] == pytest.approx(32 / 11, abs=0.01)
    assert 1.0 < r["summary"]["break_even_accept_len"] < 1.8  # 5 ms round / 4 ms step, measured
    assert r["summary"]["round_ms_fusion_on"] < r["summary"]["round_ms_fusion_off"]  # 3 ms vs 5 ms
    assert r["summary"]["verify_ms_fusion_on"] is None  # no profiler window in this config
    # arms interleave A B C A B C, every launch torn down completely
    runs_file = only(out, "*_runs.jsonl")
    runs = [json.loads(ln)["run"] for ln in runs_file.read_text().splitlines()]
    assert [(x["repeat"], x["arm"]) for x in runs] == [(1, "baseline"), (1, "eagle3"), (1, "eagle3+fusion"),
                                                       (2, "baseline"), (2, "eagle3"), (2, "eagle3+fusion")]
    assert all(x["teardown"]["group_gone"] and not x["error"] for x in runs)
    assert all(Path(x["log"]).exists() for x in runs)
    assert len({x["url"] for x in runs}) == 6  # a fresh server (and port) per launch
    assert runs[1]["server"]["speculative_algorithm"] == "EAGLE3"
    assert runs[0]["server"]["speculative_algorithm"] is None
    assert runs[0]["levels"]["1"]["accept_len"] is None and runs[0]["levels"]["1"]["step_samples"] > 0
    assert runs[0]["levels"]["1"]["ttft_source"] == "idle streamed probe"
    assert r["plots"] and all((out / p).stat().st_size > 1000 for p in r["plots"])

    # --from-runs rebuilds the same verdict without running anything
    out2 = tmp_path / "out2"
    assert bench("--config", str(cfg), "--out", str(out2), "--from-runs", str(runs_file), "--no-plots") == 0
    r2 = json.loads(only(out2, "*.json").read_text())
    assert r2["verdict"]["checks"] == r["verdict"]["checks"] and r2["mode"] == "launch"
    # several files (one per bounded lab call) merge; repeats are renumbered across them
    half = runs_file.read_text().splitlines()
    (tmp_path / "a_runs.jsonl").write_text("\n".join(half[:3]) + "\n")
    (tmp_path / "b_runs.jsonl").write_text("\n".join(half[3:]) + "\n")
    out3 = tmp_path / "out3"
    assert bench("--config", str(cfg), "--out", str(out3), "--no-plots", "--from-runs",
                 str(tmp_path / "a_runs.jsonl"), str(tmp_path / "b_runs.jsonl")) == 0
    r3 = json.loads(only(out3, "*.json").read_text())
    assert [(x["repeat"], x["source"].split(":")[0]) for x in r3["runs"] if x["arm"] == "eagle3"] == [
        (1, "a_runs.jsonl"), (2, "b_runs.jsonl")]
    assert r3["verdict"]["checks"] == r["verdict"]["checks"] and r3["complete"]
    # ... but refuses runs measured with another config
    cfg.write_text(cfg.read_text().replace("output_len = 32", "output_len = 33"))
    assert bench("--config", str(cfg), "--out", str(out2), "--from-runs", str(runs_file)) == 2
    assert "measured with a different config" in capsys.readouterr().err


def test_profile_window_reads_real_lab_traces_and_keeps_them(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    # the fake servers hand out real rank-0 traces of the lab (2x H200, 10-layer pair, fusion off and on): the
    # receipt gets verify GPU time and the all-reduce + add/RMSNorm time inside it, and each trace is kept
    # next to its server log
    data = Path(__file__).resolve().parents[3] / "data"
    off = {"FAKE_ROUND_MS": "5", "FAKE_ACCEPT_LEN": "3",
           "FAKE_TRACE": str(data / "lab-h200x2-eagle3-fusion-off-TP-0.trace.json.gz")}
    on = {**off, "FAKE_TRACE": str(data / "lab-h200x2-eagle3-fusion-on-TP-0.trace.json.gz")}
    cfg = write_config(tmp_path, eagle_env=off, fusion_env=on, repeats=1, concurrency="[1]", model_dirs=True,
                       extra='[profile]\nsteps = 2\narms = ["eagle3", "eagle3+fusion"]\ntimeout_s = 20\n')
    out = tmp_path / "out"
    assert bench("--config", str(cfg), "--out", str(out)) == 0
    assert "all-reduce+norm kernels in verify ms 0.31 vs 0.23" in capsys.readouterr().out
    r = json.loads(only(out, "bench-eagle3_fake_*.json").read_text())
    assert validate_receipt(r) == []
    s = r["summary"]
    assert 2.7 < s["verify_ms_fusion_off"] < 2.9 and 3.1 < s["verify_ms_fusion_on"] < 3.3
    assert s["verify_allreduce_norm_ms_fusion_off"] == pytest.approx(0.1672 + 0.0601, abs=1e-3)
    assert s["verify_allreduce_norm_ms_fusion_on"] == pytest.approx(0.3075 + 0.003, abs=1e-3)
    runs = {x["arm"]: x for x in r["runs"]}
    assert runs["baseline"]["profile"] is None  # not in [profile] arms
    for arm in ("eagle3", "eagle3+fusion"):
        kept = Path(runs[arm]["log"]).with_name(runs[arm]["profile"]["trace"])
        assert kept.name.endswith(".trace.json.gz") and kept.stat().st_size == runs[arm]["profile"]["trace_bytes"]


def test_profile_window_reads_every_rank_and_takes_the_waits_out(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    # the fake servers hand out one trace per TP rank (FAKE_TRACE_TP1: rank 1's), synthetic two-rank traces of
    # the 61-layer shape where rank 1 starts most verify steps late: the summary's verify times are the true step
    # costs, not rank 0's inflated window, with the per-call medians, 121 fused calls per verify and the saving
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
    from support.kineto_trace import VerifyShape, rank_traces

    late = {(i, 1): 900.0 + 100.0 * i for i in range(0, 12, 2)} | {(3, 0): 700.0}
    env = {}
    for arm, shape in (("off", VerifyShape(layers=61, fusion=False)), ("on", VerifyShape(layers=61))):
        for r, tr in enumerate(rank_traces(shape, 11, late=late)):
            path = tmp_path / f"{arm}-TP-{r}.trace.json.gz"
            with gzip.open(path, "wt") as f:
                json.dump(tr.document(), f)
            env.setdefault(arm, {"FAKE_ROUND_MS": "5", "FAKE_ACCEPT_LEN": "3"})[
                "FAKE_TRACE" if r == 0 else f"FAKE_TRACE_TP{r}"] = str(path)
    cfg = write_config(tmp_path, eagle_env=env["off"], fusion_env=env["on"], repeats=1, concurrency="[1]",
                       model_dirs=True, extra='[profile]\nsteps = 2\narms = ["eagle3", "eagle3+fusion"]\n'
                                            'timeout_s = 20\n')
    out = tmp_path / "out"
    assert bench("--config", str(cfg), "--out", str(out)) == 0
    printed = capsys.readouterr()
    assert "every rank, waits for the other rank removed: verify ms 9.37 vs 10.15" in printed.out
    assert "121 fused all-reduces per verify" in printed.err  # the harness's progress line
    s = json.loads(only(out, "bench-eagle3_fake_*.json").read_text())["summary"]
    on, off = VerifyShape(layers=61).cost() / 1e3, VerifyShape(layers=61, fusion=False).cost() / 1e3
    assert s["verify_ms_fusion_on"] == pytest.approx(on, abs=1e-4)
    assert s["verify_ms_fusion_off"] == pytest.approx(off, abs=1e-4)
    assert s["verify_ms_rank0_fusion_on"] > on + 0.5 and s["verify_ms_basis"].startswith("every rank")
    assert (s["fused_call_us_p50"], s["unfused_call_us_p50"], s["fused_ar_per_verify"]) == (5.0, 11.0, 121)
    assert s["fusion_saving_predicted_ms"] == pytest.approx(0.726, abs=1e-4)
    assert s["fusion_saving_measured_ms"] == pytest.approx(off - on, abs=2e-4)
    runs = [json.loads(ln)["run"] for ln in only(out, "*_runs.jsonl").read_text().splitlines()]
    for run in runs:
        if run["arm"] == "baseline":
            continue
        prof = run["profile"]
        assert prof["verify_ranks"]["ranks"] == 2 and prof["traces"][1].endswith(".TP-1.trace.json.gz")
        for name in prof["traces"]:  # every rank's trace kept next to the server log
            assert (Path(run["log"]).parent / name).stat().st_size > 1000


def test_launch_mode_slow_eagle3_fails_on_acceptance(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    # 1.1 tokens per 7 ms round vs 1 token per 4 ms: ~0.6x (a loaded CI machine cannot flip that)
    cfg = write_config(tmp_path, eagle_env={"FAKE_ROUND_MS": "7", "FAKE_ACCEPT_LEN": "1.1"}, repeats=1,
                       concurrency="[1]", model_dirs=True)
    out = tmp_path / "out"
    assert bench("--config", str(cfg), "--out", str(out), "--no-plots") == 1
    assert "VERDICT: FAIL" in capsys.readouterr().out
    r = json.loads(only(out, "*.json").read_text())
    assert validate_receipt(r) == [] and r["summary"]["passed"] is False
    (check,) = r["verdict"]["checks"]
    assert not check["passed"] and check["median_ratio"] < 1.3
    assert check["diagnosis"]["regressed"] == ["acceptance"]
    assert check["accept_len"] < 1.3 and check["break_even_accept_len"] < 1.9


def test_attach_mode_and_streaming(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, stream=True, repeats=2, concurrency="[1]")
    servers = {}
    ctxs = []
    try:
        for arm, extra, env in (("baseline", [], {"FAKE_STEP_MS": "4"}),
                                ("eagle3", ["--speculative-algorithm", "EAGLE3"],
                                 {"FAKE_ROUND_MS": "6", "FAKE_ACCEPT_LEN": "3"})):
            port = free_port()
            s = Server(url=f"http://127.0.0.1:{port}", log_path=tmp_path / f"{arm}.log")
            cmd = [sys.executable, str(FAKE_SERVER), "--model-path", "/fake", "--port", str(port),
                   "--tp-size", "2", *extra]
            ctx = launched_server(s, cmd, {**os.environ, "SGLANG_RECORD_STEP_TIME": "1", **env},
                                  startup_timeout_s=20, grace_s=1)
            ctx.__enter__()
            ctxs.append(ctx)
            servers[arm] = s.url
        out = tmp_path / "out"
        assert bench("--config", str(cfg), "--out", str(out), "--no-plots",
                     "--attach", f"baseline={servers['baseline']}", f"eagle3={servers['eagle3']}") == 0
        r = json.loads(only(out, "*.json").read_text())
        assert r["mode"] == "attach" and r["summary"]["passed"] is True
        runs = r["runs"]
        assert [x["url"] for x in runs] == [servers["baseline"], servers["eagle3"]] * 2
        assert all(x["teardown"] is None and x["startup_s"] is None for x in runs)
        lv = runs[1]["levels"]["1"]
        assert lv["ttft_source"] == "stream" and 3 < lv["ttft_ms"] < 100 and lv["tpot_ms"] > 0
        assert lv["accept_len_server"] is not None  # spec totals reset before the window, read after

        # the wrong server attached to an arm is caught, and fails the verdict
        out3 = tmp_path / "out3"
        assert bench("--config", str(cfg), "--out", str(out3), "--no-plots", "--repeats", "1",
                     "--attach", servers["baseline"], servers["baseline"]) == 1
        r3 = json.loads(only(out3, "*.json").read_text())
        assert "reports speculative_algorithm=None" in r3["runs"][1]["error"]
        assert any("eagle3 repeat 1" in x for x in r3["verdict"]["reasons"])
    finally:
        for ctx in reversed(ctxs):
            ctx.__exit__(None, None, None)


def test_deadline_and_arm_selection(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = write_config(tmp_path, fusion_env={"FAKE_ROUND_MS": "5", "FAKE_ACCEPT_LEN": "3"}, repeats=2,
                       concurrency="[1]", model_dirs=True)
    out = tmp_path / "out"
    assert bench("--config", str(cfg), "--out", str(out), "--no-plots", "--arms", "baseline,eagle3",
                 "--deadline-s", "0.01") == 1
    err = capsys.readouterr().err
    assert "deadline:" in err and "skipping the last 3 arm run(s)" in err
    r = json.loads(only(out, "*.json").read_text())
    assert [x["arm"] for x in r["runs"]] == ["baseline"] and r["complete"] is False
    assert r["verdict"]["fusion"] is None  # eagle3+fusion was not selected
    assert "incomplete: baseline ran 1 of 2, eagle3 ran 0 of 2" in r["verdict"]["reasons"]


def test_attach_argument_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = write_config(tmp_path)
    assert bench("--config", str(cfg), "--attach", "http://127.0.0.1:1") == 2
    assert "--attach: 1 URL(s) for 2 arm(s)" in capsys.readouterr().err
    assert bench("--config", str(cfg), "--attach", "eagle=http://x", "baseline=http://y") == 2
    assert "arm 'eagle' is not among the selected arms" in capsys.readouterr().err


def test_from_runs_discards_per_stream_profiles() -> None:
    # the lab's 2026-11-30 runs recorded verify as 0.14 ms with fusion off: one span per CUDA stream (NCCL's
    # stream included) counted as a step; such stage times must not reach a receipt
    from sglang_blackwell.bench.eagle3.runs_file import PER_STREAM_PROFILE_SOURCE, _valid_profile

    old = {"source": PER_STREAM_PROFILE_SOURCE, "stages": {"verify": {"median_ms": 0.1444, "n": 462}}}
    fixed = _valid_profile(old)
    assert fixed["stages"] == {} and fixed["discarded_stages"] == old["stages"]
    assert "per CUDA stream" in fixed["discarded"]
    new = {"source": "GPU (gpu_user_annotation, window over streams)", "stages": {"verify": {"median_ms": 2.8}}}
    assert _valid_profile(new) == new and _valid_profile(None) is None
