"""Hostile input, round 3 class 2 (issue 32): a bad measurement never passes. A runs file (`bench eagle3
--from-runs`) or a receipt (`bench table`) carrying NaN, Infinity, a zero or negative rate, an implausible value or
a number of hundreds of digits is refused before any verdict or table uses it: exit 2, one line naming the run (file
and line), the arm, the level or cell and the field; nothing written; the README never shows nan or inf."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from bench_fakes import write_config, write_grid_config

from support import hostile
from support.hostile import Case, assert_clean

OUT = "out"
RUNS = "r_runs.jsonl"
SCHEMA = "sglang-blackwell/bench-eagle3-run/1"
HOST = {"machine": {"gpu_name": "NVIDIA H200", "gpu_count": 2}, "versions": {"sglang": "0.5.14"}}


def level(tok_s: Any = 500.0, **kw: Any) -> dict[str, Any]:
    return {"tok_s": tok_s, "step_ms": 4.0, "accept_len": None, "ttft_ms": 10.0, "tpot_ms": 2.0, "e2e_ms": 70.0,
            **kw}


def run(arm: str, levels: dict[str, Any], **kw: Any) -> dict[str, Any]:
    return {"arm": arm, "mode": "launch", "error": None, "profile": None, "host": HOST,
            "server": {"version": "0.5.14"}, "levels": levels, **kw}


def _lines(cfg_path: Path, runs: list[dict[str, Any]]) -> str:
    """The runs as the harness appends them (json.dumps writes NaN / Infinity as those literals)."""
    from sglang_blackwell.bench.eagle3.config import load_config

    sha = load_config(cfg_path).sha256
    return "".join(json.dumps({"schema": SCHEMA, "config": "fake", "config_sha256": sha, "run": r}) + "\n"
                   for r in runs)


def runs_setup(baseline: dict[str, Any], eagle3: dict[str, Any], *, raw: Callable[[str], str] | None = None,
               grid: bool = False) -> Callable[[Path], None]:
    """The fake 2-arm config and a runs file of one baseline and one eagle3 run; `raw` edits the file's text
    (numbers JSON can hold that json.dumps does not write: 1e400, 310 digits)."""
    def setup(tmp: Path) -> None:
        if grid:
            (tmp / "fake.toml").write_text(write_grid_config(tmp).read_text().replace('name = "fakegrid"',
                                                                                      'name = "fake"'))
        else:
            write_config(tmp, repeats=1, concurrency="[1]")
        text = _lines(tmp / "fake.toml", [baseline, eagle3])
        (tmp / RUNS).write_text(raw(text) if raw else text)
    return setup


def from_runs(id: str, names: tuple[str, ...], setup: Callable[[Path], None]) -> Case:
    return Case(id, "32.2", ["bench", "eagle3", "--config", "{tmp}/fake.toml", "--out", "{tmp}/" + OUT, "--no-plots",
                             "--from-runs", "{tmp}/" + RUNS], names=names, setup=setup, watch=(OUT, RUNS))


def eagle(tok_s: Any = 800.0, **kw: Any) -> dict[str, Any]:
    return run("eagle3", {"1": level(tok_s, accept_len=2.6, **kw)})


def base(tok_s: Any = 500.0, **kw: Any) -> dict[str, Any]:
    return run("baseline", {"1": level(tok_s, **kw)})


def at(line: int, arm: str, field: str) -> tuple[str, ...]:
    return (f"{RUNS}:{line}", f"arm {arm}", field)


DIGITS_310 = "9" * 310

FROM_RUNS = [
    from_runs("runs-eagle-tok-s-infinity", at(2, "eagle3", "levels.1.tok_s"),
              runs_setup(base(), eagle(float("inf")))),
    from_runs("runs-eagle-tok-s-nan", at(2, "eagle3", "levels.1.tok_s"), runs_setup(base(), eagle(float("nan")))),
    from_runs("runs-baseline-negative", at(1, "baseline", "levels.1.tok_s"), runs_setup(base(-5.0), eagle())),
    from_runs("runs-baseline-zero", at(1, "baseline", "levels.1.tok_s"), runs_setup(base(0), eagle())),
    from_runs("runs-tok-s-310-digits", at(2, "eagle3", "levels.1.tok_s"),
              runs_setup(base(), eagle(123456.0), raw=lambda t: t.replace("123456.0", DIGITS_310))),
    from_runs("runs-tok-s-1e400", at(2, "eagle3", "levels.1.tok_s"),
              runs_setup(base(), eagle(123456.0), raw=lambda t: t.replace("123456.0", "1e400"))),
    from_runs("runs-tok-s-5000-digits", (f"{RUNS}:2",),
              runs_setup(base(), eagle(123456.0), raw=lambda t: t.replace("123456.0", "7" * 5000))),
    from_runs("runs-tok-s-implausible", at(2, "eagle3", "levels.1.tok_s"), runs_setup(base(), eagle(1e12))),
    from_runs("runs-accept-negative", at(2, "eagle3", "levels.1.accept_len"),
              runs_setup(base(), run("eagle3", {"1": level(800.0, accept_len=-1.0)}))),
    from_runs("runs-ttft-nan", at(1, "baseline", "levels.1.ttft_ms"), runs_setup(base(ttft_ms=float("nan")), eagle())),
    from_runs("runs-step-ms-zero", at(2, "eagle3", "levels.1.step_ms"), runs_setup(base(), eagle(step_ms=0.0))),
    from_runs("runs-profile-stage-infinity", at(2, "eagle3", "profile.stages.verify"),
              runs_setup(base(), {**eagle(), "profile": {"source": "GPU", "stages": {
                  "verify": {"median_ms": float("inf")}}}})),
    from_runs("runs-verify-ranks-nan", at(2, "eagle3", "profile.verify_ranks.verify_ms"),
              runs_setup(base(), {**eagle(), "profile": {"source": "GPU", "stages": {},
                                                         "verify_ranks": {"verify_ms": float("nan")}}})),
]


def _cell(tok_s: Any = 1000.0, first_tok_s: Any = 990.0, accept: Any = None) -> dict[str, Any]:
    return {"tok_s": tok_s, "step_ms": 8.0, "accept_len": accept, "ttft_ms": 20.0, "itl_ms": 5.0,
            "first": {"tok_s": first_tok_s, "wall_s": 1.0, "ttft_ms": 25.0, "e2e_ms": 900.0}}


def grid_run(arm: str, cell: dict[str, Any]) -> dict[str, Any]:
    ok = _cell(1450.0, 1400.0, 2.9) if arm == "eagle3" else _cell()
    cells = {"16": {"1": cell, "2": ok}, "64": {"1": ok, "2": ok}}
    return run(arm, {}, cells=cells, profiles={})


GRID = [
    from_runs("runs-grid-cell-infinity", at(2, "eagle3", "cells.16.1.tok_s"),
              runs_setup(grid_run("baseline", _cell()), grid_run("eagle3", _cell(float("inf"))), grid=True)),
    from_runs("runs-grid-first-burst-nan", at(1, "baseline", "cells.16.1.first.tok_s"),
              runs_setup(grid_run("baseline", _cell(first_tok_s=float("nan"))), grid_run("eagle3", _cell()),
                         grid=True)),
    from_runs("runs-grid-baseline-zero", at(1, "baseline", "cells.16.1.tok_s"),
              runs_setup(grid_run("baseline", _cell(0.0)), grid_run("eagle3", _cell()), grid=True)),
]


@pytest.mark.parametrize("case", FROM_RUNS + GRID, ids=[c.id for c in FROM_RUNS + GRID])
def test_from_runs_refuses_a_bad_measurement(tmp_path, case):
    assert_clean(case, tmp_path)


def test_a_whole_finite_runs_file_still_passes(tmp_path):
    """The yardstick of the cases above: the same runs file with plausible numbers gives a receipt that passes."""
    case = from_runs("runs-whole", (), runs_setup(base(), eagle()))
    ok = Case(case.id, case.item, case.argv, names=(), rc=0, setup=case.setup, watch=(RUNS,),
              after=lambda tmp, r: None if "VERDICT: PASS" in r.stdout else f"not passed: {r.stdout[-400:]}")
    assert_clean(ok, tmp_path)


# ---- bench table: a receipt's shown numbers -------------------------------------------------------------------

RESULTS = hostile.REPO / "benchmark" / "results"
ROW = "bench-eagle3_lab-kimi61_20261201T105128Z.json"
GRID_ROW = "bench-eagle3_lab-kimi61-grid_20261201T182835Z.json"


def receipt_with(name: str, edit: Callable[[dict[str, Any]], None], *,
                 raw: Callable[[str], str] | None = None) -> Callable[[Path], None]:
    def setup(tmp: Path) -> None:
        (tmp / "results").mkdir()
        r = json.loads((RESULTS / name).read_text())
        edit(r)
        text = json.dumps(r, indent=1)
        (tmp / "results" / name).write_text(raw(text) if raw else text)
        shutil.copy(hostile.REPO / "README.md", tmp / "R.md")
    return setup


def summary_set(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda r: r["summary"].__setitem__(key, value)


def table(id: str, name: str, names: tuple[str, ...], edit: Callable[[dict[str, Any]], None], **kw: Any) -> Case:
    return Case(id, "32.2", ["bench", "table", "--results", "{tmp}/results", "--update", "{tmp}/R.md"],
                names=(name, *names), setup=receipt_with(name, edit, **kw), watch=("R.md", "results"))


def _grid_cell(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda r: r["summary"]["grid"][0].__setitem__(key, value)


TABLE = [
    table("table-tok-s-nan", ROW, ("summary.tok_s_c1",), summary_set("tok_s_c1", float("nan"))),
    table("table-speedup-infinity", ROW, ("summary.speedup_c1",), summary_set("speedup_c1", float("inf"))),
    table("table-baseline-zero", ROW, ("summary.baseline_tok_s_c1",), summary_set("baseline_tok_s_c1", 0.0)),
    table("table-tp-310-digits", ROW, ("summary.tp",), summary_set("tp", 424242),
          raw=lambda t: t.replace("424242", DIGITS_310)),
    table("table-tok-s-310-digits", ROW, ("summary.tok_s_c1",), summary_set("tok_s_c1", 424242.5),
          raw=lambda t: t.replace("424242.5", DIGITS_310)),
    table("table-accept-negative", ROW, ("summary.accept_len",), summary_set("accept_len", -2.0)),
    table("table-passed-a-string", ROW, ("summary.passed",), summary_set("passed", "no")),
    table("table-grid-ratio-nan", GRID_ROW, ("summary.grid[0].median_ratio",), _grid_cell("median_ratio",
                                                                                         float("nan"))),
    table("table-grid-passed-a-string", GRID_ROW, ("summary.grid[0].passed",), _grid_cell("passed", "yes")),
]


@pytest.mark.parametrize("case", TABLE, ids=[c.id for c in TABLE])
def test_bench_table_refuses_a_receipt_with_a_bad_number(tmp_path, case):
    assert_clean(case, tmp_path)
