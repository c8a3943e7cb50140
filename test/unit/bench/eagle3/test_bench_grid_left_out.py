"""`[workload] left_out`: grid cells not measured, each with its reason. A bad entry is one line naming the file and
the key; a bar, a cross-check or a profile window on a cell that is never measured is refused. End to end against
the fake SGLang server: a left-out cell gets no request (the fake's own request log says so), the receipt's
workload.left_out and the printed report carry the reason, the accept-length and first-burst checks of the grid
skip it (so the verdict passes), --from-runs merges such runs, and the README grid table says "left out"."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from bench_fakes import FAKE_SERVER, write_grid_config

from sglang_blackwell.bench.eagle3.config import load_config
from sglang_blackwell.bench.eagle3.config_section import ConfigError
from sglang_blackwell.bench.eagle3.readme_table import grid_markdown
from sglang_blackwell.cli import main

WHY = "the KV pool of one H100 at --mem-fraction-static 0.7 holds ~700k tokens, 64 x 32k need 2.1M"
LEFT_64X2 = f'left_out = [{{ context = 64, concurrency = 2, why = "{WHY}" }}]'


def entry(context: object = 64, concurrency: object = 2, why: object = "too big") -> str:
    return "{ " + f"context = {json.dumps(context)}, concurrency = {json.dumps(concurrency)}, why = {json.dumps(why)}" \
        + " }"


def _error(tmp_path: Path, **kwargs: str) -> str:
    p = write_grid_config(tmp_path, **kwargs)
    with pytest.raises(ConfigError) as e:
        load_config(p)
    msg = str(e.value)
    assert msg.startswith(f"{p}: ") and len(msg.splitlines()) == 1, msg
    return msg


def test_left_out_cells_load_in_the_config_order(tmp_path: Path) -> None:
    cfg = load_config(write_grid_config(tmp_path, min_ratio="{ 16 = { 1 = 1.3 }, 64 = { 1 = 1.2 } }",
                                        extra=f"left_out = [{entry(64, 2)}, {entry(16, 2, ' a reason ')}]"))
    w = cfg.workload
    assert [(x.context, x.concurrency, x.why) for x in w.left_out] == [(64, 2, "too big"), (16, 2, "a reason")]
    assert w.measured_cells() == [(16, 1), (64, 1)]
    assert w.left_out_cell(64, 2) is not None and w.left_out_cell(64, 1) is None
    assert load_config(write_grid_config(tmp_path / "none")).workload.left_out == ()
    # the reason is part of the config, so of its hash: runs with another reason never merge (--from-runs)
    other = load_config(write_grid_config(tmp_path / "b", extra=f"left_out = [{entry(64, 2, 'another')}]"))
    same = load_config(write_grid_config(tmp_path / "c", extra=f"left_out = [{entry(64, 2)}]"))
    assert other.sha256 != same.sha256


LEFT_OUT_ERRORS = [
    ("left_out = 3", "[workload] left_out: expected a list of tables { context = <int>, concurrency = <int>, why"),
    ("left_out = [[64, 2]]", "[workload] left_out[0]: expected a table { context = <int>"),
    (f"left_out = [{entry(32, 2)}]", "[workload] left_out[0].context: 32 is not in workload.contexts [16, 64]"),
    (f"left_out = [{entry(64, 8)}]", "[workload] left_out[0].concurrency: 8 is not in workload.concurrency [1, 2]"),
    (f"left_out = [{entry('64', 2)}]", "[workload] left_out[0].context: '64' is not in workload.contexts"),
    (f"left_out = [{entry(64, True)}]", "[workload] left_out[0].concurrency: True is not in workload.concurrency"),
    ("left_out = [{ concurrency = 2, why = \"x\" }]", "[workload] left_out[0].context: missing (required)"),
    ("left_out = [{ context = 64, concurrency = 2 }]", "[workload] left_out[0].why: expected a non-empty line of text"),
    (f"left_out = [{entry(why='  ')}]", "[workload] left_out[0].why: expected a non-empty line of text"),
    (f"left_out = [{entry(why=7)}]", "[workload] left_out[0].why: expected a non-empty line of text"),
    ("left_out = [" + entry(why="two\nlines") + "]", "[workload] left_out[0].why: expected a non-empty line of text"),
    ("left_out = [{ context = 64, concurrency = 2, why = \"x\", reason = \"y\" }]",
     "[workload] left_out[0].reason: unknown key (allowed: concurrency, context, why)"),
    (f"left_out = [{entry(64, 2)}, {entry(16, 1)}, {entry(64, 2, 'again')}]",
     "[workload] left_out[2]: context 64, concurrency 2 is listed twice (left_out[0])"),
    (f"left_out = [{entry(16, 1)}, {entry(16, 2)}, {entry(64, 1)}, {entry(64, 2)}]",
     "[workload] left_out: leaves out every cell of the grid (2 contexts x 2 concurrency levels): nothing would be "
     "measured"),
]


@pytest.mark.parametrize(("extra", "expect"), LEFT_OUT_ERRORS, ids=[e[1][:60] for e in LEFT_OUT_ERRORS])
def test_bad_left_out_is_one_line_naming_the_key(tmp_path: Path, extra: str, expect: str) -> None:
    msg = _error(tmp_path, extra=extra)
    assert expect in msg, msg


def test_a_bar_on_a_left_out_cell_is_refused_naming_both_keys(tmp_path: Path) -> None:
    msg = _error(tmp_path, extra=f"left_out = [{entry(64, 2)}, {entry(16, 2)}]")
    assert "[verdict] min_ratio.16.2: a bar on a cell [workload] left_out[1] leaves out (context 16, concurrency 2" \
           in msg, msg
    assert "remove the bar or the left_out entry" in msg
    # the same cell without its bar loads
    cfg = load_config(write_grid_config(tmp_path / "ok", min_ratio="{ 16 = { 1 = 1.3 }, 64 = { 1 = 1.2 } }",
                                        extra=f"left_out = [{entry(16, 2)}]"))
    assert cfg.verdict.grid_min_ratio == {16: {1: 1.3}, 64: {1: 1.2}}


def test_crosscheck_and_profile_on_cells_never_measured_are_refused(tmp_path: Path) -> None:
    left = f"left_out = [{entry(64, 1)}, {entry(64, 2)}]"
    bars = "{ 16 = { 1 = 1.3, 2 = 1.1 } }"
    msg = _error(tmp_path, min_ratio=bars, extra=f"{left}\n[crosscheck]\ncells = [[64, 2]]")
    assert "[crosscheck] cells: [64, 2] is a cell workload.left_out leaves out" in msg, msg
    msg = _error(tmp_path / "p", min_ratio=bars, extra=f"{left}\n[profile]\nsteps = 2\ncontexts = [16, 64]")
    assert "[profile] contexts: context 64: workload.left_out leaves out every cell of it" in msg, msg
    # the default profile window is at the smallest context that is measured
    cfg = load_config(write_grid_config(tmp_path / "d", min_ratio="{ 64 = { 1 = 1.2 } }",
                                        extra=f"left_out = [{entry(16, 1)}, {entry(16, 2)}]\n[profile]\nsteps = 2"))
    assert cfg.profile.contexts == (64,)


def test_left_out_needs_grid_mode(tmp_path: Path) -> None:
    from bench_fakes import write_config

    p = write_config(tmp_path, extra=f"left_out = [{entry()}]")
    with pytest.raises(ConfigError, match=r"\[workload\] left_out: grid mode only \(needs workload.contexts\)"):
        load_config(p)


def _logging_server(tmp: Path) -> Path:
    """fake_sglang_server.py with its OpenAI routes' request log on (FAKE_REQUEST_LOG of its environment: every
    /v1/completions body as a JSON line), the launcher the config names instead of the fake itself."""
    p = tmp / "logging_fake_server.py"
    p.write_text(f"""import os, runpy, sys
sys.path.insert(0, {str(FAKE_SERVER.parents[1])!r})
from support.fake_openai_server import OpenAIRoutes
OpenAIRoutes.request_log = os.environ["FAKE_REQUEST_LOG"]
sys.argv[0] = {str(FAKE_SERVER)!r}
runpy.run_path({str(FAKE_SERVER)!r}, run_name="__main__")
""")
    return p


def _left_out_config(tmp: Path) -> Path:
    cfg = write_grid_config(
        tmp, baseline_env={"FAKE_STEP_MS": "4", "FAKE_REQUEST_LOG": str(tmp / "baseline.requests.jsonl")},
        eagle_env={"FAKE_ROUND_MS": "5", "FAKE_ACCEPT_LEN": "3",
                   "FAKE_REQUEST_LOG": str(tmp / "eagle3.requests.jsonl")},
        # bars far below what the fake's speeds give (~2x, first bursts ~1x): what is judged here is which cells
        # have checks, not the speed, which a loaded machine moves
        min_ratio="{ 16 = { 1 = 0.5, 2 = 0.5 }, 64 = { 1 = 0.5 } }",
        verdict_extra="first_burst_min_ratio = 0.1\naccept_len_tolerance = 0.5", extra=LEFT_64X2)
    cfg.write_text(cfg.read_text().replace(json.dumps(str(FAKE_SERVER)), json.dumps(str(_logging_server(tmp)))))
    return cfg


def _prompt_lengths(log: Path) -> Counter[int]:
    """Prompt length (token ids) -> requests the server was sent with a prompt that long."""
    bodies = [json.loads(ln)["body"] for ln in log.read_text().splitlines()]
    return Counter(len(b["prompt"]) for b in bodies)


def test_a_left_out_cell_gets_no_request_and_its_reason_is_recorded(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    cfg = _left_out_config(tmp_path)
    out = tmp_path / "out"
    assert main(["bench", "eagle3", "--config", str(cfg), "--out", str(out)]) == 0
    printed = capsys.readouterr()
    for arm in ("baseline", "eagle3"):
        # what the server was sent: 16 tokens: (1 + 2) + (2 + 4) requests (first burst + warm window, rounds 2);
        # 64 tokens: only the c=1 cell's 1 + 2, none of 64 x 2's 2 + 4
        assert _prompt_lengths(tmp_path / f"{arm}.requests.jsonl") == {16: 9, 64: 3}, arm
    (receipt_path,) = sorted(out.glob("bench-eagle3_fakegrid_*Z.json"))
    r = json.loads(receipt_path.read_text())
    assert r["workload"]["left_out"] == [{"context": 64, "concurrency": 2, "why": WHY}]
    assert r["measurement"]["left_out"].startswith("workload.left_out")
    for run in r["runs"]:
        assert set(run["cells"]["64"]) == {"1"} and set(run["cells"]["16"]) == {"1", "2"}
        assert run["left_out"] == r["workload"]["left_out"] and run["prompts"]["used"] == {"16": 9, "64": 3}
    # the cell has no check (its accept length and first bursts were never measured), the others all pass
    checks = r["verdict"]["checks"]
    assert not [k for k in checks if (k["context"], k["concurrency"]) == (64, 2)]
    assert len([k for k in checks if k.get("kind") == "first_burst"]) == 6  # 3 cells, baseline and eagle3
    assert len([k for k in checks if k.get("kind") == "accept_len"]) == 3
    assert r["verdict"]["passed"] and r["verdict"]["reasons"] == [] and r["summary"]["passed"]
    assert r["summary"]["grid_passed"] == ["16x1", "16x2", "64x1"] and r["summary"]["grid_failed"] == []
    assert f"ctx=64 c=2: left out: {WHY}" in printed.out.splitlines()
    assert f"s]   ctx=64 c=2: left out: {WHY}\n" in printed.err  # the progress, as the grid runs
    assert "VERDICT: PASS" in printed.out
    # the README's grid table says so, where a cell without a row would read "-"
    table = grid_markdown([(receipt_path, r)])
    assert "| 64 | " in table and table.splitlines()[-1].endswith("| left out |"), table


def test_from_runs_merges_runs_of_a_config_with_left_out_cells(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    cfg = _left_out_config(tmp_path)
    a, b, merged = tmp_path / "a", tmp_path / "b", tmp_path / "merged"
    assert main(["bench", "eagle3", "--config", str(cfg), "--out", str(a), "--arms", "baseline", "--no-plots"]) == 1
    assert main(["bench", "eagle3", "--config", str(cfg), "--out", str(b), "--arms", "eagle3", "--no-plots"]) == 1
    capsys.readouterr()
    runs = [str(p) for d in (a, b) for p in d.glob("*_runs.jsonl")]
    assert main(["bench", "eagle3", "--config", str(cfg), "--out", str(merged), "--no-plots", "--from-runs",
                 *runs]) == 0
    (receipt_path,) = sorted(merged.glob("*Z.json"))
    r = json.loads(receipt_path.read_text())
    assert r["complete"] and r["summary"]["passed"] and [x["arm"] for x in r["runs"]] == ["baseline", "eagle3"]
    assert r["workload"]["left_out"] == [{"context": 64, "concurrency": 2, "why": WHY}]
    assert r["summary"]["grid_passed"] == ["16x1", "16x2", "64x1"]
    assert f"ctx=64 c=2: left out: {WHY}" in capsys.readouterr().out
