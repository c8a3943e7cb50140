"""Per-stage times from a torch profiler trace (Chrome trace JSON, optionally gzipped) written by SGLang's
/start_profile: the spans SGLang 0.5.14 records around each forward (see sglang_api).

GPU time of a span comes from the "gpu_user_annotation" events the CUDA profiler attaches to a CPU
record_function range (first kernel start to last kernel end of the work launched inside it). Where a trace
holds no GPU annotations (no CUDA activity recorded), the CPU-side "user_annotation" durations are used and
the result says so: with CUDA graphs and overlap scheduling those measure launch time, not GPU time.

Inside each GPU window it also sums the kernels that fusion is about: all-reduce kernels (FlashInfer's fused
AR+residual+RMSNorm, or NCCL's all-reduce) and the separate residual-add+RMSNorm kernel that the fused one
replaces. That is how much of a verify step the communication costs, and what fusion can save at most.
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .stats import median
from .trace_kernels import (
    FUSED_ALLREDUCE_KERNEL,
    NCCL_ALLREDUCE_KERNEL,
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
