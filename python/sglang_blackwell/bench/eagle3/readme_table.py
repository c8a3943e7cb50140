"""`sglang-blackwell bench table`: the README's results table, generated from the receipts in
benchmark/results/ (never typed by hand). Prints markdown; --update FILE rewrites the block between
<!-- bench-eagle3-results:begin --> and <!-- bench-eagle3-results:end --> in FILE, and the grid block between
<!-- bench-eagle3-grid:begin --> and <!-- bench-eagle3-grid:end --> where FILE has one (the newest grid receipt,
`[workload] contexts`, per config and machine: context rows x concurrency columns).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from ...errors import UserError
from ...paths import marked_block, read_json, replace_marked_block, repo_root
from ...receipts import validate_receipt
from . import plausible, summary_keys
from .grid_verdict import first_burst_ratio, row_first_ratio

KIND = "bench-eagle3"
BEGIN, END = "<!-- bench-eagle3-results:begin -->", "<!-- bench-eagle3-results:end -->"
GRID_BEGIN, GRID_END = "<!-- bench-eagle3-grid:begin -->", "<!-- bench-eagle3-grid:end -->"
# the results table's columns: the header, and the summary keys its cell shows (date and receipt: the envelope's)
COLUMNS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("config", (summary_keys.CONFIG,)), ("machine", (summary_keys.MACHINE,)), ("TP", (summary_keys.TP,)),
    ("server", (summary_keys.ENGINE,)), ("API", (summary_keys.API,)),
    ("EAGLE-3 / baseline, c=1", (summary_keys.SPEEDUP_C1,)),
    ("tok/s c=1 (baseline)", (summary_keys.TOK_S_C1, summary_keys.BASELINE_TOK_S_C1)),
    ("TTFT p50 ms", (summary_keys.TTFT_MS_P50,)), ("TPOT p50 ms", (summary_keys.TPOT_MS_P50,)),
    ("ITL p99 ms", (summary_keys.ITL_MS_P99,)), ("accept length", (summary_keys.ACCEPT_LEN,)),
    ("break-even accept length", (summary_keys.BREAK_EVEN_ACCEPT_LEN,)),
    ("verify ms, fusion on / off", (summary_keys.VERIFY_MS_FUSION_ON, summary_keys.VERIFY_MS_FUSION_OFF)),
    ("verdict", (summary_keys.PASSED,)), ("date", ()), ("receipt", ()))
HEADERS = tuple(header for header, _ in COLUMNS)


def server_label(r: dict[str, Any]) -> str:
    """summary.engine ("sglang 0.5.9", "vllm 0.18.0", ...); receipts from before it measured SGLang only."""
    engine = r["summary"].get(summary_keys.ENGINE)
    if engine:
        return str(engine)
    sg = r["versions"].get("sglang")
    return f"sglang {sg}" if isinstance(sg, str) else "sglang"


# summary keys added with the OpenAI client -> (verdict role, aggregate metric), read from the aggregate of a
# receipt written before them (the same medians the summary now carries)
_FROM_AGGREGATE = {summary_keys.TOK_S_C1: ("speculative", "tok_s"),
                   summary_keys.BASELINE_TOK_S_C1: ("baseline", "tok_s"),
                   summary_keys.TTFT_MS_P50: ("speculative", "ttft_ms"),
                   summary_keys.TPOT_MS_P50: ("speculative", "tpot_ms"),
                   summary_keys.ITL_MS_P99: ("speculative", "itl_ms_p99")}


def summary_value(r: dict[str, Any], key: str) -> Any:
    s = r["summary"]
    if key in s or key not in _FROM_AGGREGATE:
        return s.get(key)
    role, metric = _FROM_AGGREGATE[key]
    verdict = ((r.get("config") or {}).get("content") or {}).get("verdict") or {}
    arm = verdict.get("baseline") if role == "baseline" else (verdict.get("speculative") or [None])[0]
    spread = (((r.get("aggregate") or {}).get(arm) or {}).get("levels") or {}).get("1", {}).get(metric)
    return spread["median"] if spread else None


def _engine(r: dict[str, Any]) -> str:
    return server_label(r).split()[0]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--results", help="directory of receipts (default: benchmark/results/)")
    p.add_argument("--all", action="store_true",
                   help="every receipt, not only the latest per config and machine")
    p.add_argument("--update", metavar="FILE", help="rewrite the marked block in FILE (e.g. README.md)")


def run(a: argparse.Namespace) -> int:
    results = Path(a.results) if a.results else (repo_root() or Path.cwd()) / "benchmark" / "results"
    receipts = load_receipts(results)
    if a.update:
        target = Path(a.update)
        table = markdown_table(receipts, latest_only=not a.all, link_base=target.parent)
        update_block(target, table)
        grid = has_block(target, GRID_BEGIN, GRID_END)
        if grid:
            update_block(target, grid_markdown(receipts, link_base=target.parent), GRID_BEGIN, GRID_END)
        print(f"{target}: results table{' and grid' if grid else ''} updated ({len(receipts)} receipt(s) in "
              f"{results})")
    else:
        print(markdown_table(receipts, latest_only=not a.all, link_base=Path.cwd()))
        print()
        print(grid_markdown(receipts, link_base=Path.cwd()))
    return 0


def load_receipts(results: Path) -> list[tuple[Path, dict[str, Any]]]:
    if not results.is_dir():
        raise UserError(f"--results {results}: not a directory")
    out = []
    for p in sorted(results.glob("*.json")):
        r = read_json(p)  # unreadable, not UTF-8, not JSON: a UserError naming the file
        if not isinstance(r, dict) or r.get("kind") != KIND:
            continue
        probs = validate_receipt(r)
        if not isinstance(r.get("created"), str):
            probs.append(f"created {r.get('created')!r} is not a timestamp")
        if not probs:
            try:
                probs += shown_value_problems(r)
                if not probs:
                    _row(p, r, None)  # every value the table shows has the type it needs
                    if is_grid(r):
                        grid_section(p, r, None)
            except (TypeError, ValueError, KeyError, AttributeError, IndexError, OverflowError) as e:
                probs.append(f"{type(e).__name__}: {e}")
        if probs:
            raise UserError(f"{p}: invalid receipt: {'; '.join(probs)}")
        out.append((p, r))
    return out


# what each number the tables show must be (plausible.py): a README never shows nan, inf or a 310-digit number
SHOWN: dict[str, plausible.Range] = {
    summary_keys.TP: plausible.TP, summary_keys.SPEEDUP_C1: plausible.RATIO,
    summary_keys.TOK_S_C1: plausible.RATE, summary_keys.BASELINE_TOK_S_C1: plausible.RATE,
    summary_keys.TTFT_MS_P50: plausible.MS, summary_keys.TPOT_MS_P50: plausible.MS,
    summary_keys.ITL_MS_P99: plausible.MS, summary_keys.ACCEPT_LEN: plausible.ACCEPT,
    summary_keys.BREAK_EVEN_ACCEPT_LEN: plausible.RATIO, summary_keys.VERIFY_MS_FUSION_ON: plausible.MS,
    summary_keys.VERIFY_MS_FUSION_OFF: plausible.MS}
GRID_SHOWN: dict[str, plausible.Range] = {
    "context": plausible.COUNT, "concurrency": plausible.COUNT, "median_ratio": plausible.RATIO,
    "first_burst_ratio": plausible.RATIO, "accept_len": plausible.ACCEPT}


def shown_value_problems(r: dict[str, Any]) -> list[str]:
    """What the tables would show of this receipt that is not a plausible measurement (none: []): every number of
    a row and of its grid cells (SHOWN, GRID_SHOWN), the verdict a boolean."""
    s = r["summary"]
    probs = [f"summary.{key} = {why}" for key, rng in SHOWN.items()
             if (v := summary_value(r, key)) is not None and (why := plausible.problem(v, rng))]
    if not isinstance(s.get(summary_keys.PASSED), bool):
        probs.append(f"summary.{summary_keys.PASSED} = {plausible.shown(s.get(summary_keys.PASSED))} is not true "
                     "or false")
    grid = s.get(summary_keys.GRID)
    for i, cell in enumerate(grid if isinstance(grid, list) else []):
        if not isinstance(cell, dict):
            probs.append(f"summary.{summary_keys.GRID}[{i}] is not an object")
            continue
        probs += [f"summary.{summary_keys.GRID}[{i}].{key} = {why}" for key, rng in GRID_SHOWN.items()
                  if cell.get(key) is not None and (why := plausible.problem(cell[key], rng))]
        if cell.get("passed") not in (True, False, None):
            probs.append(f"summary.{summary_keys.GRID}[{i}].passed = {plausible.shown(cell['passed'])} is not true, "
                         "false or null")
    ctxs = s.get(summary_keys.CONTEXTS)
    probs += [f"summary.{summary_keys.CONTEXTS}[{i}] = {why}" for i, c in enumerate(ctxs if isinstance(ctxs, list)
                                                                                    else [])
              if (why := plausible.problem(c, plausible.COUNT))]
    return probs


def _f(v: Any, nd: int = 2, suffix: str = "") -> str:
    return "-" if v is None else f"{v:.{nd}f}{suffix}"


def markdown_table(receipts: list[tuple[Path, dict[str, Any]]], *, latest_only: bool = True,
                   link_base: Path | None = None) -> str:
    receipts = [pr for pr in receipts if not is_grid(pr[1])]  # a grid has a block of its own (grid_markdown)
    rows = _latest(receipts) if latest_only else sorted(receipts, key=lambda pr: pr[1]["created"], reverse=True)
    lines = ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    for p, r in rows:
        lines.append(_row(p, r, link_base))
    if not rows:
        lines.append("| " + " | ".join(["(no receipts yet)"] + [""] * (len(HEADERS) - 1)) + " |")
    return "\n".join(lines)


def _row(p: Path, r: dict[str, Any], link_base: Path | None) -> str:
    link = os.path.relpath(p, link_base) if link_base else p.name
    v = {key: summary_value(r, key) for _, keys in COLUMNS for key in keys}  # what the cells show, only that
    tok_s, baseline_tok_s = v[summary_keys.TOK_S_C1], v[summary_keys.BASELINE_TOK_S_C1]
    tok = "-" if tok_s is None else f"{_f(tok_s, 1)} ({_f(baseline_tok_s, 1)})"
    cells = [
        str(v[summary_keys.CONFIG]), str(v[summary_keys.MACHINE]), str(v[summary_keys.TP]), server_label(r),
        str(v[summary_keys.API] or "generate"),  # receipts before the OpenAI client all used /generate
        _f(v[summary_keys.SPEEDUP_C1], 2, "x"), tok, _f(v[summary_keys.TTFT_MS_P50], 1),
        _f(v[summary_keys.TPOT_MS_P50]), _f(v[summary_keys.ITL_MS_P99]), _f(v[summary_keys.ACCEPT_LEN]),
        _f(v[summary_keys.BREAK_EVEN_ACCEPT_LEN]),
        f"{_f(v[summary_keys.VERIFY_MS_FUSION_ON], 3)} / {_f(v[summary_keys.VERIFY_MS_FUSION_OFF], 3)}",
        "pass" if v[summary_keys.PASSED] else "FAIL", r["created"][:10], f"[{p.name}]({link})",
    ]
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def is_grid(r: dict[str, Any]) -> bool:
    return isinstance(r["summary"].get(summary_keys.GRID), list)


def _latest(receipts: list[tuple[Path, dict[str, Any]]]) -> list[tuple[Path, dict[str, Any]]]:
    """The newest receipt per (config, machine, engine): a peer's receipt is its own row, not a newer ours."""
    seen, kept = set(), []
    for p, r in sorted(receipts, key=lambda pr: pr[1]["created"], reverse=True):
        key = (r["summary"].get(summary_keys.CONFIG), r["summary"].get(summary_keys.MACHINE), _engine(r))
        if key not in seen:
            seen.add(key)
            kept.append((p, r))
    return kept


def _verdict_rate(r: dict[str, Any]) -> tuple[str, str]:
    """The rate the receipt's verdict compares and its baseline arm, as its ratio checks name them (receipts from
    before the metric was configurable: tok_s)."""
    ratio = next((k for k in (r.get("verdict") or {}).get("checks") or [] if k.get("metric")), {})
    return ratio.get("metric", "tok_s"), ratio.get("baseline", "baseline")


def grid_cell(row: dict[str, Any], first: float | None = None) -> str:
    """`1.42x (first 1.39x), accept 2.04`, with **FAIL** when a check of the cell failed; `first` is the first
    bursts' ratio on the verdict's metric (default: the row's, grid_verdict.row_first_ratio)."""
    first = row_first_ratio(row) if first is None else first
    text = f"{_f(row.get('median_ratio'), 2, 'x')} (first {_f(first, 2, 'x')})"
    if row.get("accept_len") is not None:
        text += f", accept {_f(row['accept_len'])}"
    return text + (" **FAIL**" if row.get("passed") is False else "")


def grid_section(p: Path, r: dict[str, Any], link_base: Path | None, arm: str | None = None) -> str:
    """One grid receipt's section for one speculative arm (default: the one it judges first): a line naming the
    receipt (with links to it and its heatmap) and the arm's context x concurrency table, from the verdict's
    table; a cell the config left out (workload.left_out) reads "left out"."""
    s = r["summary"]
    link = os.path.relpath(p, link_base) if link_base else p.name
    heat = p.with_name(p.stem + "_grid.png")
    links = f"[{p.name}]({link})" + (f", [heatmap]({os.path.relpath(heat, link_base) if link_base else heat.name})"
                                     if heat.name in (r.get("plots") or []) else "")
    arm = arm or judged_arm(r)
    conc = [int(c) for c in r["workload"]["concurrency"]]
    rows = [t for t in (r.get("verdict") or {}).get("table") or [] if t.get("arm") == arm] or s[summary_keys.GRID]
    by = {(int(t["context"]), int(t["concurrency"])): t for t in rows}
    verdict = "pass" if s.get(summary_keys.PASSED) else "FAIL"
    lines = [f"**{s.get(summary_keys.CONFIG)}**: {s.get(summary_keys.MACHINE)}, TP {s.get(summary_keys.TP)}, "
             f"{server_label(r)}, {arm} / baseline (warm, first burst), verdict {verdict}, {r['created'][:10]}: "
             f"{links}",
             "", "| context | " + " | ".join(f"c={c}" for c in conc) + " |", "|---|" + "---|" * len(conc)]
    (metric, baseline), agg = _verdict_rate(r), r.get("aggregate") or {}

    def cell(ctx: int, c: int) -> str:  # the first bursts' ratio on the rate the warm one is on
        first = first_burst_ratio(agg, metric, baseline, arm, ctx, c) if metric != "tok_s" else None
        return grid_cell(by[(ctx, c)], first)

    left_out = {(int(x["context"]), int(x["concurrency"])) for x in r["workload"].get("left_out") or []}
    for ctx in s[summary_keys.CONTEXTS]:
        cells = [cell(int(ctx), c) if (int(ctx), c) in by else "left out" if (int(ctx), c) in left_out else "-"
                 for c in conc]
        lines.append(f"| {int(ctx)} | " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


def _verdict_arms(r: dict[str, Any]) -> list[str]:
    return list(((r.get("config") or {}).get("content") or {}).get("verdict", {}).get("speculative", []))


def table_arms(r: dict[str, Any]) -> list[str]:
    """The speculative arms the receipt's verdict table holds: the config's verdict arms first, in its order,
    then any other (one judged instead, --arms)."""
    seen = list(dict.fromkeys(str(t["arm"]) for t in (r.get("verdict") or {}).get("table") or [] if t.get("arm")))
    return [a for a in _verdict_arms(r) if a in seen] + [a for a in seen if a not in _verdict_arms(r)]


def judged_arm(r: dict[str, Any]) -> str:
    """The speculative arm the receipt's summary grid judges: the config's first verdict arm it measured, or the
    one judged instead (--arms)."""
    arms = table_arms(r)
    if arms:
        return arms[0]
    return (_verdict_arms(r) or ["EAGLE-3"])[0]


def grid_markdown(receipts: list[tuple[Path, dict[str, Any]]], *, link_base: Path | None = None) -> str:
    """The grid block: the newest grid receipt per config, machine and arm, a section for every speculative arm
    its verdict table holds (both drafts of one receipt side by side; a receipt of the same runs judging another
    arm, e.g. with a patch off, is a section of its own), the configs' verdict arms first, newest first."""
    seen, kept = set(), []
    for p, r in sorted([pr for pr in receipts if is_grid(pr[1])], key=lambda pr: pr[1]["created"], reverse=True):
        for arm in table_arms(r) or [judged_arm(r)]:
            key = (r["summary"].get(summary_keys.CONFIG), r["summary"].get(summary_keys.MACHINE), _engine(r), arm)
            if key not in seen:
                seen.add(key)
                kept.append((p, r, arm))

    def verdict_arm_first(pra: tuple[Path, dict[str, Any], str]) -> bool:
        return pra[2] not in _verdict_arms(pra[1])

    sections = [grid_section(p, r, link_base, arm) for p, r, arm in sorted(kept, key=verdict_arm_first)]
    return "\n\n".join(sections) if sections else "(no grid receipts yet)"


def has_block(path: Path, begin: str, end: str) -> bool:
    """Whether the file carries either marker (a lone one is then an error of update_block, not a skip)."""
    try:
        text = path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    return begin in text or end in text


def current_block(path: Path, begin: str = BEGIN, end: str = END) -> str | None:
    """What the file holds between the markers now (for the staleness tests)."""
    return marked_block(path, begin, end)


def update_block(path: Path, table: str, begin: str = BEGIN, end: str = END) -> None:
    if not path.is_file():
        raise UserError(f"--update {path}: not found")
    replace_marked_block(path, table, begin, end)
