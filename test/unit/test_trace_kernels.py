"""bench/trace_kernels: fused all-reduce launches per target-verify step, from synthetic torch-profiler traces.

The traces are written here in the Chrome trace format torch's Kineto profiler exports (the GPU is simulated):
`user_annotation` spans for SGLang's step[...] record_function ranges on the CPU thread, `cuda_runtime`
launches (cudaGraphLaunch for a replayed CUDA graph, cudaLaunchKernelExC for eager PDL launches) sharing
`args.correlation` with their `kernel` events on the device, and `gpu_user_annotation` windows on the device.
Kernel names are the demangled names of FlashInfer 0.6.12's trtllm_allreduce_fusion.cuh and NCCL 2.28.
With overlap scheduling the GPU runs step i while the CPU is already inside step i+1's span: the synthetic
traces do the same, and the draft model's own fused kernels run inside the verify's GPU time.
"""

from __future__ import annotations

import gzip
import json

import pytest

from sglang_blackwell.bench import trace
from sglang_blackwell.bench.trace_kernels import (
    FUSED_ALLREDUCE_KERNEL,
    NCCL_ALLREDUCE_KERNEL,
    fusion_in_verify_verdict,
    is_verify_span,
    kernels_per_span,
)

FI = "flashinfer::trtllm_allreduce_fusion::"
FUSED_ONESHOT = (f"void {FI}allreduce_fusion_kernel_oneshot_lamport<({FI}AllReduceFusionPattern)1, "
                 f"__nv_bfloat16, 2, false, true>({FI}AllReduceFusionParams<__nv_bfloat16>)")
FUSED_TWOSHOT = (f"void {FI}allreduce_fusion_kernel_twoshot_sync<({FI}AllReduceFusionPattern)1, __nv_bfloat16, "
                 f"2, false>({FI}AllReduceFusionParams<__nv_bfloat16>, std::array<int, 2ul>, std::array<int, 2ul>)")
NCCL_AR = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
OTHER = ["void flashinfer::norm::RMSNormKernel<8u, __nv_bfloat16>(...)", "_fwd_kernel_stage1",
         "void flashinfer::trtllm_allreduce::lamport_initialize_kernel<half>(half*, unsigned long)",
         "void flashinfer::trtllm_allreduce::oneShotAllReduceKernel<__nv_bfloat16, 2>(...)"]
PATTERNS = {"fused": FUSED_ALLREDUCE_KERNEL, "nccl_ar": NCCL_ALLREDUCE_KERNEL}
CPU, TID, DEV, STREAM = 4242, 4242, 0, 7


class Trace:
    def __init__(self) -> None:
        self.events: list[dict] = [{"ph": "M", "name": "process_name", "pid": CPU, "args": {"name": "python"}}]
        self.corr = 100

    def span(self, name: str, ts: float, dur: float, cat: str = "user_annotation", pid=CPU, tid=TID) -> None:
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur})

    def launch(self, name: str, ts: float) -> int:
        self.corr += 1
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": name, "pid": CPU, "tid": TID, "ts": ts,
                            "dur": 4.0, "args": {"correlation": self.corr, "cbid": 311}})
        return self.corr

    def kernel(self, name: str, ts: float, corr: int, dur: float = 3.0) -> None:
        self.events.append({"ph": "X", "cat": "kernel", "name": name, "pid": DEV, "tid": STREAM, "ts": ts,
                            "dur": dur, "args": {"correlation": corr, "device": DEV, "stream": STREAM}})


def graph_step(tr: Trace, name: str, cpu_ts: float, gpu_ts: float, fused: int, nccl: int, *,
               gpu_windows: int = 1) -> float:
    """One forward replayed from a CUDA graph: span + cudaGraphLaunch on the CPU, kernels later on the GPU.
    Returns the GPU end time."""
    tr.span(name, cpu_ts, 60.0)
    corr = tr.launch("cudaGraphLaunch", cpu_ts + 40.0)
    t = gpu_ts
    for i in range(fused):
        tr.kernel(OTHER[i % 2], t, corr)
        tr.kernel(FUSED_ONESHOT, t + 3, corr)
        t += 6
    for _ in range(nccl):
        tr.kernel(NCCL_AR, t, corr)
        t += 8
    for w in range(gpu_windows):  # the profiler may emit one window per stream; they overlap
        tr.span(name, gpu_ts + w, t - gpu_ts - w, cat="gpu_user_annotation", pid=DEV, tid=STREAM + w)
    return t


def spec_trace(steps: int, fused: int, *, draft_fused: int = 3, cpu: bool = True, gpu_windows: int = 1,
               last_fused: int | None = None) -> Trace:
    """EAGLE-3 rounds with overlap scheduling: draft (its own fused kernels) then target verify; the GPU runs
    a round while the CPU is already in the next one's spans."""
    tr = Trace()
    cpu_ts, gpu_ts = 1000.0, 1000.0
    for i in range(steps):
        n = last_fused if (last_fused is not None and i == steps - 1) else fused
        gpu_ts = graph_step(tr, "step[DRAFT_EXTEND bs=1]", cpu_ts, max(gpu_ts, cpu_ts + 80), draft_fused, 0)
        # the verify's kernels start before the draft's last ones end on another stream: overlap in time
        gpu_ts = graph_step(tr, "step[TARGET_VERIFY bs=1]", cpu_ts + 70, gpu_ts - 10, n, 2,
                            gpu_windows=gpu_windows)
        cpu_ts += 140.0  # the CPU moves on long before the GPU has finished
    if not cpu:
        tr.events = [e for e in tr.events if e.get("cat") in ("kernel", "gpu_user_annotation")]
    return tr


def verify_counts(events: list[dict], label: str = "fused") -> list[int]:
    return [s["counts"][label] for s in kernels_per_span(events, is_verify_span, PATTERNS)["spans"]]


def test_counts_fused_kernels_per_verify_step_through_graph_launches():
    tr = spec_trace(5, 19)
    r = kernels_per_span(tr.events, is_verify_span, PATTERNS)
    assert r["method"] == "correlation"
    assert [s["counts"]["fused"] for s in r["spans"]] == [19] * 5
    assert [s["counts"]["nccl_ar"] for s in r["spans"]] == [2] * 5
    assert r["kernels_matched"] == {"fused": 5 * 19 + 5 * 3, "nccl_ar": 10}
    assert r["unattributed"]["fused"] == 15  # the draft's own fused kernels are not the verify's


def test_draft_kernels_overlapping_the_verify_on_the_gpu_are_not_counted():
    tr = spec_trace(3, 19, draft_fused=5)
    # the draft's fused kernels do run inside the verify's GPU window...
    drafts = [e for e in tr.events if e.get("cat") == "kernel" and "oneshot" in e["name"]]
    windows = [e for e in tr.events if e.get("cat") == "gpu_user_annotation"]
    inside = sum(1 for k in drafts for w in windows if w["ts"] <= k["ts"] <= w["ts"] + w["dur"])
    assert inside > 3 * 19
    # ...and are still attributed to the draft step, not to the verify
    assert verify_counts(tr.events) == [19, 19, 19]
    every = kernels_per_span(tr.events, lambda n: n.startswith("step["), PATTERNS)
    assert [s["counts"]["fused"] for s in every["spans"]] == [5, 19] * 3


def test_eager_launches_each_with_its_own_correlation():
    tr = Trace()
    for step in range(3):
        ts = 1000.0 + 500 * step
        tr.span("step[TARGET_VERIFY bs=2]", ts, 300.0)
        for k in range(7):
            corr = tr.launch("cudaLaunchKernelExC", ts + 10 + 20 * k)
            tr.kernel(FUSED_TWOSHOT if k % 2 else FUSED_ONESHOT, ts + 400 + 5 * k, corr)
    assert verify_counts(tr.events) == [7, 7, 7]


def test_gpu_only_trace_falls_back_to_merged_gpu_windows():
    tr = spec_trace(4, 19, draft_fused=0, cpu=False, gpu_windows=2)
    r = kernels_per_span(tr.events, is_verify_span, PATTERNS)
    assert r["method"] == "gpu_window"
    assert [s["counts"]["fused"] for s in r["spans"]] == [19] * 4  # two windows per step merged, not doubled


def test_launches_that_link_to_no_span_use_gpu_windows():
    tr = spec_trace(3, 19, draft_fused=0)
    for e in tr.events:  # correlations broken: kernels point at launches that are not in the trace
        if e.get("cat") == "kernel":
            e["args"]["correlation"] += 10_000
    r = kernels_per_span(tr.events, is_verify_span, PATTERNS)
    assert r["method"] == "gpu_window" and "fallback" in r
    assert [s["counts"]["fused"] for s in r["spans"]] == [19] * 3


def test_trace_without_kernels_counts_zero_and_fails_the_verdict():
    tr = spec_trace(3, 19)
    tr.events = [e for e in tr.events if e.get("cat") != "kernel"]
    counts = verify_counts(tr.events)
    assert counts == [0, 0, 0]
    v = fusion_in_verify_verdict(counts, 19)
    assert not v["ok"] and "0 times" in v["why"]


def test_fusion_off_trace_has_nccl_but_no_fused_kernels():
    tr = spec_trace(4, 0, draft_fused=0)
    assert verify_counts(tr.events) == [0] * 4
    assert verify_counts(tr.events, "nccl_ar") == [2] * 4


def test_names_that_are_not_the_fusion_kernel_do_not_match():
    assert FUSED_ALLREDUCE_KERNEL.search(FUSED_ONESHOT) and FUSED_ALLREDUCE_KERNEL.search(FUSED_TWOSHOT)
    assert NCCL_ALLREDUCE_KERNEL.search(NCCL_AR)
    assert NCCL_ALLREDUCE_KERNEL.search("ncclKernel_AllReduce_RING_LL_Sum_bfloat16(ncclDevComm*, ...)")
    moe = ["void flashinfer::trtllm_moe_allreduce_fusion::moereduce_allreduce_fusion_kernel_oneshot_lamport"
           "<__nv_bfloat16, 2, true, true, true, false>(...)",
           "void flashinfer::trtllm_moe_allreduce_fusion::moefinalize_allreduce_fusion_kernel_oneshot_lamport<...>"]
    for name in OTHER + moe + ["ncclDevKernel_AllGather_RING_LL(...)", "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL"]:
        assert not FUSED_ALLREDUCE_KERNEL.search(name)
        assert not NCCL_ALLREDUCE_KERNEL.search(name)


def test_gzipped_trace_file_round_trip(tmp_path):
    tr = spec_trace(3, 19)
    path = tmp_path / "A-1764460800.1-TP-0.trace.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": tr.events, "deviceProperties": [{"id": 0, "name": "NVIDIA H200"}]}, f)
    assert verify_counts(trace.load_trace(path)) == [19, 19, 19]


@pytest.mark.parametrize(("counts", "ok", "why"), [
    ([19, 19, 19, 19], True, "4 of 4"),
    ([19, 19, 19, 7], True, "3 of 4"),  # the last step cut by the end of the window
    ([19, 19, 0], True, "2 of 3"),
    ([19, 18, 19, 19], False, "step 1 launched the fused kernel 18 times"),
    ([19, 19, 38], False, "more than 19"),
    ([19], False, "only 1 target-verify step"),
    ([], False, "only 0 target-verify step"),
    ([19, 5], False, "only 1 verify step(s) with 19"),
    ([0, 0, 0], False, "launched the fused kernel 0 times"),
])
def test_verdict(counts, ok, why):
    v = fusion_in_verify_verdict(counts, 19)
    assert v["ok"] is ok, v
    assert why in v["why"], v["why"]


def test_verdict_needs_a_positive_expectation():
    assert not fusion_in_verify_verdict([0, 0, 0], 0)["ok"]
