"""The arms' greedy outputs compared, request by request (`[verdict] outputs_match`, grid mode).

Every request of a grid cell is greedy (temperature 0, ignore_eos) and every arm run sends the same prompts in
the same order (prompts.PromptSource: per context, index 0, 1, 2, ...; the cells in the same order), so request k
of a cell's first burst or warm window had the same prompt on every arm. Speculative decoding with greedy
verification is lossless: EAGLE-3 must produce the baseline's output token for token. A wrong verify or draft
kernel that still leaves acceptance in tolerance (on the lab pair attention adds a few percent to the residual,
so accept length barely moves) shows here as outputs that differ. The client records a digest of each request's
output (client.output_digest: sha256 of the streamed text, or of /generate's output ids) in the window's
`output_digests`; this module compares them per cell and arm against the baseline's first successful run.

One check per measured cell and speculative arm: passed when every request of every run of the arm has the
baseline's digest. On a real model, where verify's batched numerics can flip a near-tie argmax, leave the key
out: this is for pairs whose construction makes every greedy choice clear (the lab pairs).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

WINDOWS = ("first", "warm")  # the first burst (cells.<ctx>.<c>.first) and the warm window (the cell itself)


def _digests(cell: dict[str, Any], window: str) -> list[Any] | None:
    src = cell.get("first") if window == "first" else cell
    got = src.get("output_digests") if isinstance(src, dict) else None
    return got if isinstance(got, list) else None


def _cell(run: dict[str, Any], ctx: int, c: int) -> dict[str, Any] | None:
    cells = run.get("cells")
    per_c = cells.get(str(ctx)) if isinstance(cells, dict) else None
    cell = per_c.get(str(c)) if isinstance(per_c, dict) else None
    return cell if isinstance(cell, dict) else None


def _ok(runs: list[dict[str, Any]], arm: str) -> list[dict[str, Any]]:
    return [r for r in runs if r.get("arm") == arm and not r.get("error")]


def outputs_check(runs: list[dict[str, Any]], baseline: str, arm: str, ctx: int, c: int) -> dict[str, Any]:
    """One cell's check: every request of every successful run of `arm` against the same request of the
    baseline's first successful run that measured the cell."""
    k: dict[str, Any] = {"kind": "outputs", "context": ctx, "concurrency": c, "arm": arm, "baseline": baseline}
    ref_cell = next((cell for r in _ok(runs, baseline) if (cell := _cell(r, ctx, c)) is not None), None)
    spec_cells = [cell for r in _ok(runs, arm) if (cell := _cell(r, ctx, c)) is not None]
    if ref_cell is None or not spec_cells:
        missing = baseline if ref_cell is None else arm
        k.update(passed=False, why=f"no successful run of arm {missing!r} measured the cell: no outputs to compare")
        return k
    compared = differ = 0
    first_diff: str | None = None
    unrecorded: list[str] = []
    for window in WINDOWS:
        ref = _digests(ref_cell, window)
        for run_i, cell in enumerate(spec_cells, 1):
            got = _digests(cell, window)
            if ref is None or got is None or len(ref) != len(got) or not all(
                    isinstance(x, str) for x in (*ref, *got)):
                unrecorded.append(window)
                continue
            for i, (a, b) in enumerate(zip(ref, got, strict=True)):
                compared += 1
                if a != b:
                    differ += 1
                    first_diff = first_diff or f"{window} window request {i} (run {run_i})"
    k.update(compared=compared, differ=differ)
    if unrecorded:
        k.update(passed=False, why=f"no output digests of the {sorted(set(unrecorded))[0]} window recorded for "
                                   "both arms (or of unequal counts): the outputs cannot be compared")
    elif differ:
        k.update(passed=False, why=f"greedy output differs from the baseline's in {differ} of {compared} "
                                   f"requests with the same prompt (first: {first_diff})")
    else:
        k["passed"] = True
    return k


def outputs_checks(runs: list[dict[str, Any]], baseline: str, spec_arms: Sequence[str], contexts: Sequence[int],
                   concurrency: Sequence[int], left_out: Collection[tuple[int, int]] = ()) -> list[dict[str, Any]]:
    """outputs_check in every cell but the left-out ones, for every speculative arm judged."""
    return [outputs_check(runs, baseline, arm, ctx, c) for ctx in contexts for c in concurrency
            if (ctx, c) not in left_out for arm in spec_arms]


def summary_line(checks: list[dict[str, Any]]) -> str:
    """`outputs: 3456 of 3456 requests equal to the baseline's (12 cells x arms)` for the report."""
    compared = sum(k.get("compared", 0) for k in checks)
    differ = sum(k.get("differ", 0) for k in checks)
    failed = [k for k in checks if not k["passed"]]
    text = (f"outputs: {compared - differ} of {compared} requests equal to the baseline's greedy output "
            f"({len(checks)} cell x arm checks")
    return text + (f", {len(failed)} failed)" if failed else ")")
