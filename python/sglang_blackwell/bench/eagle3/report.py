"""The text report `bench eagle3` prints: per arm and concurrency the medians, then every check of the verdict,
the grid (with a line per cell left out, `ctx=<context> c=<c>: left out: <why>`), the fusion comparison and the
verdict itself."""

from __future__ import annotations

from typing import Any

from . import grid_verdict, summary_keys
from .grid import left_out_line
from .window import fmt as _fmt


def report_text(receipt: dict[str, Any]) -> str:
    s = receipt["summary"]
    lines = [f"bench eagle3 {s[summary_keys.CONFIG]} on {s[summary_keys.MACHINE]}, TP={s[summary_keys.TP]} "
             f"({receipt['mode']}, api {receipt['workload'].get('api', 'generate')})"]
    if receipt["workload"].get("contexts"):
        lines.append(f"(grid: this table is context {receipt['workload']['contexts'][0]}, the smallest; "
                     "every cell below)")
    lines.append(f"{'arm':<16} {'c':>3} {'tok/s median [min-max]':>28} {'accept':>7} {'step ms':>8} "
                 f"{'TTFT ms':>8} {'TPOT ms':>8} {'ITL p99':>8} {'runs':>4}")
    for arm, a in receipt["aggregate"].items():
        for c, lv in a["levels"].items():
            t = lv["tok_s"]
            tok = f"{t['median']:.1f} [{t['min']:.1f}-{t['max']:.1f}]" if t else "-"

            def med(k: str, lv: dict[str, Any] = lv) -> str:
                return f"{lv[k]['median']:.2f}" if lv.get(k) else "-"

            lines.append(f"{arm:<16} {c:>3} {tok:>28} {med('accept_len'):>7} {med('step_ms'):>8} "
                         f"{med('ttft_ms'):>8} {med('tpot_ms'):>8} {med('itl_ms_p99'):>8} "
                         f"{t['n'] if t else 0:>4}")
    v = receipt["verdict"]
    for k in v["checks"]:
        at = (f"ctx={k['context']} " if "context" in k else "") + f"c={k['concurrency']} {k['arm']}"
        if k.get("kind") == "accept_len":
            lines.append(f"{at}: accept length {_fmt(k['accept_len'])} "
                         f"(expected {k['expect_accept_len']} +- {k['tolerance']}): "
                         + ("pass" if k["passed"] else f"FAIL ({k['why']})"))
        elif k.get("kind") == "first_burst":
            decode = (f", decode rate {_fmt(k['first_over_warm_decode'])}" if "first_over_warm_decode" in k
                      else "")
            lines.append(f"{at}: first burst / warm {_fmt(k.get('first_over_warm'))}{decode} "
                         f"(need >= {k['min_ratio']}): " + ("pass" if k["passed"] else f"FAIL ({k['why']})"))
        elif k.get("kind") == "outputs":
            equal = f"{k['compared'] - k['differ']} of {k['compared']}" if "compared" in k else "-"
            lines.append(f"{at}: greedy outputs equal to {k['baseline']}'s: {equal}: "
                         + ("pass" if k["passed"] else f"FAIL ({k['why']})"))
        elif "worst_over_best" in k:
            lines.append(f"{at} vs {k['baseline']}: "
                         f"worst/best {k['worst_over_best']:.3f} "
                         f"(need >= {k['min_ratio']}), median ratio {k['median_ratio']:.3f}, accept "
                         f"{_fmt(k['accept_len'])}, break-even {_fmt(k['break_even_accept_len'])}: "
                         + ("pass" if k["passed"] else "FAIL"))
        else:
            lines.append(f"{at}: FAIL ({k['why']})")
        for n in (k.get("diagnosis") or {}).get("notes", []):
            lines.append(f"    {n}")
        if k.get("diagnosis"):
            lines.append(f"    regressed: {', '.join(k['diagnosis']['regressed'])}")
    for t in v.get("table", []):
        ctx = f"ctx={t['context']} " if "context" in t else ""
        lines.append(f"  {ctx}c={t['concurrency']} {t['arm']}: median ratio {t['median_ratio']:.3f}, accept "
                     f"{_fmt(t['accept_len'])}, break-even {_fmt(t['break_even_accept_len'])} "
                     f"(round {_fmt(t['round_ms'])} ms / decode {_fmt(t['decode_ms'])} ms)")
    if summary_keys.GRID in s:
        lines += grid_verdict.report_lines(receipt)
        lines += [left_out_line(x) for x in receipt["workload"].get("left_out") or []]
    starts = startup_line(receipt.get("runs") or [])
    if starts:
        lines.append(starts)
    f = v.get("fusion")
    if f:
        lines.append(f"fusion {f['on']} vs {f['off']} at c={f['concurrency']}: "
                     f"verify ms {_fmt(f['verify_ms_on'])} vs {_fmt(f['verify_ms_off'])}, "
                     f"round ms {_fmt(f['round_ms_on'])} vs {_fmt(f['round_ms_off'])}, "
                     f"all-reduce+norm kernels in verify ms {_fmt(f.get('verify_allreduce_norm_ms_on'))} vs "
                     f"{_fmt(f.get('verify_allreduce_norm_ms_off'))}, "
                     f"gain {_fmt(f['gain'])} ({f['gain_basis']})")
        if f.get("verify_ms_robust_on") is not None or f.get("verify_ms_robust_off") is not None:
            lines.append(f"  every rank, waits for the other rank removed: verify ms "
                         f"{_fmt(f.get('verify_ms_robust_on'))} vs {_fmt(f.get('verify_ms_robust_off'))} "
                         f"({f.get('verify_steps_on')} vs {f.get('verify_steps_off')} steps); per all-reduce "
                         f"boundary: fused {_fmt(f.get('fused_call_us_p50'))} us vs NCCL + add/RMSNorm "
                         f"{_fmt(f.get('unfused_call_us_p50'))} us, {_fmt(f.get('fused_ar_per_verify'))} fused "
                         f"per verify: saving predicted {_fmt(f.get('saving_predicted_ms'))} ms, measured "
                         f"{_fmt(f.get('saving_measured_ms'))} ms (ratio {_fmt(f.get('saving_ratio'))})")
    for n in v.get("notes", []):
        lines.append(f"note: {n}")
    for r in v["reasons"]:
        lines.append(f"reason: {r}")
    lines.append("VERDICT: " + ("PASS" if v["passed"] else "FAIL") + f"  ({v['rule']})")
    return "\n".join(lines)


def startup_line(runs: list[dict[str, Any]]) -> str:
    """`startup (time to healthy, Triton compiles while starting): baseline r1 65.6 s (12), ...` over the launched
    runs in order; the compiles are '-' for runs recorded before they were counted or whose cache was unreadable."""
    parts = []
    for r in runs:
        if r.get("startup_s") is None:
            continue
        n = (r.get("startup_triton_compiles") or {}).get("new_entries")
        parts.append(f"{r['arm']} r{r.get('repeat')} {r['startup_s']:.1f} s ({'-' if n is None else n})")
    return "startup (time to healthy, Triton compiles while starting): " + ", ".join(parts) if parts else ""
