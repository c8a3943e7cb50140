"""Per-stage times from a torch profiler trace (Chrome trace JSON, optionally gzipped) written by SGLang's
/start_profile: the spans SGLang 0.5.14 records around each forward (see sglang_api).

GPU time of a span comes from the "gpu_user_annotation" events the CUDA profiler attaches to a CPU
record_function range (first kernel start to last kernel end of the work launched inside it). Where a trace
holds no GPU annotations (no CUDA activity recorded), the CPU-side "user_annotation" durations are used and
the result says so: with CUDA graphs and overlap scheduling those measure launch time, not GPU time.

Inside each GPU window it also sums the kernels that fusion is about: all-reduce kernels (FlashInfer's fused
AR+residual+RMSNorm, or NCCL's all-reduce) and the separate residual-add+RMSNorm kernel that the fused one
replaces. That is how much of a verify step the communication costs, and what fusion can save at most.

`verify_across_ranks` reads the traces of every TP rank (SGLang writes one per rank) and gives the verify time
that waits for the other rank cannot inflate; see its docstring for the measure and why it is robust.
"""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .stats import median, percentile
from .trace_kernels import (
    CLASS_ORDER,
    COLLECTIVE_KERNEL,
    FUSED_ALLREDUCE_KERNEL,
    KERNEL_CLASSES,
    NCCL_ALLREDUCE_KERNEL,
    activity_per_span,
    is_verify_span,
    kernel_class,
    kernel_label,
    x_events,
)

STAGES: dict[str, Callable[[str], bool]] = {
    "decode": lambda n: n.startswith("step[DECODE"),
    "verify": lambda n: n.startswith("step[TARGET_VERIFY"),
    "draft": lambda n: n == "draft",
    "draft_extend": lambda n: n == "draft_extend",
}

# The kernels fusion is about: the all-reduce (FlashInfer's fused one or NCCL's) and FlashInfer's residual-add +
# RMSNorm (norm.cuh FusedAddRMSNormKernel; sgl-kernel ships the same kernel name) that the fused one replaces
COMM_KERNELS = {
    "allreduce": re.compile(f"(?:{FUSED_ALLREDUCE_KERNEL.pattern})|(?:{NCCL_ALLREDUCE_KERNEL.pattern})"),
    "add_rmsnorm": re.compile(r"FusedAddRMSNorm"),
}


def load_trace(path: Path) -> list[dict[str, Any]]:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    data = json.loads(raw)
    events = data.get("traceEvents", []) if isinstance(data, dict) else data
    return [e for e in events if isinstance(e, dict)]


def stage_times(events: list[dict[str, Any]]) -> dict[str, Any]:
    """{"source": ..., "stages": {stage: {"median_ms", "min_ms", "n"}}} over complete ("X") span events.

    The profiler writes one "gpu_user_annotation" per CUDA stream that ran work of a CPU range (same
    "External id"): with fusion off, the NCCL stream gets its own short one per verify step. A step's GPU time
    is the window over all of its streams (first start to last end), one value per CPU range.
    """
    windows: dict[str, dict[tuple, list[float]]] = {"gpu_user_annotation": {}, "user_annotation": {}}
    for i, e in enumerate(events):
        cat, name = e.get("cat"), e.get("name")
        if e.get("ph") != "X" or cat not in windows or not isinstance(name, str) or "dur" not in e:
            continue
        for stage, match in STAGES.items():
            if match(name):
                ext = (e.get("args") or {}).get("External id")
                key = (stage, name, ext if ext is not None else f"event{i}")
                t0, t1 = float(e["ts"]), float(e["ts"]) + float(e["dur"])
                w = windows[cat].setdefault(key, [t0, t1, e.get("pid")])
                w[0], w[1] = min(w[0], t0), max(w[1], t1)
    cat = "gpu_user_annotation" if windows["gpu_user_annotation"] else "user_annotation"
    gpu = cat == "gpu_user_annotation"
    comm = _comm_kernels(events) if gpu else {}
    by_stage: dict[str, list[float]] = {}
    parts: dict[str, dict[str, list[float]]] = {}
    for (stage, _, _), (t0, t1, dev) in windows[cat].items():
        by_stage.setdefault(stage, []).append((t1 - t0) / 1e3)  # us -> ms
        if gpu:
            p = parts.setdefault(stage, {"allreduce": [], "allreduce_calls": [], "add_rmsnorm": []})
            ks = [k for k in comm.get(dev, []) if t0 <= k[0] < t1]
            p["allreduce"].append(sum(d for _, d, kind in ks if kind == "allreduce") / 1e3)
            p["allreduce_calls"].append(sum(1 for *_, kind in ks if kind == "allreduce"))
            p["add_rmsnorm"].append(sum(d for _, d, kind in ks if kind == "add_rmsnorm") / 1e3)
    stages: dict[str, dict[str, Any]] = {
        s: {"median_ms": round(median(v), 4), "min_ms": round(min(v), 4), "n": len(v)}
        for s, v in by_stage.items()}
    for s, p in parts.items():
        stages[s].update({"allreduce_ms": round(median(p["allreduce"]), 4),
                          "allreduce_calls": median(p["allreduce_calls"]),
                          "add_rmsnorm_ms": round(median(p["add_rmsnorm"]), 4)})
    source = "GPU (gpu_user_annotation, window over streams)" if gpu else "CPU-side spans only (no GPU events)"
    return {"source": source if stages else "no SGLang step spans in the trace", "stages": stages}


def _comm_kernels(events: list[dict[str, Any]]) -> dict[Any, list[tuple[float, float, str]]]:
    """(start us, duration us, "allreduce" | "add_rmsnorm") of the kernels fusion is about, per device (pid)."""
    out: dict[Any, list[tuple[float, float, str]]] = {}
    for k in x_events(events, "kernel"):
        if (kind := kernel_label(k["name"], COMM_KERNELS)) is not None:
            out.setdefault(k.get("pid"), []).append((float(k["ts"]), float(k["dur"]), kind))
    return out


# ---- verify time across ranks ---------------------------------------------------------------------------------

# Kernels at which the ranks meet: none can finish before every rank has arrived. Labelled for the per-call
# medians (fused, nccl_ar, add_rmsnorm is no meeting point but the kernel the fused one replaces); "sync" is every
# other collective: NCCL's all-gather (vocab-parallel logits) and friends, FlashInfer's trtllm custom all-reduce
# and MoE all-reduce fusion, torch symmetric-memory all-reduce, SGLang's custom all-reduce.
CALL_KERNELS = {
    "fused": FUSED_ALLREDUCE_KERNEL,
    "nccl_ar": NCCL_ALLREDUCE_KERNEL,
    "add_rmsnorm": COMM_KERNELS["add_rmsnorm"],
    "sync": COLLECTIVE_KERNEL,
}
MEETING_LABELS = ("fused", "nccl_ar", "sync")
ALIGN_OFFSETS = 3  # step counts that differ between ranks: try pairing rank r's step i + k with rank 0's i


@dataclass
class RankStep:
    """One verify step on one rank: its GPU window (first activity start to last activity end, every stream),
    the time some activity of it ran (union), its meeting kernels in start order as (label, start, dur,
    approach), approach = dur + the device's idle time right before the kernel, and its add+RMSNorm kernels."""
    start: float  # us, trace clock
    end: float
    active: float
    calls: list[tuple[str, float, float, float]] = field(default_factory=list)
    add_rmsnorm: list[float] = field(default_factory=list)

    @property
    def window(self) -> float:
        return self.end - self.start

    def labels(self) -> tuple[str, ...]:
        return tuple(c[0] for c in self.calls)


def rank_steps(events: list[dict[str, Any]], span_match: Callable[[str], bool] = is_verify_span
               ) -> tuple[list[RankStep], str]:
    """The verify steps of one rank's trace (trace_kernels attribution: by launch correlation, else by GPU
    window), with the method used."""
    spans, method = activity_per_span(events, span_match, CALL_KERNELS)
    steps = []
    for sp in spans:
        acts = sorted(((float(e["ts"]), float(e["dur"]), lbl) for lbl, e in sp.items), key=lambda a: a[0])
        if not acts:
            continue
        step = RankStep(start=acts[0][0], end=max(t + d for t, d, _ in acts), active=0.0)
        reach, seg0 = acts[0][0], acts[0][0]
        for t, d, lbl in acts:
            idle = max(0.0, t - reach)
            if idle > 0:
                step.active += reach - seg0
                seg0 = t
            reach = max(reach, t + d)
            if lbl in MEETING_LABELS:
                step.calls.append((lbl, t, d, d + idle))
            elif lbl == "add_rmsnorm":
                step.add_rmsnorm.append(d)
        step.active += reach - seg0
        steps.append(step)
    return steps, method


def _pairing(per_rank: list[list[RankStep]]) -> tuple[list[tuple[RankStep, ...]], str]:
    """Step i of every rank, together. SGLang's ranks run the same forwards and their profiler windows start and
    stop at the same forward count, so equal step counts pair by order. Otherwise rank r is shifted by the offset
    (|k| <= ALIGN_OFFSETS) whose step starts lie closest to rank 0's (the ranks share the host's clock)."""
    if len({len(s) for s in per_rank}) == 1:
        return list(zip(*per_rank, strict=True)), "order"
    base = per_rank[0]
    shifts = []
    for steps in per_rank[1:]:
        best = None
        for k in range(-ALIGN_OFFSETS, ALIGN_OFFSETS + 1):
            pairs = [(i, i + k) for i in range(len(base)) if 0 <= i + k < len(steps)]
            if len(pairs) < 1:
                continue
            d = median(abs(base[i].start - steps[j].start) for i, j in pairs)
            if best is None or d < best[0]:
                best = (d, k)
        if best is None:
            return [], "none (no overlap of the ranks' steps)"
        shifts.append(best[1])
    out = []
    for i in range(len(base)):
        js = [i + k for k in shifts]
        if all(0 <= j < len(per_rank[r + 1]) for r, j in enumerate(js)):
            out.append((base[i], *(per_rank[r + 1][j] for r, j in enumerate(js))))
    counts = ", ".join(str(len(s)) for s in per_rank)
    return out, f"offset {shifts} (step counts per rank differ: {counts})"


def _dist(values: list[float], digits: int = 2) -> dict[str, Any] | None:
    if not values:
        return None
    return {"p50": round(median(values), digits), "p90": round(percentile(values, 90), digits),
            "max": round(max(values), digits), "n": len(values)}


def verify_across_ranks(per_rank: list[list[RankStep]]) -> dict[str, Any]:
    """The verify step's GPU time with every rank's waiting for another rank taken out, from the profiler traces
    of all TP ranks (one RankStep list per rank, rank 0 first; rank_steps makes them).

    The measure (`verify_ms`): per step, max over ranks of (GPU window - time spent waiting for another rank);
    the median over steps. A rank waits only at a meeting kernel (an all-reduce, fused or NCCL's, or another
    collective): it cannot leave it before the last rank has arrived. So for each meeting call j of a step, take
    each rank's approach to it, a_r(j) = the kernel's duration + the idle time of the device just before it (an
    early rank either spins inside the kernel or, if its launch waits, idles before it); the rank that arrived
    last has the shortest approach, and the excess a_r(j) - min_r a_r(j) is rank r's wait. Rank r's busy time is
    its window minus its waits: its own kernels, its own idle gaps, and each collective at the cost it has for the
    last rank to arrive (for two ranks: the transfer). The step costs what the slower rank's busy time says.

    Why rank skew cannot swamp it: skew (one rank launching the step, or reaching an all-reduce, later than
    the other: CPU launch jitter, the profiler, the other process) moves time into the early rank's approach to
    the next meeting kernel, and exactly that excess is subtracted from it; the late rank's window does not hold
    it. The result is the same whether the early rank spins inside the kernel or idles before it. It needs no
    common clock (durations only; calls pair by their order within a step, steps by their order, since SGLang's
    ranks run the same forwards) and no model of the kernels. What is not removed is real: a rank that is itself
    slower (its kernels, its own idle gaps) sets the step's cost, as it does for the next token. Medians over
    steps keep a rare slow step from moving it.

    Also: per rank the raw window, waits, busy time, GPU idle time and the part of it right before meeting
    kernels (medians over steps) and the waiting share of the window; per rank the summed raw durations of the
    fused, NCCL all-reduce, other collective and add+RMSNorm kernels (kernel_ms, waits included); per call, the
    meeting kernels' durations at the last-arriving rank (min over ranks: no waiting in them) for the fused
    kernel and NCCL's all-reduce, the add+RMSNorm kernel's duration, and rank 0's raw durations (waits included,
    as a rank-0 trace alone shows them); meeting kernels per verify; the spread of the step start across ranks
    (needs the ranks' shared host clock: one machine). With one rank there is nothing to wait for: verify_ms is
    the median window."""
    ranks = len(per_rank)
    out: dict[str, Any] = {"ranks": ranks, "steps_per_rank": [len(s) for s in per_rank]}
    if not ranks or not all(per_rank):
        return {**out, "verify_ms": None, "why": "a rank's trace holds no verify step"}
    groups, pairing = _pairing(per_rank)
    matched = [g for g in groups if len({s.labels() for s in g}) == 1]
    # a step cut by the start or end of the profiler window holds fewer meeting kernels than the others
    counts = Counter(len(g[0].calls) for g in matched)
    full = max(counts, key=lambda n: (counts[n], n)) if counts else 0
    complete = [g for g in matched if len(g[0].calls) == full]
    out.update(pairing=pairing, steps=len(complete), unmatched_steps=len(groups) - len(matched),
               incomplete_steps=len(matched) - len(complete))
    matched = complete
    if not matched:
        return {**out, "verify_ms": None,
                "why": "no step whose meeting kernels (all-reduces, collectives) are the same on every rank"}
    cost, floors = [], {"fused": [], "nccl_ar": [], "sync": []}
    per = {k: [[] for _ in range(ranks)] for k in ("window", "wait", "busy", "idle", "idle_at_calls", "fused",
                                                     "nccl_ar", "sync", "add_rmsnorm")}
    raw0: dict[str, list[float]] = {"fused": [], "nccl_ar": []}
    skew, per_step = [], []
    for g in matched:
        n = len(g[0].calls)
        low = [min(s.calls[j][3] for s in g) for j in range(n)]
        for j in range(n):
            floors[g[0].calls[j][0]].append(min(s.calls[j][2] for s in g))
        waits = [sum(s.calls[j][3] - low[j] for j in range(n)) for s in g]
        busy = [s.window - w for s, w in zip(g, waits, strict=True)]
        cost.append(max(busy))
        for r, s in enumerate(g):
            for k, v in (("window", s.window), ("wait", waits[r]), ("busy", busy[r]), ("idle", s.window - s.active),
                         ("idle_at_calls", sum(c[3] - c[2] for c in s.calls)), ("add_rmsnorm", sum(s.add_rmsnorm))):
                per[k][r].append(v)
            for lbl in MEETING_LABELS:
                per[lbl][r].append(sum(c[2] for c in s.calls if c[0] == lbl))
        for lbl, _, d, _ in g[0].calls:
            if lbl in raw0:
                raw0[lbl].append(d)
        skew.append(max(s.start for s in g) - min(s.start for s in g))
        per_step.append([round(max(busy), 1), [round(s.window, 1) for s in g], [round(w, 1) for w in waits]])
    ms = {k: [round(median(v) / 1e3, 4) for v in rows] for k, rows in per.items()}
    calls = [st.labels() for g in matched for st in g]
    out.update(
        verify_ms=round(median(cost) / 1e3, 4), verify_ms_min=round(min(cost) / 1e3, 4),
        window_ms=ms["window"], wait_ms=ms["wait"], busy_ms=ms["busy"], idle_ms=ms["idle"],
        idle_at_calls_ms=ms["idle_at_calls"],
        wait_share=[round(sum(w) / sum(x), 4) if sum(x) else None
                    for w, x in zip(per["wait"], per["window"], strict=True)],
        kernel_ms={k: ms[k] for k in ("fused", "nccl_ar", "sync", "add_rmsnorm")},
        fused_per_verify=median(c.count("fused") for c in calls),
        nccl_ar_per_verify=median(c.count("nccl_ar") for c in calls),
        sync_per_verify=median(c.count("sync") for c in calls),
        add_rmsnorm_per_verify=median(len(s.add_rmsnorm) for g in matched for s in g),
        fused_call_us=_dist(floors["fused"]), nccl_call_us=_dist(floors["nccl_ar"]),
        add_rmsnorm_us=_dist([d for g in matched for s in g for d in s.add_rmsnorm]),
        rank0_fused_call_us=_dist(raw0["fused"]), rank0_nccl_call_us=_dist(raw0["nccl_ar"]),
        start_spread_us=_dist(skew, 1) if ranks > 1 else None,
        per_step=per_step)
    return out


TOP_KERNELS = 10


def _kernel_classes_or_error(events: list[dict[str, Any]]) -> dict[str, Any]:
    try:
        return kernel_classes(events)
    except Exception as e:  # the breakdown must not cost the stage times
        return {"error": f"{type(e).__name__}: {e}"[:300]}


def kernel_classes(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Per stage (decode, verify, draft, draft_extend: the spans present), the GPU time per kernel class
    (trace_kernels.KERNEL_CLASSES) in ms per step: every device activity attributed to a step (trace_kernels
    activity_per_span), summed per class over the steps / steps; `kernel_ms` is their sum, `gpu_window_ms` the
    median step window (first start to last end); `top`: the TOP_KERNELS kernels by time, per step."""
    out: dict[str, Any] = {}
    for stage, match in STAGES.items():
        spans, method = activity_per_span(events, match, KERNEL_CLASSES)
        spans = [s for s in spans if s.items]
        if not spans:
            continue
        per_class: Counter[str] = Counter()
        per_kernel: Counter[str] = Counter()
        calls: Counter[str] = Counter()
        classes: dict[str, str] = {}
        windows = []
        for s in spans:
            for label, e in s.items:
                cls, dur = kernel_class(label, e), float(e["dur"])
                per_class[cls] += dur
                per_kernel[e["name"]] += dur
                calls[e["name"]] += 1
                classes[e["name"]] = cls
            windows.append(max(float(e["ts"]) + float(e["dur"]) for _, e in s.items)
                           - min(float(e["ts"]) for _, e in s.items))
        n = len(spans)
        out[stage] = {
            "steps": n, "method": method, "kernel_ms": round(sum(per_class.values()) / n / 1e3, 4),
            "gpu_window_ms": round(median(windows) / 1e3, 4),
            "classes": {c: round(per_class.get(c, 0.0) / n / 1e3, 4) for c in CLASS_ORDER},
            "top": [{"name": name[:200], "class": classes[name], "ms": round(t / n / 1e3, 4),
                     "calls": round(calls[name] / n, 2)} for name, t in per_kernel.most_common(TOP_KERNELS)]}
    return out


def profile_traces(paths: list[Path], *, classes: bool = False) -> dict[str, Any]:
    """What one profiler window's traces say, rank 0 first: rank 0's stage_times, and "verify_ranks":
    verify_across_ranks over every rank (each trace loaded, reduced to its steps and let go: a 61-layer trace of
    32 steps is ~100 MB of JSON), with the attribution method per rank. A file that cannot be read (OSError, or
    EOFError / ValueError: still being written) raises; a problem of the rank analysis itself is recorded in
    verify_ranks["error"] and costs rank 0's stage times nothing. classes: also rank 0's kernel_classes."""
    res: dict[str, Any] = {}
    per_rank, methods, problem = [], [], None
    for r, p in enumerate(paths):
        events = load_trace(p)
        if r == 0:
            res = stage_times(events)
            if classes:
                res["kernel_classes"] = _kernel_classes_or_error(events)
        if problem is None:
            try:
                steps, method = rank_steps(events)
                per_rank.append(steps)
                methods.append(method)
            except Exception as e:  # the newer analysis must not cost the stage times
                problem = f"rank {r}: {type(e).__name__}: {e}"[:300]
        del events
    if problem is None:
        try:
            return {**res, "verify_ranks": {**verify_across_ranks(per_rank), "methods": methods}}
        except Exception as e:
            problem = f"{type(e).__name__}: {e}"[:300]
    return {**res, "verify_ranks": {"ranks": len(paths), "verify_ms": None, "error": problem}}
