"""`sglang-blackwell bench table`: the README's results table, generated from the receipts in
benchmark/results/ (never typed by hand). Prints markdown; --update FILE rewrites the block between
<!-- bench-eagle3-results:begin --> and <!-- bench-eagle3-results:end --> in FILE.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from ...errors import UserError
from ...paths import output_problem, repo_root, write_atomic
from ...receipts import validate_receipt

KIND = "bench-eagle3"
BEGIN, END = "<!-- bench-eagle3-results:begin -->", "<!-- bench-eagle3-results:end -->"
COLUMNS = ("config", "machine", "TP", "server", "API", "EAGLE-3 / baseline, c=1", "tok/s c=1 (baseline)",
           "TTFT p50 ms", "TPOT p50 ms", "ITL p99 ms", "accept length", "break-even accept length",
           "verify ms, fusion on / off", "verdict", "date", "receipt")


def server_label(r: dict[str, Any]) -> str:
    """summary.engine ("sglang 0.5.9", "vllm 0.18.0", ...); receipts from before it measured SGLang only."""
    engine = r["summary"].get("engine")
    if engine:
        return str(engine)
    sg = r["versions"].get("sglang")
    return f"sglang {sg}" if isinstance(sg, str) else "sglang"


# summary keys added with the OpenAI client -> (verdict role, aggregate metric), read from the aggregate of a
# receipt written before them (the same medians the summary now carries)
_FROM_AGGREGATE = {"tok_s_c1": ("speculative", "tok_s"), "baseline_tok_s_c1": ("baseline", "tok_s"),
                   "ttft_ms_p50": ("speculative", "ttft_ms"), "tpot_ms_p50": ("speculative", "tpot_ms"),
                   "itl_ms_p99": ("speculative", "itl_ms_p99")}


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
        print(f"{target}: results table updated ({len(receipts)} receipt(s) in {results})")
    else:
        print(markdown_table(receipts, latest_only=not a.all, link_base=Path.cwd()))
    return 0


def load_receipts(results: Path) -> list[tuple[Path, dict[str, Any]]]:
    if not results.is_dir():
        raise UserError(f"--results {results}: not a directory")
    out = []
    for p in sorted(results.glob("*.json")):
        try:
            r = json.loads(p.read_bytes().decode("utf-8"))
        except (OSError, ValueError) as e:  # unreadable, not UTF-8, not JSON
            raise UserError(f"{p}: not a JSON receipt: {e}") from None
        if not isinstance(r, dict) or r.get("kind") != KIND:
            continue
        probs = validate_receipt(r)
        if not isinstance(r.get("created"), str):
            probs.append(f"created {r.get('created')!r} is not a timestamp")
        if not probs:
            try:
                _row(p, r, None)  # every value the table shows has the type it needs
            except (TypeError, ValueError, KeyError, AttributeError, IndexError) as e:
                probs.append(f"{type(e).__name__}: {e}")
        if probs:
            raise UserError(f"{p}: invalid receipt: {'; '.join(probs)}")
        out.append((p, r))
    return out


def _f(v: Any, nd: int = 2, suffix: str = "") -> str:
    return "-" if v is None else f"{v:.{nd}f}{suffix}"


def markdown_table(receipts: list[tuple[Path, dict[str, Any]]], *, latest_only: bool = True,
                   link_base: Path | None = None) -> str:
    rows = sorted(receipts, key=lambda pr: pr[1]["created"], reverse=True)
    if latest_only:
        seen, kept = set(), []
        for p, r in rows:
            key = (r["summary"].get("config"), r["summary"].get("machine"), _engine(r))  # vLLM next to ours
            if key not in seen:
                seen.add(key)
                kept.append((p, r))
        rows = kept
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for p, r in rows:
        lines.append(_row(p, r, link_base))
    if not rows:
        lines.append("| " + " | ".join(["(no receipts yet)"] + [""] * (len(COLUMNS) - 1)) + " |")
    return "\n".join(lines)


def _row(p: Path, r: dict[str, Any], link_base: Path | None) -> str:
    s = r["summary"]
    link = os.path.relpath(p, link_base) if link_base else p.name
    v = {k: summary_value(r, k) for k in _FROM_AGGREGATE}
    tok = "-" if v["tok_s_c1"] is None else f"{_f(v['tok_s_c1'], 1)} ({_f(v['baseline_tok_s_c1'], 1)})"
    cells = [
        str(s.get("config")), str(s.get("machine")), str(s.get("tp")), server_label(r),
        str(s.get("api") or "generate"),  # receipts before the OpenAI client all used /generate
        _f(s.get("speedup_c1"), 2, "x"), tok, _f(v["ttft_ms_p50"], 1), _f(v["tpot_ms_p50"]),
        _f(v["itl_ms_p99"]), _f(s.get("accept_len")), _f(s.get("break_even_accept_len")),
        f"{_f(s.get('verify_ms_fusion_on'), 3)} / {_f(s.get('verify_ms_fusion_off'), 3)}",
        "pass" if s.get("passed") else "FAIL", r["created"][:10], f"[{p.name}]({link})",
    ]
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def update_block(path: Path, table: str) -> None:
    if not path.is_file():
        raise UserError(f"--update {path}: not found")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"--update {path}: not UTF-8 text (byte {e.start}: {e.reason})") from None
    except OSError as e:
        raise UserError(f"--update {path}: cannot read ({e.strerror or e})") from None
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise UserError(f"--update {path}: needs exactly one {BEGIN} ... {END} block")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    new = f"{head}{BEGIN}\n{table}\n{END}{tail}"
    target = path.resolve()  # a symlinked README stays a link: the file it names is rewritten
    problem = output_problem(target)
    if problem:
        raise UserError(f"--update {path}: {problem}")
    write_atomic(target, new)
