"""The verdict of a grid run (`[workload] contexts`): verdict.py's rule, per cell.

Per (context, concurrency) in verdict.min_ratio and speculative arm of the verdict, on the warm windows:
    worst speculative repeat (output tok/s)  >=  min_ratio(context, c)  x  best baseline repeat
With verdict.accept_len_tolerance, in every cell and arm of verdict.accept_len_arms (default: the verdict's
speculative arms): |accept length - expect_accept_len| <= tolerance. With
verdict.first_burst_min_ratio, in every cell, for the baseline and every verdict arm: the worst repeat's
first-burst tok/s / its own warm tok/s >= first_burst_min_ratio, and with metric decode_tok_s its decode rate too
(warm TPOT p50 / first-burst TPOT p50): a server that stalls the first time it sees a batch size, e.g. compiling
Triton kernels, fails it (in the prefill or in the decode steps); the cell's Triton compiles are in the check.
With verdict.outputs_match, in every cell, for every speculative arm run: its greedy output equal to the
baseline's request by request (outputs.py).

The aggregate keeps verdict.aggregate's shape for the smallest context (`levels`: so every reader of non-grid
receipts reads the smallest context's cells) and adds `cells` ({context: {c: {metric: spread}}}: the warm metrics,
`first_<metric>` of the first bursts, `first_over_warm`, `first_compiles`, `warm_compiles`) and
`profile_contexts` ({context: {stage: GPU ms per step per kernel class}}, from the per-context profiler windows).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from typing import Any

from . import summary_keys
from .config_verdict import VerdictSpec
from .crosscheck import line as crosscheck_line
from .outputs import summary_line as outputs_line
from .stats import median
from .verdict import (
    LEVEL_METRICS,
    accept_arms,
    accept_check,
    aggregate,
    compare,
    diagnose,
    fusion_comparison,
    is_number,
    metrics_problem,
    rate_vals,
    spread,
)

RULE = ("per cell (context, concurrency): worst speculative repeat >= min_ratio x best baseline repeat (warm "
        "output tok/s)")
FIRST_METRICS = ("tok_s", "wall_s", "ttft_ms", "ttft_ms_p99", "tpot_ms", "e2e_ms", "e2e_ms_p99")
CELL_EXTRAS = tuple(f"first_{m}" for m in FIRST_METRICS) + ("first_over_warm", "first_over_warm_decode",
                                                             "first_compiles", "warm_compiles")


def _cells_of(run: dict[str, Any], ctx: int) -> dict[str, Any]:
    cells = run.get("cells")
    return (cells.get(str(ctx)) or {}) if isinstance(cells, dict) else {}


def _compiles(cell: dict[str, Any]) -> int | None:
    return (cell.get("triton_compiles") or {}).get("new_entries")


def cell_values(cell: dict[str, Any]) -> dict[str, Any]:
    """One run's cell as flat metrics: the warm ones, first_<m>, the Triton compile counts, and the first burst
    over the warm window twice: first_over_warm on output tok/s (prefill included: a compile in the prefill shows)
    and first_over_warm_decode on the decode rate (warm TPOT p50 / first-burst TPOT p50)."""
    first = cell.get("first") or {}
    out = {m: cell.get(m) for m in LEVEL_METRICS}
    out.update({f"first_{m}": first.get(m) for m in FIRST_METRICS})
    warm, burst = cell.get("tok_s"), first.get("tok_s")
    out["first_over_warm"] = round(burst / warm, 4) if warm and burst is not None else None
    warm_tpot, burst_tpot = cell.get("tpot_ms"), first.get("tpot_ms")
    out["first_over_warm_decode"] = round(warm_tpot / burst_tpot, 4) if warm_tpot and burst_tpot else None
    out["first_compiles"], out["warm_compiles"] = _compiles(first), _compiles(cell)
    return out


def cell_spread(cells: list[dict[str, Any]]) -> dict[str, Any]:
    flat = [cell_values(c) for c in cells]
    out = {m: spread([f[m] for f in flat if f[m] is not None]) for m in (*LEVEL_METRICS, *CELL_EXTRAS)}
    kernels: Counter[str] = Counter()
    for c in cells:
        kernels.update(((c.get("first") or {}).get("triton_compiles") or {}).get("kernels") or {})
    out["first_compiled_kernels"] = dict(sorted(kernels.items()))
    return out


def profile_contexts(profiles: list[dict[str, Any] | None]) -> dict[str, Any]:
    """{context: {stage: {"classes": {class: median ms per step}, "kernel_ms", "gpu_window_ms", "stage_ms",
    "steps", "runs", "top"}}} over the runs' per-context profiler windows (trace.kernel_classes)."""
    out: dict[str, Any] = {}
    ctxs = sorted({int(k) for p in profiles if isinstance(p, dict) for k in p})
    for ctx in ctxs:
        windows = [p[str(ctx)] for p in profiles if isinstance(p, dict) and isinstance(p.get(str(ctx)), dict)]
        per_stage: dict[str, Any] = {}
        stages = sorted({s for w in windows for s in (w.get("kernel_classes") or {}) if s != "error"})
        for stage in stages:
            got = [w["kernel_classes"][stage] for w in windows if stage in (w.get("kernel_classes") or {})]
            classes = list(dict.fromkeys(c for g in got for c in g.get("classes", {})))  # trace.py's order
            stage_ms = [w["stages"][stage]["median_ms"] for w in windows if stage in (w.get("stages") or {})]
            per_stage[stage] = {
                "classes": {c: round(median([g["classes"].get(c, 0.0) for g in got]), 4) for c in classes},
                "kernel_ms": round(median([g["kernel_ms"] for g in got]), 4),
                "gpu_window_ms": round(median([g["gpu_window_ms"] for g in got]), 4),
                "stage_ms": round(median(stage_ms), 4) if stage_ms else None,
                "steps": sum(g["steps"] for g in got), "runs": len(got), "top": got[0].get("top", [])}
        out[str(ctx)] = per_stage
    return out


def grid_aggregate(runs: list[dict[str, Any]], arms: list[str], contexts: tuple[int, ...],
                   concurrency: tuple[int, ...]) -> dict[str, Any]:
    """verdict.aggregate of the smallest context's cells, plus every cell and the per-context profiles."""
    agg = aggregate([{**r, "levels": _cells_of(r, contexts[0])} for r in runs], arms, concurrency)
    for arm in arms:
        ok = [r for r in runs if r["arm"] == arm and not r.get("error")]
        agg[arm]["cells"] = {
            str(ctx): {str(c): cell_spread([cell for r in ok if (cell := _cells_of(r, ctx).get(str(c)))])
                       for c in concurrency} for ctx in contexts}
        agg[arm]["profile_contexts"] = profile_contexts([r.get("profiles") for r in ok])
    return agg


def context_view(agg: dict[str, Any], ctx: int) -> dict[str, Any]:
    """One context's cells in verdict.aggregate's shape ({arm: {"levels": {c: spreads}}}), for verdict.compare."""
    return {arm: {"levels": a.get("cells", {}).get(str(ctx), {})} for arm, a in agg.items()}


def _med(agg: dict[str, Any], arm: str, ctx: int, c: int, metric: str) -> float | None:
    s = agg.get(arm, {}).get("cells", {}).get(str(ctx), {}).get(str(c), {}).get(metric)
    return s["median"] if s else None


def kernel_growth(agg: dict[str, Any], arm: str, stage: str = "verify") -> dict[str, Any] | None:
    """The kernel class whose GPU time per step of `stage` grew most from the smallest to the largest profiled
    context; None with fewer than two profiled contexts, or when no class grew."""
    prof = agg.get(arm, {}).get("profile_contexts") or {}
    ctxs = sorted(int(k) for k, v in prof.items() if stage in v)
    if len(ctxs) < 2:
        return None
    lo, hi = prof[str(ctxs[0])][stage]["classes"], prof[str(ctxs[-1])][stage]["classes"]
    growth = {c: hi.get(c, 0.0) - lo.get(c, 0.0) for c in set(lo) | set(hi)}
    cls = max(sorted(growth), key=lambda c: growth[c])
    if growth[cls] <= 0:
        return None
    return {"stage": stage, "class": cls, "from_context": ctxs[0], "to_context": ctxs[-1],
            "from_ms": lo.get(cls, 0.0), "to_ms": hi.get(cls, 0.0), "growth_ms": round(growth[cls], 4)}


def growth_note(g: dict[str, Any]) -> str:
    return (f"{g['stage']} kernel time grew most in {g['class']} from context {g['from_context']} to "
            f"{g['to_context']}: {g['from_ms']:.3f} -> {g['to_ms']:.3f} ms per step (+{g['growth_ms']:.3f} ms)")


def _ratio_checks(agg: dict[str, Any], v: VerdictSpec) -> list[dict[str, Any]]:
    checks = []
    for ctx in sorted(v.grid_min_ratio):
        view = context_view(agg, ctx)
        for c, ratio in sorted(v.grid_min_ratio[ctx].items()):
            base = rate_vals(view, v.baseline, c, v.metric)
            for arm in v.speculative:
                spec = rate_vals(view, arm, c, v.metric)
                k: dict[str, Any] = {"context": ctx, "concurrency": c, "arm": arm, "baseline": v.baseline,
                                     "min_ratio": ratio, **({"metric": v.metric} if v.metric != "tok_s" else {})}
                cmp_ = compare(view, v.baseline, arm, c, v.metric)
                if cmp_ is None:
                    missing = v.baseline if not base else arm
                    k.update(passed=False, why=f"no successful run of arm {missing!r} at context {ctx}, "
                                               f"concurrency {c}")
                    checks.append(k)
                    continue
                cmp_.pop("break_even_profiled", None)
                worst, best = min(spec), max(base)
                k.update(passed=worst >= ratio * best, worst_spec_tok_s=round(worst, 3),
                         best_baseline_tok_s=round(best, 3), worst_over_best=round(worst / best, 4), **cmp_)
                if not k["passed"]:
                    k["diagnosis"] = diagnose(ratio=ratio, accept_len=cmp_["accept_len"],
                                              break_even=cmp_["break_even_accept_len"],
                                              median_ratio=cmp_["median_ratio"], spread_fail=True,
                                              expect_accept_len=v.expect_accept_len,
                                              expect_break_even=v.expect_break_even)
                    g = kernel_growth(agg, arm)
                    if g:
                        k["diagnosis"]["notes"].append(growth_note(g))
                        k["diagnosis"]["kernel_growth"] = g
                checks.append(k)
    return checks


def _accept_checks(agg: dict[str, Any], v: VerdictSpec, cells: list[tuple[int, int]]) -> list[dict[str, Any]]:
    return [accept_check(v, _med(agg, arm, ctx, c, "accept_len"), context=ctx, concurrency=c, arm=arm)
            for ctx, c in cells for arm in accept_arms(v)]


def _first_burst_checks(agg: dict[str, Any], v: VerdictSpec, cells: list[tuple[int, int]]) -> list[dict[str, Any]]:
    bar = v.first_burst_min_ratio
    out: list[dict[str, Any]] = []
    if bar is None:
        return out
    for ctx, c in cells:
        for arm in (v.baseline, *v.speculative):
            cell = agg.get(arm, {}).get("cells", {}).get(str(ctx), {}).get(str(c), {})
            s = cell.get("first_over_warm")
            k: dict[str, Any] = {"kind": "first_burst", "context": ctx, "concurrency": c, "arm": arm,
                                 "min_ratio": bar}
            if not s:
                k.update(passed=False, why="no first burst measured")
                out.append(k)
                continue
            compiles = (cell.get("first_compiles") or {}).get("median")
            d = cell.get("first_over_warm_decode") if v.metric == "decode_tok_s" else None
            k.update(first_over_warm=s["min"], values=s["values"],
                     first_tok_s=(cell.get("first_tok_s") or {}).get("median"),
                     warm_tok_s=(cell.get("tok_s") or {}).get("median"), first_compiles=compiles,
                     first_compiled_kernels=cell.get("first_compiled_kernels") or {})
            low = [f"first burst {s['min']:.3f} x its warm tok/s < {bar}"] if s["min"] < bar else []
            if v.metric == "decode_tok_s":  # the verdict's rate too: a stall in the decode steps alone
                k["first_over_warm_decode"] = d["min"] if d else None
                if not d:
                    low.append("no decode rate of the first burst (TPOT) measured")
                elif d["min"] < bar:
                    low.append(f"first burst {d['min']:.3f} x its warm decode rate < {bar}")
            k["passed"] = not low
            if low:
                k["why"] = ("; ".join(low)
                            + (f"; {compiles:g} Triton compile(s) during the burst"
                               f" ({', '.join(k['first_compiled_kernels']) or '-'})" if compiles else ""))
            out.append(k)
    return out


def first_burst_ratio(agg: dict[str, Any], metric: str, baseline: str, arm: str, ctx: int, c: int) -> float | None:
    """The first bursts' speculative / baseline ratio on `metric`, to read beside the warm ratio of a verdict on
    that metric: median output tok/s (tok_s), or median TPOT p50, the baseline's over the arm's (decode_tok_s)."""
    if metric == "decode_tok_s":  # a rate of c x 1000 / TPOT: the ratio of the rates is the TPOTs' inverse
        over, under = _med(agg, baseline, ctx, c, "first_tpot_ms"), _med(agg, arm, ctx, c, "first_tpot_ms")
    else:
        over, under = _med(agg, arm, ctx, c, "first_tok_s"), _med(agg, baseline, ctx, c, "first_tok_s")
    return round(over / under, 4) if over and under else None


def table(agg: dict[str, Any], v: VerdictSpec, spec_arms: list[str], contexts: tuple[int, ...],
          concurrency: tuple[int, ...], checks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (speculative arm, context, concurrency) measured: verdict.compare's figures on the warm
    windows, the first-burst ratio (median first-burst tok/s over the baseline's; with metric decode_tok_s also
    first_burst_decode_ratio, on the decode rate), TTFT and ITL of both arms, the
    cell's bar and whether every check of the cell passed (the arm's own and the baseline's first burst)."""
    rows = []
    for arm in spec_arms:
        for ctx in contexts:
            for c in concurrency:
                cmp_ = compare(context_view(agg, ctx), v.baseline, arm, c, v.metric)
                if cmp_ is None:
                    continue
                cmp_.pop("break_even_profiled", None)
                row = {"arm": arm, "context": ctx, **cmp_,
                       "first_burst_ratio": first_burst_ratio(agg, "tok_s", v.baseline, arm, ctx, c),
                       "tok_s": _med(agg, arm, ctx, c, "tok_s"),
                       "baseline_tok_s": _med(agg, v.baseline, ctx, c, "tok_s"),
                       "min_ratio": v.grid_min_ratio.get(ctx, {}).get(c)}
                for m in ("ttft_ms", "ttft_ms_p99", "itl_ms", "itl_ms_p99"):
                    row[m], row[f"baseline_{m}"] = _med(agg, arm, ctx, c, m), _med(agg, v.baseline, ctx, c, m)
                mine = [k["passed"] for k in checks if k.get("context") == ctx and k["concurrency"] == c
                        and (k["arm"] == arm or (k.get("kind") == "first_burst" and k["arm"] == v.baseline))]
                if v.metric == "decode_tok_s":
                    row["first_burst_decode_ratio"] = first_burst_ratio(agg, v.metric, v.baseline, arm, ctx, c)
                row["passed"] = all(mine) if mine else None
                rows.append(row)
    return rows


def evaluate_grid(agg: dict[str, Any], v: VerdictSpec, contexts: tuple[int, ...], concurrency: tuple[int, ...], *,
                  problems: list[str] | None = None, spec_arms: list[str] | None = None,
                  left_out: Collection[tuple[int, int]] = (),
                  output_checks: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The grid's verdict; the accept-length and first-burst checks run in every cell but those left out
    (`left_out`: (context, concurrency) of the cells [workload] left_out names, never measured);
    `output_checks`: outputs.outputs_checks of the runs (verdict.outputs_match), checks like the others."""
    cells = [(ctx, c) for ctx in contexts for c in concurrency if (ctx, c) not in left_out]
    checks = _ratio_checks(agg, v)
    if v.accept_len_tolerance is not None:
        checks += _accept_checks(agg, v, cells)
    checks += _first_burst_checks(agg, v, cells)
    checks += list(output_checks or [])
    reasons = []
    for k in checks:
        if not k["passed"]:
            why = k.get("why") or (f"worst {k['worst_spec_tok_s']} tok/s < {k['min_ratio']} x best baseline "
                                   f"{k['best_baseline_tok_s']} tok/s")
            reasons.append(f"context {k['context']}, concurrency {k['concurrency']}, {k['arm']}"
                           + {"first_burst": " first burst", "outputs": " outputs"}.get(k.get("kind") or "", "")
                           + f": {why}")
    fusion = fusion_comparison(agg, v, concurrency)  # the smallest context (agg's own levels)
    if fusion and fusion.get("passed") is False:
        reasons.append(f"fusion gain {fusion.get('gain')} < required {v.min_fusion_gain}")
    reasons += list(problems or [])
    if not checks:
        reasons.append("no verdict check ran")
    rows = table(agg, v, spec_arms or list(v.speculative), contexts, concurrency, checks)
    growth = {arm: g for arm in (spec_arms or v.speculative) if (g := kernel_growth(agg, arm))}
    base_growth = kernel_growth(agg, v.baseline, "decode")
    if base_growth:
        growth[v.baseline] = base_growth
    rule = RULE if v.metric == "tok_s" else RULE.replace(
        "warm output tok/s", "warm decode tok/s: concurrency x 1000 / TPOT p50")
    return {"rule": rule, "passed": not reasons, "checks": checks, "fusion": fusion, "table": rows,
            "kernel_growth": growth, "reasons": reasons}


def smallest_context(verdict: dict[str, Any], c0: int) -> dict[str, Any]:
    """The verdict as verdict.summary reads it for its c=1 keys: the smallest context's ratio and accept checks."""
    return {**verdict, "checks": [k for k in verdict["checks"] if k.get("context") == c0
                                  and k.get("kind") != "first_burst"]}


COMPACT = ("context", "concurrency", "median_ratio", "first_burst_ratio", "accept_len", "break_even_accept_len",
           "tok_s", "baseline_tok_s", "min_ratio", "passed")


def grid_summary(verdict: dict[str, Any], v: VerdictSpec, contexts: tuple[int, ...]) -> dict[str, Any]:
    """The summary's grid keys (summary_keys.GRID_SUMMARY): the first verdict arm's rows, compact, and the cells
    that passed / failed."""
    arm = v.speculative[0]
    rows = [{k: t.get(k) for k in COMPACT} for t in verdict["table"] if t["arm"] == arm]
    label = [(f"{t['context']}x{t['concurrency']}", t["passed"]) for t in rows]
    return {summary_keys.CONTEXTS: list(contexts), summary_keys.GRID: rows,
            summary_keys.FIRST_BURST_MIN_RATIO: v.first_burst_min_ratio,
            summary_keys.GRID_PASSED: [k for k, p in label if p is True],
            summary_keys.GRID_FAILED: [k for k, p in label if p is False]}


# ---- what --from-runs checks of a recorded grid run (the shape grid.measure_grid writes and this module reads)

def _compiles_problem(where: str, t: Any) -> str | None:
    if t is None:
        return None
    if not isinstance(t, dict) or not (t.get("new_entries") is None or isinstance(t["new_entries"], int)):
        return f"{where}.triton_compiles lacks an integer (or null) new_entries"
    kernels = t.get("kernels") or {}
    if not isinstance(kernels, dict) or not all(isinstance(n, int) for n in kernels.values()):
        return f"{where}.triton_compiles.kernels is not a {{name: count}} object"
    return None


def _cell_problem(where: str, cell: Any) -> str | None:
    if (problem := metrics_problem(where, cell)) is not None:
        return problem
    first = cell.get("first")
    if not isinstance(first, dict):
        return f"{where}.first (the first burst) is not an object"
    if (problem := metrics_problem(f"{where}.first", first, FIRST_METRICS)) is not None:
        return problem
    return _compiles_problem(where, cell.get("triton_compiles")) or _compiles_problem(
        f"{where}.first", first.get("triton_compiles"))


def _profiles_problem(profiles: Any) -> str | None:
    if profiles is None:
        return None
    if not isinstance(profiles, dict):
        return "profiles is not an object"
    for ctx, p in profiles.items():
        if not isinstance(p, dict):
            return f"profiles.{ctx} is not an object"
        for stage, k in (p.get("kernel_classes") or {}).items():
            if stage == "error":
                continue
            if not (isinstance(k, dict) and isinstance(k.get("classes"), dict)
                    and all(is_number(x) for x in k["classes"].values())
                    and all(is_number(k.get(f)) for f in ("kernel_ms", "gpu_window_ms", "steps"))):
                return f"profiles.{ctx}.kernel_classes.{stage} lacks numeric classes, kernel_ms, gpu_window_ms, steps"
        stages = p.get("stages") or {}
        if not isinstance(stages, dict) or not all(isinstance(st, dict) and is_number(st.get("median_ms"))
                                                   for st in stages.values()):
            return f"profiles.{ctx}.stages lacks numeric median_ms"
    return None


def grid_run_problem(run: dict[str, Any]) -> str | None:
    """What is wrong with a recorded grid arm run; None: nothing. A run that failed may have no cells."""
    cells = run.get("cells")
    if cells is None:
        return None if run.get("error") else "has no cells (not a grid run: measured with another harness?)"
    if not isinstance(cells, dict):
        return "cells is not an object"
    for ctx, per_c in cells.items():
        if not isinstance(per_c, dict):
            return f"cells.{ctx} is not an object"
        for c, cell in per_c.items():
            problem = _cell_problem(f"cells.{ctx}.{c}", cell)
            if problem:
                return problem
    cx = run.get("crosscheck")
    if cx is not None and not (isinstance(cx, list) and all(isinstance(x, dict) for x in cx)):
        return "crosscheck is not a list of objects"
    return _profiles_problem(run.get("profiles"))


# ---- the text report's grid part ---------------------------------------------------------------------------

def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def row_first_ratio(row: dict[str, Any]) -> float | None:
    """A table row's first-burst ratio on the rate its warm ratio is on (the decode rate where it has one)."""
    return row.get("first_burst_decode_ratio", row.get("first_burst_ratio"))


def cell_text(row: dict[str, Any]) -> str:
    """`1.42x / 1.39x pass`: warm ratio / first-burst ratio (row_first_ratio), and the cell's checks."""
    verdict = {True: " pass", False: " FAIL", None: ""}[row.get("passed")]
    return f"{_x(row.get('median_ratio'))} / {_x(row_first_ratio(row))}{verdict}"


def grid_table_lines(rows: list[dict[str, Any]], arm: str, contexts: list[int], concurrency: list[int]) -> list[str]:
    by = {(r["context"], r["concurrency"]): r for r in rows if r["arm"] == arm}
    width = 22
    out = [f"grid {arm} / baseline, warm / first burst (rows: context tokens, columns: concurrency):",
           f"{'context':>8} " + " ".join(f"{'c=' + str(c):>{width}}" for c in concurrency)]
    for ctx in contexts:
        out.append(f"{ctx:>8} " + " ".join(f"{cell_text(by[(ctx, c)]) if (ctx, c) in by else '-':>{width}}"
                                          for c in concurrency))
    return out


def profile_lines(agg: dict[str, Any]) -> list[str]:
    out = []
    for arm, a in agg.items():
        for ctx, stages in (a.get("profile_contexts") or {}).items():
            for stage, p in stages.items():
                classes = ", ".join(f"{c} {ms:.3f}" for c, ms in p["classes"].items() if ms)
                out.append(f"profile {arm} ctx={ctx} {stage}: {p['kernel_ms']:.3f} ms of kernels per step "
                           f"(window {p['gpu_window_ms']:.3f} ms, {p['steps']} steps): {classes}")
    return out


def report_lines(receipt: dict[str, Any]) -> list[str]:
    """The grid as a table per speculative arm, the per-context kernel classes, their growth and the
    cross-check."""
    w, v = receipt["workload"], receipt["verdict"]
    arms = sorted({t["arm"] for t in v.get("table", [])}, key=list(receipt["aggregate"]).index)
    out = []
    for arm in arms:
        out += grid_table_lines(v["table"], arm, w["contexts"], w["concurrency"])
    out += profile_lines(receipt["aggregate"])
    out += [f"kernel growth {arm}: {growth_note(g)}" for arm, g in (v.get("kernel_growth") or {}).items()]
    out += [f"{x['arm']} r{x['repeat']} {crosscheck_line(x)}" for x in receipt.get("crosscheck") or []]
    if compared := [k for k in v.get("checks", []) if k.get("kind") == "outputs"]:
        out.append(outputs_line(compared))
    return out
