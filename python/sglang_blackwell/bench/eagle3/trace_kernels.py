"""Which GPU kernels ran inside which SGLang forward step, from a torch profiler trace (Chrome trace JSON, as
SGLang's /start_profile writes it; load it with `trace.load_trace`).

SGLang 0.5.14 wraps every forward in a `record_function` span named after its mode (`step[TARGET_VERIFY bs=1]`,
`step[DECODE bs=1]`, `step[EXTEND bs=1 toks=16]`, see sglang_api). A kernel belongs to the span whose CPU
interval holds the runtime call that launched it: the kernel event and its launch (`cudaLaunchKernel*`,
`cuLaunchKernel*`, or `cudaGraphLaunch` for every kernel of a replayed CUDA graph) share `args.correlation`,
and the launch lies inside the span on the same thread. That is exact even with overlap scheduling, where the
GPU runs a step's kernels while the CPU already prepares the next step.

Without CPU events (a GPU-only trace) the fallback uses the GPU-side `gpu_user_annotation` windows the
profiler derives from the same correlation: a kernel counts for a window when it starts inside it, on the same
device. Overlapping windows of one step (one per stream) are merged. The result says which method was used.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

# FlashInfer 0.6.12 include/flashinfer/comm/trtllm_allreduce_fusion.cuh: the two kernels behind
# flashinfer.comm.allreduce_fusion (trtllm backend): one-shot (Lamport buffers) and two-shot (barrier sync).
# Whole identifier only: trtllm_moe_allreduce_fusion.cuh has moereduce_/moefinalize_allreduce_fusion_kernel_...
FUSED_ALLREDUCE_KERNEL = re.compile(r"(?<![A-Za-z0-9_])allreduce_fusion_kernel_(?:oneshot_lamport|twoshot_sync)"
                                    r"(?![A-Za-z0-9_])")
# NCCL 2.2x device kernels: ncclDevKernel_AllReduce_Sum_bf16_RING_LL(...), older ncclKernel_AllReduce_...
NCCL_ALLREDUCE_KERNEL = re.compile(r"nccl(?:Dev)?Kernel_AllReduce")

# every other collective kernel: NCCL's all-gather (vocab-parallel logits) and friends, FlashInfer's trtllm custom
# all-reduce and MoE all-reduce fusion, torch symmetric-memory all-reduce, SGLang's custom all-reduce
COLLECTIVE_KERNEL = re.compile(r"nccl(?:Dev)?Kernel_|trtllm_allreduce::\w*AllReduceKernel|allreduce_fusion_kernel|"
                               r"(?:one|two)_shot_all_reduce|multimem_all_reduce|cross_device_reduce")

# Where a step's GPU time goes, by kernel class (the first pattern a kernel's name matches; device copies and
# memsets are "copy/elementwise", a kernel no pattern matches "other"). Names as SGLang 0.5.14 on H200 runs them
# (test/data's lab traces): attention is SGLang's Triton attention (_fwd_kernel for extend and verify,
# _fwd_grouped_kernel_stage1 / _fwd_kernel_stage2 for decode), any kernel with `verify` in its name (the split-KV
# verify kernels of P8, _verify_shared_kv_stage1 / _verify_shared_kv_merge; not sgl-kernel's VerifyTreeGreedy), and
# FlashInfer's / FlashMLA's; the Triton KV-index and cache-location helpers count as copies.
KERNEL_CLASSES: dict[str, re.Pattern[str]] = {
    "allreduce": re.compile(rf"{FUSED_ALLREDUCE_KERNEL.pattern}|{COLLECTIVE_KERNEL.pattern}|allreduce|AllReduce|"
                            r"all_reduce"),
    "attention": re.compile(r"(?<![A-Za-z0-9])_fwd_(?:grouped_)?kernel(?:_stage[12])?(?![A-Za-z0-9])|"
                            r"verify(?!_?tree)|BatchPrefill|BatchDecode|BatchMLA|flash_?fwd|fmha|flashmla|FlashMLA|"
                            r"decode_attention|extend_attention"),
    "moe": re.compile(r"moe|MoE|Moe|expert|topk_softmax|topkGating"),
    "norm": re.compile(r"RMSNorm|LayerNorm|rms_?norm|layer_?norm"),
    "rope": re.compile(r"rope|Rope|ROPE|rotary|Rotary"),
    "activation": re.compile(r"act_and_mul|silu|gelu|swiglu|Activation"),
    "gemm": re.compile(r"nvjet|gemm|Gemm|GEMM|cutlass|cublas|splitKreduce|xmma|matmul|wgmma|bmm|[Mm]arlin"),
    "copy/elementwise": re.compile(r"elementwise|[Cc]opy|CatArray|cat_|[Ii]ndex|[Ff]ill|gather|scatter|"
                                   r"triton_(?:poi|red|per)_|reduce_kernel|arange|store_kvcache|kv_buffer|kv_indices|"
                                   r"cache_loc|to_token_pool|[Mm]emcpy|[Mm]emset|concat|Scan|masked"),
}
OTHER_CLASS = "other"
CLASS_ORDER = (*KERNEL_CLASSES, OTHER_CLASS)

LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")


def kernel_class(label: str | None, event: dict[str, Any]) -> str:
    """The class of one device activity as activity_per_span labels it with KERNEL_CLASSES."""
    if label is not None:
        return label
    return OTHER_CLASS if event.get("cat") == "kernel" else "copy/elementwise"


def is_verify_span(name: str) -> bool:
    return name.startswith("step[TARGET_VERIFY")


@dataclass
class Span:
    name: str
    ts: float  # microseconds, trace clock
    dur: float
    counts: dict[str, int] = field(default_factory=dict)
    # the device activity attributed to this span: (label or None, event), in trace order
    items: list[tuple[str | None, dict[str, Any]]] = field(default_factory=list)

    @property
    def end(self) -> float:
        return self.ts + self.dur


def x_events(events: list[dict[str, Any]], cat: str) -> list[dict[str, Any]]:
    return [e for e in events if e.get("ph") == "X" and e.get("cat") == cat and isinstance(e.get("name"), str)
            and isinstance(e.get("ts"), (int, float)) and isinstance(e.get("dur"), (int, float))]


def _correlation(e: dict[str, Any]) -> int | None:
    c = (e.get("args") or {}).get("correlation")
    return int(c) if isinstance(c, (int, float)) else None


def kernel_label(name: str, patterns: Mapping[str, re.Pattern[str]]) -> str | None:
    for label, pat in patterns.items():
        if pat.search(name):
            return label
    return None


# what runs on the device besides kernels: a step's GPU window (gpu_user_annotation) spans these too
DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")


def kernels_per_span(events: list[dict[str, Any]], span_match: Callable[[str], bool],
                     patterns: Mapping[str, re.Pattern[str]]) -> dict[str, Any]:
    """Count kernels whose name matches each pattern, per matching span, in trace order.

    Returns {"method": "correlation" | "gpu_window" | "none", "spans": [{"name", "ts", "dur", "counts"}],
    "kernels_matched": {label: n over the whole trace}, "unattributed": {label: n outside every span}}."""
    kernels = x_events(events, "kernel")
    matched = [(lbl, k) for k in kernels if (lbl := kernel_label(k["name"], patterns)) is not None]
    totals = {label: sum(1 for lbl, _ in matched if lbl == label) for label in patterns}
    result: dict[str, Any] = {"method": "none", "spans": [], "kernels_matched": totals,
                              "kernel_events": len(kernels)}
    ordered, method, fallback = _attribute(events, span_match, matched, patterns)
    result["method"] = method
    if fallback:
        result["fallback"] = fallback
    result["spans"] = [{"name": s.name, "ts": s.ts, "dur": s.dur, "counts": s.counts} for s in ordered]
    result["unattributed"] = {label: totals[label] - sum(s.counts[label] for s in ordered) for label in patterns}
    return result


def activity_per_span(events: list[dict[str, Any]], span_match: Callable[[str], bool],
                      patterns: Mapping[str, re.Pattern[str]]) -> tuple[list[Span], str]:
    """Every device activity (kernels, memcpy, memset) of each matching span, attributed as kernels_per_span
    attributes the matched kernels, each labelled with the first pattern its name matches (None: no pattern).
    Returns the spans in trace order, each with `items` [(label, event)] and `counts`, and the method."""
    items = [(kernel_label(e["name"], patterns) if e["cat"] == "kernel" else None, e)
             for cat in DEVICE_CATEGORIES for e in x_events(events, cat)]
    items.sort(key=lambda it: float(it[1]["ts"]))
    spans, method, _ = _attribute(events, span_match, items, patterns)
    return spans, method


def _attribute(events: list[dict[str, Any]], span_match: Callable[[str], bool],
               items: list[tuple[str | None, dict[str, Any]]],
               patterns: Mapping[str, re.Pattern[str]]) -> tuple[list[Span], str, str | None]:
    """Spans (sorted by start) with the items attributed to each: by correlation with a launch inside the
    span where the trace has CPU spans and launches, else (or when none of the labelled items, or of all items
    if none is labelled, links to a launch inside a span) by the GPU windows."""
    spans = _cpu_spans(events, span_match)
    launches = {c: e for e in events if e.get("cat") in LAUNCH_CATEGORIES and (c := _correlation(e)) is not None}
    labelled = any(lbl is not None for lbl, _ in items)
    method, fallback = "none", None
    attributed: list[Span] = []
    if spans and launches:
        method = "correlation"
        attributed = _by_correlation(spans, launches, items, patterns)
    if not attributed or (items and not _holds_any(attributed, labelled)):
        # no CPU spans / launches, or no item could be tied to a launch: GPU windows instead
        windows = _gpu_windows(events, span_match)
        if windows:
            by_window = _by_gpu_window(windows, items, patterns)
            if not attributed or _holds_any(by_window, labelled):
                if attributed:
                    fallback = "no matched kernel links to a launch inside a span: GPU windows used"
                method = "gpu_window"
                attributed = by_window
    return sorted(attributed, key=lambda s: s.ts), method, fallback


def _holds_any(spans: list[Span], labelled: bool) -> bool:
    return any(lbl is not None or not labelled for s in spans for lbl, _ in s.items)


def _cpu_spans(events: list[dict[str, Any]], span_match: Callable[[str], bool]) -> dict[tuple, list[Span]]:
    """Matching user_annotation spans grouped by (pid, tid), sorted by start."""
    out: dict[tuple, list[Span]] = {}
    for e in x_events(events, "user_annotation"):
        if span_match(e["name"]):
            out.setdefault((e.get("pid"), e.get("tid")), []).append(Span(e["name"], float(e["ts"]),
                                                                          float(e["dur"])))
    for v in out.values():
        v.sort(key=lambda s: s.ts)
    return out


def _containing(spans: list[Span], starts: list[float], t: float) -> Span | None:
    """The innermost span of a sorted list that holds time t."""
    i = bisect.bisect_right(starts, t)
    best = None
    for s in reversed(spans[:i]):
        if s.ts <= t <= s.end and (best is None or s.dur < best.dur):
            best = s
    return best


def _add(s: Span, label: str | None, e: dict[str, Any]) -> None:
    s.items.append((label, e))
    if label is not None:
        s.counts[label] += 1


def _by_correlation(spans: dict[tuple, list[Span]], launches: dict[int, dict[str, Any]],
                    items: list[tuple[str | None, dict[str, Any]]],
                    patterns: Mapping[str, re.Pattern[str]]) -> list[Span]:
    for group in spans.values():
        for s in group:
            s.counts, s.items = dict.fromkeys(patterns, 0), []
    starts = {key: [s.ts for s in group] for key, group in spans.items()}
    for label, k in items:
        corr = _correlation(k)
        launch = launches.get(corr) if corr is not None else None
        if launch is None:
            continue
        key = (launch.get("pid"), launch.get("tid"))
        if key not in spans:
            continue
        s = _containing(spans[key], starts[key], float(launch["ts"]))
        if s is not None:
            _add(s, label, k)
    return [s for group in spans.values() for s in group]


def _gpu_windows(events: list[dict[str, Any]], span_match: Callable[[str], bool]) -> dict[Any, list[Span]]:
    """gpu_user_annotation windows per device (pid), sorted; overlapping windows of the same name (one per
    stream) merge into one step."""
    per_dev: dict[Any, list[Span]] = {}
    for e in sorted(x_events(events, "gpu_user_annotation"), key=lambda e: e["ts"]):
        if not span_match(e["name"]):
            continue
        group = per_dev.setdefault(e.get("pid"), [])
        s = Span(e["name"], float(e["ts"]), float(e["dur"]))
        last = group[-1] if group else None
        if last is not None and last.name == s.name and s.ts <= last.end:
            last.dur = max(last.end, s.end) - last.ts
        else:
            group.append(s)
    return per_dev


def _by_gpu_window(windows: dict[Any, list[Span]], items: list[tuple[str | None, dict[str, Any]]],
                   patterns: Mapping[str, re.Pattern[str]]) -> list[Span]:
    for group in windows.values():
        for s in group:
            s.counts, s.items = dict.fromkeys(patterns, 0), []
    starts = {dev: [s.ts for s in group] for dev, group in windows.items()}
    for label, k in items:
        dev = k.get("pid")
        if dev not in windows:
            continue
        s = _containing(windows[dev], starts[dev], float(k["ts"]))
        if s is not None:
            _add(s, label, k)
    return [s for group in windows.values() for s in group]


def fusion_in_verify_verdict(counts: list[int], expected: int) -> dict[str, Any]:
    """Did every target-verify forward launch the fused all-reduce kernel `expected` times?

    `counts` are per verify step in trace order. Every step but the last must show exactly `expected` launches
    (the last may be cut by the end of the profiler window: 0..expected), and at least two steps must be
    complete, so a trace that holds one lucky step does not pass."""
    n = len(counts)
    full = sum(1 for c in counts if c == expected)
    out: dict[str, Any] = {"steps": n, "expected_per_step": expected, "counts": list(counts),
                           "steps_with_expected": full}
    if expected <= 0:
        return {**out, "ok": False, "why": f"expected launches per step must be positive, got {expected}"}
    if n < 2:
        return {**out, "ok": False, "why": f"only {n} target-verify step(s) in the trace (need >= 2)"}
    bad = [(i, c) for i, c in enumerate(counts[:-1]) if c != expected]
    if bad:
        i, c = bad[0]
        return {**out, "ok": False, "why": f"verify step {i} launched the fused kernel {c} times, expected "
                                          f"{expected} ({len(bad)} of {n - 1} full steps differ)"}
    if not 0 <= counts[-1] <= expected:
        return {**out, "ok": False, "why": f"last verify step launched {counts[-1]} fused kernels, more than "
                                          f"{expected}"}
    if full < 2:
        return {**out, "ok": False, "why": f"only {full} verify step(s) with {expected} launches"}
    return {**out, "ok": True, "why": f"{full} of {n} verify steps launched {expected} fused all-reduce kernels"}
