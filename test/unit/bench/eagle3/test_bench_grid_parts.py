"""The grid's parts on their own: the Triton cache listing, the cross-check's command and the parsing of
bench_serving's result line (sglang 0.5.14's format), the kernel classes of a profiler trace, the per-cell verdict
on synthetic runs, and the README's grid block (generated, and current in benchmark/README.md)."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest
from bench_fakes import alive, write_grid_config

from sglang_blackwell.bench.eagle3 import crosscheck, grid_verdict, trace, triton_cache
from sglang_blackwell.bench.eagle3.config import load_config
from sglang_blackwell.bench.eagle3.config_section import ConfigError
from sglang_blackwell.bench.eagle3.readme_table import (
    BEGIN,
    END,
    GRID_BEGIN,
    GRID_END,
    current_block,
    grid_cell,
    grid_markdown,
    grid_section,
    load_receipts,
    markdown_table,
)
from sglang_blackwell.bench.eagle3.receipt import build_receipt
from sglang_blackwell.bench.eagle3.report import report_text
from sglang_blackwell.cli import main
from sglang_blackwell.receipts import write_receipt

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT / "test"))
from support.kineto_trace import class_trace  # noqa: E402

# ---- Triton cache ---------------------------------------------------------------------------------------------

def test_triton_cache_dir_follows_tritons_knobs() -> None:
    assert triton_cache.cache_dir({"TRITON_CACHE_DIR": "/x/c", "TRITON_HOME": "/h"}) == Path("/x/c")
    assert triton_cache.cache_dir({"TRITON_HOME": "/h", "HOME": "/home/u"}) == Path("/h/.triton/cache")
    assert triton_cache.cache_dir({"HOME": "/home/u"}) == Path("/home/u/.triton/cache")


def test_triton_compiles_are_the_new_entries_by_kernel_name(tmp_path: Path) -> None:
    assert triton_cache.snapshot(tmp_path / "missing") is None
    assert triton_cache.compiled(tmp_path / "missing", None)["new_entries"] is None
    (tmp_path / "old").mkdir()
    before = triton_cache.snapshot(tmp_path)
    for key, names in (("k1", ["assign_extend_cache_locs"]), ("k2", ["assign_extend_cache_locs"]),
                       ("k3", ["_fwd_kernel"])):
        (tmp_path / key).mkdir()
        for n in names:
            (tmp_path / key / f"{n}.json").write_text("{}")
            (tmp_path / key / f"__grp__{n}.json").write_text("{}")
            (tmp_path / key / f"{n}.cubin").write_bytes(b"")
    (tmp_path / "k4").mkdir()  # a launcher / utils entry: no kernel metadata
    (tmp_path / "k4" / "cuda_utils.so").write_bytes(b"")
    (tmp_path / "k5").mkdir()  # metadata without the group file (older Triton): the .json name counts
    (tmp_path / "k5" / "fused_moe_kernel.json").write_text("{}")
    got = triton_cache.compiled(tmp_path, before)
    assert got == {"dir": str(tmp_path), "new_entries": 5,
                   "kernels": {"_fwd_kernel": 1, "assign_extend_cache_locs": 2, "fused_moe_kernel": 1}}
    assert triton_cache.compiled(tmp_path, None)["new_entries"] == 6  # a cache that did not exist: all new
    assert triton_cache.summary_line(got) == ("5 Triton compile(s) (_fwd_kernel, assign_extend_cache_locs x2, "
                                              "fused_moe_kernel)")


# ---- the cross-check ------------------------------------------------------------------------------------------

# One line of `python -m sglang.bench_serving ... --output-file F` (sglang 0.5.14 bench_serving.py benchmark(): the
# `result` dict, every key in its order; a run of 8 random-ids prompts of 2048 tokens at --max-concurrency 1)
REAL_LINE = json.dumps({
    "tag": None, "backend": "sglang-oai", "dataset_name": "random-ids", "request_rate": float("inf"),
    "max_concurrency": 1, "sharegpt_output_len": None, "random_input_len": 2048, "random_output_len": 256,
    "random_range_ratio": 1.0,
    "server_info": {"model_path": "/tmp/lab61/target", "speculative_algorithm": "EAGLE3", "version": "0.5.14",
                    "internal_states": [{"avg_spec_accept_length": 2.04, "last_gen_throughput": 151.2}]},
    "duration": 14.52, "completed": 8, "total_input_tokens": 16384, "total_input_text_tokens": 16384,
    "total_input_vision_tokens": 0, "total_output_tokens": 2048, "total_output_tokens_retokenized": 2046,
    "request_throughput": 0.551, "input_throughput": 1128.4, "output_throughput": 141.05,
    "total_throughput": 1269.4, "mean_e2e_latency_ms": 1814.2, "median_e2e_latency_ms": 1810.9,
    "std_e2e_latency_ms": 12.1, "p90_e2e_latency_ms": 1830.3, "p95_e2e_latency_ms": 1834.0,
    "p99_e2e_latency_ms": 1838.5, "mean_ttft_ms": 71.3, "median_ttft_ms": 70.8, "std_ttft_ms": 2.2,
    "p90_ttft_ms": 73.9, "p95_ttft_ms": 74.4, "p99_ttft_ms": 74.9, "mean_tpot_ms": 6.83, "median_tpot_ms": 6.82,
    "std_tpot_ms": 0.05, "p90_tpot_ms": 6.9, "p95_tpot_ms": 6.91, "p99_tpot_ms": 6.93, "mean_itl_ms": 6.85,
    "median_itl_ms": 5.61, "std_itl_ms": 3.2, "p90_itl_ms": 11.9, "p95_itl_ms": 12.1, "p99_itl_ms": 13.4,
    "concurrency": 0.99, "accept_length": 2.04, "max_output_tokens_per_s": 183.0, "max_concurrent_requests": 1})


def test_parse_result_reads_bench_servings_line() -> None:
    got = crosscheck.parse_result("some other run\n" + REAL_LINE.replace("141.05", "99.0") + "\n" + REAL_LINE + "\n")
    assert got == {"output_throughput": 141.05, "median_tpot_ms": 6.82, "p99_tpot_ms": 6.93, "median_ttft_ms": 70.8,
                   "p99_ttft_ms": 74.9, "median_itl_ms": 5.61, "p99_itl_ms": 13.4, "median_e2e_latency_ms": 1810.9,
                   "completed": 8, "duration": 14.52, "total_input_tokens": 16384, "total_output_tokens": 2048,
                   "max_concurrency": 1, "accept_length": 2.04}  # the last run's line wins
    assert crosscheck.parse_result("") is None and crosscheck.parse_result('{"x": 1}\nnot json\n') is None


def test_failure_reasons_are_one_line() -> None:
    traceback = ("Traceback (most recent call last):\n  File \"x.py\", line 8, in <module>\n"
                 "    from datasets import load_dataset\nModuleNotFoundError: No module named 'datasets'\n")
    assert crosscheck.failure_reason(1, traceback, "python3") == (
        "sglang.bench_serving cannot start: No module named 'datasets' (python3 lacks it; exit 1)")
    assert crosscheck.failure_reason(1, "benchmark_args=...\nValueError: Warmup failed - bad\n", "py") == (
        "exit 1: ValueError: Warmup failed - bad")
    assert crosscheck.failure_reason(None, "python9: No such file or directory\n", "python9") == (
        "exit None: python9: No such file or directory")
    assert crosscheck.failure_reason(0, "", "p") == "exit 0, no output"


def test_crosscheck_command_flags_are_bench_servings(tmp_path: Path) -> None:
    cfg = load_config(write_grid_config(tmp_path, extra="[crosscheck]\ncells = [[64, 2]]\nnum_prompts = 3"))
    assert cfg.crosscheck is not None
    cmd = crosscheck.command(cfg.crosscheck, "http://127.0.0.1:5", "/tok", 64, 2, 24, tmp_path / "o.jsonl")
    assert cmd == ["python3", "-m", "sglang.bench_serving", "--backend", "sglang-oai", "--base-url",
                   "http://127.0.0.1:5", "--dataset-name", "random-ids", "--random-input-len", "64",
                   "--random-output-len", "24", "--random-range-ratio", "1.0", "--num-prompts", "3",
                   "--max-concurrency", "2", "--tokenizer", "/tok", "--output-file", str(tmp_path / "o.jsonl"),
                   "--disable-tqdm", "--flush-cache"]
    src = os.environ.get("SGLANG_SRC")
    if not src:
        pytest.skip("set SGLANG_SRC to an unpacked sglang 0.5.14 package dir to check the flags against its "
                    "bench_serving.py")
    text = (Path(src) / "bench_serving.py").read_text()
    defined = set(re.findall(r'add_argument\(\s*"(--[a-z0-9-]+)"', text))
    assert {a for a in cmd if a.startswith("--")} <= defined
    assert '"random-ids"' in text and '"sglang-oai": async_request_openai_completions' in text
    for key in crosscheck.RESULT_KEYS:  # every key we keep is one its result line writes
        assert f'"{key}":' in text, key


def test_crosscheck_is_bounded_by_what_is_left_of_the_run_deadline(tmp_path: Path) -> None:
    """Past the run's --deadline-s (before its own timeout_s) its whole process group is killed, with a one-line
    reason; once the deadline has come it does not start."""
    from sglang_blackwell.bench.eagle3 import transport

    pids = tmp_path / "pids"
    cmd = ["sh", "-c", f"sleep 60 & echo $$ $! > {pids}; wait"]
    try:
        transport.set_run_deadline(1.0)
        rc, wall, killed = crosscheck._run(cmd, dict(os.environ), tmp_path / "log", timeout_s=60)
        assert killed and killed.startswith("--deadline-s 1 reached: the run's time was up, after ") and wall < 10
        assert killed.endswith("its process group was killed") and "\n" not in killed
        assert not any(alive(int(p)) for p in pids.read_text().split())
        rc, wall, killed = crosscheck._run(cmd, dict(os.environ), tmp_path / "log", timeout_s=60)
        assert rc is None and wall == 0 and killed.endswith("before it started: not run")
        transport.set_run_deadline(None)  # its own timeout_s alone
        rc, wall, killed = crosscheck._run(cmd, dict(os.environ), tmp_path / "log", timeout_s=1)
        assert killed.startswith("timed out after 1 s ([crosscheck] timeout_s), after ")
    finally:
        transport.set_run_deadline(None)


# ---- kernel classes -------------------------------------------------------------------------------------------

def test_kernel_classes_per_step_from_a_trace() -> None:
    kernels = [("_fwd_kernel", 50.0), ("_verify_shared_kv_stage1", 30.0), ("_verify_shared_kv_merge", 10.0),
               ("void VerifyTreeGreedy<int, long>(int*)", 5.0), ("fused_moe_kernel", 200.0),
               ("nvjet_sm90_tst_64x8_64x16_2x1_v_bz_TNT", 100.0),
               ("void flashinfer::norm::FusedAddRMSNormKernel<8u, __nv_bfloat16>(...)", 20.0),
               ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 40.0),
               ("void (anonymous namespace)::fused_rope_kernel<false>(...)", 4.0),
               ("void (anonymous namespace)::act_and_mul_kernel<__nv_bfloat16>(...)", 6.0),
               ("assign_extend_cache_locs", 3.0), ("some_unknown_kernel", 2.0)]
    got = trace.kernel_classes(class_trace(5, kernels, memcpy_us=7.0).events)
    assert list(got) == ["verify"]
    v = got["verify"]
    assert v["steps"] == 5 and v["method"] == "correlation"
    assert v["classes"] == {"allreduce": 0.04, "attention": 0.09, "moe": 0.2, "norm": 0.02, "rope": 0.004,
                            "activation": 0.006, "gemm": 0.1, "copy/elementwise": 0.01, "other": 0.007}
    assert v["kernel_ms"] == pytest.approx(0.477) and v["top"][0] == {
        "name": "fused_moe_kernel", "class": "moe", "ms": 0.2, "calls": 1.0}
    assert len(v["top"]) == 10 and v["gpu_window_ms"] == pytest.approx(0.477 + 0.012)  # + 1 us gaps


def test_kernel_classes_of_the_real_lab_trace_match_its_verify_window() -> None:
    events = trace.load_trace(ROOT / "test" / "data" / "lab-h200x2-eagle3-fusion-off-TP-0.trace.json.gz")
    got = trace.kernel_classes(events)
    assert set(got) == {"verify", "draft", "draft_extend"}
    v = got["verify"]
    assert v["steps"] == 4 and v["gpu_window_ms"] == pytest.approx(trace.stage_times(events)["stages"]["verify"]
                                                                   ["median_ms"], abs=0.01)
    assert v["classes"]["other"] == 0.0 and v["classes"]["attention"] > 0.3 and v["classes"]["moe"] > 0.7
    assert v["classes"]["allreduce"] == pytest.approx(trace.stage_times(events)["stages"]["verify"]["allreduce_ms"],
                                                      abs=0.01)


# ---- the per-cell verdict on synthetic runs -------------------------------------------------------------------

def _cell(tok_s: float, first_tok_s: float, step_ms: float, accept: float | None, compiles: int = 0) -> dict:
    kernels = {"assign_extend_cache_locs": compiles} if compiles else {}
    return {"tok_s": tok_s, "step_ms": step_ms, "accept_len": accept, "ttft_ms": 20.0, "ttft_ms_p99": 30.0,
            "itl_ms": 5.0, "itl_ms_p99": 9.0, "triton_compiles": {"new_entries": 0, "kernels": {}},
            "first": {"tok_s": first_tok_s, "wall_s": 1.0, "ttft_ms": 25.0, "e2e_ms": 900.0,
                      "triton_compiles": {"new_entries": compiles, "kernels": kernels}}}


def _runs(spec_64x1: float = 1500.0, spec_first_16x2: float = 1900.0) -> list[dict]:
    host = {"machine": {"gpu_name": "NVIDIA H200", "gpu_count": 1}, "versions": {"sglang": "0.5.14"}}
    base = {"16": {"1": _cell(1000, 990, 8.0, None), "2": _cell(1900, 1880, 8.2, None)},
            "64": {"1": _cell(1000, 1000, 8.1, None), "2": _cell(1900, 1900, 8.3, None)}}
    spec = {"16": {"1": _cell(1450, 1400, 11.0, 2.9), "2": _cell(2100, spec_first_16x2, 11.2, 2.9, compiles=2)},
            "64": {"1": _cell(spec_64x1, 1450, 12.0, 2.9), "2": _cell(2000, 1990, 12.5, 2.88)}}
    prof = {"16": {"kernel_classes": {"verify": {"classes": {"attention": 0.3, "moe": 1.0}, "kernel_ms": 1.3,
                                                 "gpu_window_ms": 1.4, "steps": 8}}},
            "64": {"kernel_classes": {"verify": {"classes": {"attention": 1.1, "moe": 1.05}, "kernel_ms": 2.15,
                                                 "gpu_window_ms": 2.2, "steps": 8}}}}
    return [{"arm": "baseline", "repeat": 1, "mode": "launch", "error": None, "profile": None, "host": host,
             "server": {"version": "0.5.14"}, "levels": {}, "cells": base, "profiles": {}},
            {"arm": "eagle3", "repeat": 1, "mode": "launch", "error": None, "profile": None, "host": host,
             "server": {"version": "0.5.14"}, "levels": {}, "cells": spec, "profiles": prof}]


@pytest.fixture
def grid_cfg(tmp_path: Path):
    p = write_grid_config(tmp_path, verdict_extra="first_burst_min_ratio = 0.85\naccept_len_tolerance = 0.1",
                          min_ratio="{ 16 = { 1 = 1.35, 2 = 1.05 }, 64 = { 1 = 1.35 } }")
    p.write_text(p.read_text().replace("expect_accept_len = 2.5", "expect_accept_len = 2.9"))
    return load_config(p)


def test_grid_verdict_per_cell_with_first_burst_and_accept(grid_cfg) -> None:
    r = build_receipt(grid_cfg, ["baseline", "eagle3"], _runs(), repeats=1, mode="launch")
    v, s = r["verdict"], r["summary"]
    assert v["passed"] is True and s["passed"] is True and not v["reasons"]
    row = next(t for t in v["table"] if (t["context"], t["concurrency"]) == (16, 2))
    assert row == {**row, "median_ratio": pytest.approx(2100 / 1900, abs=1e-4), "accept_len": 2.9,
                   "first_burst_ratio": pytest.approx(1900 / 1880, abs=1e-4), "round_ms": 11.2, "decode_ms": 8.2,
                   "break_even_accept_len": pytest.approx(11.2 / 8.2, abs=1e-4), "ttft_ms": 20.0,
                   "baseline_itl_ms_p99": 9.0, "min_ratio": 1.05, "passed": True}
    assert s["speedup_c1"] == 1.45 and s["tok_s_c1"] == 1450 and s["baseline_tok_s_c1"] == 1000
    assert s["break_even_accept_len"] == pytest.approx(11.0 / 8.0, abs=1e-4) and s["accept_len"] == 2.9
    assert s["grid_passed"] == ["16x1", "16x2", "64x1", "64x2"] and s["contexts"] == [16, 64]
    assert s["first_burst_min_ratio"] == 0.85 and set(s["grid"][0]) == set(grid_verdict.COMPACT)
    assert v["kernel_growth"]["eagle3"] == {"stage": "verify", "class": "attention", "from_context": 16,
                                            "to_context": 64, "from_ms": 0.3, "to_ms": 1.1, "growth_ms": 0.8}
    text = report_text(r)
    assert "      16     1.45x / 1.41x pass     1.11x / 1.01x pass" in text


def test_grid_verdict_fails_a_cell_and_a_first_burst_with_their_reasons(grid_cfg) -> None:
    r = build_receipt(grid_cfg, ["baseline", "eagle3"], _runs(spec_64x1=1200.0, spec_first_16x2=1000.0),
                      repeats=1, mode="launch")
    v, s = r["verdict"], r["summary"]
    assert v["passed"] is False and s["grid_failed"] == ["16x2", "64x1"]
    assert v["reasons"] == [
        "context 64, concurrency 1, eagle3: worst 1200.0 tok/s < 1.35 x best baseline 1000 tok/s",
        "context 16, concurrency 2, eagle3 first burst: first burst 0.476 x its warm tok/s < 0.85; 2 Triton "
        "compile(s) during the burst (assign_extend_cache_locs)"]
    bad = next(k for k in v["checks"] if k.get("context") == 64 and not k["passed"])
    assert "attention from context 16 to 64: 0.300 -> 1.100 ms per step (+0.800 ms)" in " ".join(
        bad["diagnosis"]["notes"])
    assert s["speedup_c1"] == 1.45  # the smallest context's c=1 cell, which passed


def test_grid_accept_length_is_checked_in_every_cell(grid_cfg) -> None:
    runs = _runs()
    runs[1]["cells"]["64"]["2"]["accept_len"] = 2.5  # a cell without a ratio bar
    r = build_receipt(grid_cfg, ["baseline", "eagle3"], runs, repeats=1, mode="launch")
    assert r["summary"]["grid_failed"] == ["64x2"]
    assert r["verdict"]["reasons"] == ["context 64, concurrency 2, eagle3: accept length 2.5000 outside 2.9 +- 0.1"]


def test_grid_on_the_decode_rate_reads_its_first_bursts_on_that_rate_and_catches_a_decode_stall(
        tmp_path: Path) -> None:
    """With metric decode_tok_s (prefill excluded) the first bursts' ratio beside the warm one is on the decode
    rate too (baseline's first-burst TPOT over the arm's), in the verdict's table and the README cell; output
    tok/s, which holds the prefill, is kept as first_burst_ratio. A first burst whose decode steps alone stall (its
    output tok/s within the bar, as when the prefill dominates a long-context window) fails the first-burst check."""
    p = write_grid_config(tmp_path, verdict_extra='first_burst_min_ratio = 0.85\nmetric = "decode_tok_s"',
                          min_ratio="{ 16 = { 1 = 1.3, 2 = 1.05 }, 64 = { 1 = 1.3 } }")
    cfg = load_config(p)
    runs = _runs()
    tpot = {"baseline": (8.0, 8.8), "eagle3": (5.0, 5.0)}  # (warm, first burst): a decode ratio of 1.6 warm
    for run in runs:
        for cells in run["cells"].values():
            for cell in cells.values():
                cell["tpot_ms"], cell["first"]["tpot_ms"] = tpot[run["arm"]]
    runs[1]["cells"]["64"]["1"]["first"]["tpot_ms"] = 5.0 / 0.8  # this cell's first burst decodes at 0.8 x warm
    r = build_receipt(cfg, ["baseline", "eagle3"], runs, repeats=1, mode="launch")
    row = next(t for t in r["verdict"]["table"] if (t["context"], t["concurrency"]) == (16, 1))
    assert row["median_ratio"] == pytest.approx(8.0 / 5.0, abs=1e-4)
    assert row["first_burst_decode_ratio"] == pytest.approx(8.8 / 5.0, abs=1e-4)
    assert row["first_burst_ratio"] == pytest.approx(1400 / 990, abs=1e-4)  # output tok/s, as before
    assert grid_cell(row, row["first_burst_decode_ratio"]).startswith("1.60x (first 1.76x)")
    fb = [k for k in r["verdict"]["checks"] if k.get("kind") == "first_burst"]
    (bad,) = [k for k in fb if not k["passed"]]
    assert (bad["context"], bad["concurrency"], bad["arm"]) == (64, 1, "eagle3")
    assert bad["first_over_warm_decode"] == pytest.approx(0.8, abs=1e-4) and bad["first_over_warm"] > 0.85
    assert bad["why"] == "first burst 0.800 x its warm decode rate < 0.85"
    assert all(k["first_over_warm_decode"] == pytest.approx(8.0 / 8.8, abs=1e-4) for k in fb
               if k["arm"] == "baseline")
    section = grid_section(tmp_path / "r.json", r, None)
    assert "| 16 | 1.60x (first 1.76x), accept 2.90 |" in section
    assert "| 64 | 1.60x (first 1.41x), accept 2.90 **FAIL** |" in section


# ---- the README's grid block ----------------------------------------------------------------------------------

def test_grid_block_from_receipts_and_update(grid_cfg, tmp_path: Path) -> None:
    results = tmp_path / "results"
    old = build_receipt(grid_cfg, ["baseline", "eagle3"], _runs(spec_64x1=1200.0), repeats=1, mode="launch")
    old["created"] = "2026-12-01T00:00:00+00:00"
    new = build_receipt(grid_cfg, ["baseline", "eagle3"], _runs(), repeats=1, mode="launch")
    new["created"] = "2026-12-02T00:00:00+00:00"
    new["plots"] = ["bench-eagle3_fakegrid_new_grid.png"]
    write_receipt(old, results / "bench-eagle3_fakegrid_old.json")
    write_receipt(new, results / "bench-eagle3_fakegrid_new.json")
    block = grid_markdown(load_receipts(results), link_base=tmp_path)
    assert block.splitlines() == [
        "**fakegrid**: 1x NVIDIA H200, TP 1, sglang 0.5.14, eagle3 / baseline (warm, first burst), verdict pass, "
        "2026-12-02: [bench-eagle3_fakegrid_new.json](results/bench-eagle3_fakegrid_new.json), "
        "[heatmap](results/bench-eagle3_fakegrid_new_grid.png)",
        "", "| context | c=1 | c=2 |", "|---|---|---|",
        "| 16 | 1.45x (first 1.41x), accept 2.90 | 1.11x (first 1.01x), accept 2.90 |",
        "| 64 | 1.50x (first 1.45x), accept 2.90 | 1.05x (first 1.05x), accept 2.88 |"]
    assert "**FAIL**" in grid_markdown([(p, r) for p, r in load_receipts(results) if "old" in p.name])
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n{BEGIN}\nstale\n{END}\n\n{GRID_BEGIN}\nstale grid\n{GRID_END}\ntail\n")
    assert main(["bench", "table", "--results", str(results), "--update", str(readme)]) == 0
    assert current_block(readme, GRID_BEGIN, GRID_END) == block and "stale" not in readme.read_text()
    # a grid receipt is shown by its grid block only: a results row (one c=1 ratio) would hide its cells, and of
    # two receipts from the same runs (one judging another arm, e.g. a patch off) it would show only the newest
    assert "fakegrid" not in current_block(readme)
    only_results = tmp_path / "R.md"  # a file with the results block alone (the top-level README): left so
    only_results.write_text(f"{BEGIN}\n{END}\n")
    assert main(["bench", "table", "--results", str(results), "--update", str(only_results)]) == 0
    assert GRID_BEGIN not in only_results.read_text()


@pytest.mark.parametrize("readme", ["README.md", "benchmark/README.md"])
def test_readme_blocks_are_current(readme: str) -> None:
    path = ROOT / readme
    receipts = load_receipts(ROOT / "benchmark" / "results")
    assert current_block(path) == markdown_table(receipts, link_base=path.parent), (
        f"{readme}'s results table is stale: run `sglang-blackwell bench table --update {readme}`")
    if GRID_BEGIN in path.read_text():
        assert current_block(path, GRID_BEGIN, GRID_END) == grid_markdown(receipts, link_base=path.parent), (
            f"{readme}'s grid block is stale: run `sglang-blackwell bench table --update {readme}`")
    else:
        assert readme == "README.md"  # benchmark/README.md must have the grid block


def test_first_burst_bar_takes_the_worst_repeat(grid_cfg) -> None:
    one, two = _runs(), _runs()
    for r in two:
        r["repeat"] = 2
    two[1]["cells"]["16"]["1"]["first"]["tok_s"] = 700.0  # repeat 2 of eagle3 stalls on its first burst
    r = build_receipt(grid_cfg, ["baseline", "eagle3"], [one[0], one[1], two[0], two[1]], repeats=2, mode="launch")
    (bad,) = [k for k in r["verdict"]["checks"] if not k["passed"]]
    assert (bad["kind"], bad["context"], bad["concurrency"], bad["arm"]) == ("first_burst", 16, 1, "eagle3")
    assert bad["first_over_warm"] == pytest.approx(700 / 1450, abs=1e-4) and len(bad["values"]) == 2


def test_grid_block_has_a_section_per_judged_arm_the_verdicts_first(grid_cfg, tmp_path: Path) -> None:
    """Two receipts of the same runs, one judging another arm (`--arms baseline,<arm>`, e.g. a patch off): both
    shown, each named by the arm it judges, the config's verdict arm first though the other is newer."""
    import copy

    from sglang_blackwell.bench.eagle3.readme_table import judged_arm

    results = tmp_path / "results"
    main_r = build_receipt(grid_cfg, ["baseline", "eagle3"], _runs(), repeats=1, mode="launch")
    main_r["created"] = "2026-12-01T00:00:00+00:00"
    other = copy.deepcopy(main_r)
    other["created"] = "2026-12-02T00:00:00+00:00"
    for row in other["verdict"]["table"]:
        row["arm"] = "eagle3-patch-off"
    write_receipt(main_r, results / "bench-eagle3_fakegrid_a.json")
    write_receipt(other, results / "bench-eagle3_fakegrid_b.json")
    assert (judged_arm(main_r), judged_arm(other)) == ("eagle3", "eagle3-patch-off")
    heads = [ln for ln in grid_markdown(load_receipts(results)).splitlines() if ln.startswith("**fakegrid**")]
    assert len(heads) == 2 and "eagle3 / baseline" in heads[0] and "eagle3-patch-off / baseline" in heads[1]


def test_grid_block_shows_every_speculative_arm_of_a_receipt(grid_cfg, tmp_path: Path) -> None:
    """A receipt judging two speculative arms (both drafts, GQA and MLA): a section for each, named by its arm and
    holding that arm's own cells, in the config's verdict order; the summary's arm (the first) is the one named
    first. A section must never carry one arm's name over another's numbers."""
    import copy

    from sglang_blackwell.bench.eagle3.readme_table import judged_arm

    r = build_receipt(grid_cfg, ["baseline", "eagle3"], _runs(), repeats=1, mode="launch")
    mla = [{**copy.deepcopy(t), "arm": "eagle3-mla", "median_ratio": 1.99} for t in r["verdict"]["table"]]
    r["verdict"]["table"] += mla
    r["config"]["content"]["verdict"]["speculative"] = ["eagle3-mla", "eagle3"]
    write_receipt(r, tmp_path / "results" / "bench-eagle3_fakegrid_two.json")
    assert judged_arm(r) == "eagle3-mla"
    block = grid_markdown(load_receipts(tmp_path / "results"))
    sections = block.split("\n\n**")
    assert len(sections) == 2 and "eagle3-mla / baseline" in sections[0] and "eagle3 / baseline" in sections[1]
    assert "1.99x" in sections[0] and "1.99x" not in sections[1]
    assert "| 16 | 1.45x (first" in sections[1] and "| 16 | 1.45x (first" not in sections[0]


def test_decode_metric_judges_the_decode_rate_not_the_prefill_bound_window(tmp_path: Path) -> None:
    """[verdict] metric = "decode_tok_s": a long-context cell whose window is mostly prefill (tok/s nearly equal)
    passes on the decode rate (c x 1000 / TPOT p50) and fails when the TPOTs are close; the default metric keeps
    judging the window's tok/s."""
    p = write_grid_config(tmp_path, verdict_extra="", min_ratio="{ 16 = { 1 = 1.3, 2 = 1.3 }, 64 = { 1 = 1.3 } }")

    def runs(spec_tpot: float) -> list[dict]:
        rs = _runs()
        for r in rs:
            for per_c in r["cells"].values():
                for cell in per_c.values():
                    cell["tok_s"] = 100.0 if r["arm"] == "baseline" else 105.0  # the prefill-bound window
                    cell["tpot_ms"] = 12.0 if r["arm"] == "baseline" else spec_tpot
        return rs

    text = p.read_text().replace("[verdict]\n", "[verdict]\nmetric = \"decode_tok_s\"\n", 1)
    p.write_text(text)
    decode = load_config(p)
    assert decode.verdict.metric == "decode_tok_s"
    good = build_receipt(decode, ["baseline", "eagle3"], runs(spec_tpot=7.5), repeats=1, mode="launch")["verdict"]
    assert good["passed"] is True, good["reasons"]
    row = next(t for t in good["table"] if (t["context"], t["concurrency"]) == (64, 1))
    assert row["median_ratio"] == pytest.approx(12.0 / 7.5, abs=1e-4) and "TPOT" in good["rule"]
    bad = build_receipt(decode, ["baseline", "eagle3"], runs(spec_tpot=10.0), repeats=1, mode="launch")["verdict"]
    assert bad["passed"] is False
    k = next(k for k in bad["checks"] if k.get("context") == 64 and k["concurrency"] == 1)
    assert k["metric"] == "decode_tok_s" and k["worst_over_best"] == pytest.approx(12.0 / 10.0, abs=1e-4)
    p.write_text(text.replace('metric = "decode_tok_s"\n', ""))
    window = build_receipt(load_config(p), ["baseline", "eagle3"], runs(spec_tpot=7.5), repeats=1, mode="launch")
    assert window["verdict"]["passed"] is False  # 105 / 100 tok/s: the window's rate fails the 1.3 bars
    p.write_text(text.replace('metric = "decode_tok_s"', 'metric = "tpot"'))
    with pytest.raises(ConfigError, match="metric"):
        load_config(p)
