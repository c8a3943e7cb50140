"""Each launched arm run records what its server compiled while it started (`startup_triton_compiles`: the entries
its Triton cache gained between the launch and /health 200; issue 31 item 5: a cache carried to a fresh machine must
be seen to hit), against real fake-server processes that compile FAKE_STARTUP_COMPILES kernels at start unless
their cache holds them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_fakes import write_grid_config

from sglang_blackwell.cli import main

from .test_bench_grid_e2e import runs_of

FAST = {"FAKE_ROUND_MS": "5", "FAKE_ACCEPT_LEN": "3"}


def _bench(tmp: Path, cache: Path, name: str) -> dict[str, dict]:
    env = {"TRITON_CACHE_DIR": str(cache), "FAKE_STARTUP_COMPILES": "3"}
    cfg = write_grid_config(tmp / name, baseline_env=env, eagle_env={**FAST, **env}, contexts="[16]",
                            concurrency="[1]", min_ratio="{ 16 = { 1 = 1.0 } }")
    out = tmp / name / "out"
    main(["bench", "eagle3", "--config", str(cfg), "--out", str(out), "--no-plots"])
    return {r["arm"]: r for r in runs_of(out)}


def test_the_first_start_compiles_and_a_start_on_its_cache_compiles_nothing(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]):
    cache = tmp_path / "triton"
    first = _bench(tmp_path, cache, "a")
    started = first["baseline"]["startup_triton_compiles"]
    assert (started["dir"], started["new_entries"]) == (str(cache), 3)
    assert started["kernels"] == {f"startup_kernel_{i}": 1 for i in range(3)}
    assert first["eagle3"]["startup_triton_compiles"]["new_entries"] == 0  # the baseline's start filled the cache
    assert "3 Triton compile(s) (startup_kernel_0, startup_kernel_1, startup_kernel_2) while starting" in \
        capsys.readouterr().err
    again = _bench(tmp_path, cache, "b")  # a later server on the same (carried) cache
    assert [again[a]["startup_triton_compiles"]["new_entries"] for a in ("baseline", "eagle3")] == [0, 0]
    fresh = _bench(tmp_path, tmp_path / "empty", "c")  # a fresh machine's empty cache compiles again
    assert fresh["baseline"]["startup_triton_compiles"]["new_entries"] == 3
    assert json.dumps(fresh["baseline"]["startup_triton_compiles"])  # recorded as JSON in the runs file


def test_the_report_lists_each_start_with_its_compiles():
    from sglang_blackwell.bench.eagle3.report import startup_line

    runs = [{"arm": "baseline", "repeat": 1, "startup_s": 65.61, "startup_triton_compiles": {"new_entries": 12}},
            {"arm": "eagle3", "repeat": 1, "startup_s": 77.6},  # recorded before compiles were counted
            {"arm": "eagle3", "repeat": 2, "startup_s": None}]  # attached or failed: no start of ours
    assert startup_line(runs) == ("startup (time to healthy, Triton compiles while starting): baseline r1 65.6 s "
                                  "(12), eagle3 r1 77.6 s (-)")
    assert startup_line([]) == ""
