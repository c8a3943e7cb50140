"""Synthetic torch-profiler traces in the Chrome trace format Kineto exports, for CPU tests (the GPU is
simulated): `user_annotation` spans for SGLang's step[...] record_function ranges on the CPU thread,
`cuda_runtime` launches (cudaGraphLaunch for a replayed CUDA graph) sharing `args.correlation` with their
`kernel` events on the device, `gpu_user_annotation` windows on the device. Kernel names are the demangled
names of FlashInfer 0.6.12's trtllm_allreduce_fusion.cuh and NCCL 2.28.

`spec_trace` is an EAGLE-3 run with overlap scheduling: per round a draft step (with its own fused kernels)
and a target-verify step, the GPU running a round while the CPU is already in the next round's spans."""

from __future__ import annotations

FI = "flashinfer::trtllm_allreduce_fusion::"
FUSED_ONESHOT = (f"void {FI}allreduce_fusion_kernel_oneshot_lamport<({FI}AllReduceFusionPattern)1, "
                 f"__nv_bfloat16, 2, false, true>({FI}AllReduceFusionParams<__nv_bfloat16>)")
FUSED_TWOSHOT = (f"void {FI}allreduce_fusion_kernel_twoshot_sync<({FI}AllReduceFusionPattern)1, __nv_bfloat16, "
                 f"2, false>({FI}AllReduceFusionParams<__nv_bfloat16>, std::array<int, 2ul>, std::array<int, 2ul>)")
NCCL_AR = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
OTHER = ["void flashinfer::norm::RMSNormKernel<8u, __nv_bfloat16>(...)", "_fwd_kernel_stage1",
         "void flashinfer::trtllm_allreduce::lamport_initialize_kernel<half>(half*, unsigned long)",
         "void flashinfer::trtllm_allreduce::oneShotAllReduceKernel<__nv_bfloat16, 2>(...)"]
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

    def document(self) -> dict:
        return {"schemaVersion": 1, "traceEvents": self.events,
                "deviceProperties": [{"id": 0, "name": "NVIDIA H200", "computeMajor": 9, "computeMinor": 0}]}


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


def spec_trace(steps: int, fused: int, *, draft_fused: int = 3, nccl: int = 2, cpu: bool = True,
               gpu_windows: int = 1, last_fused: int | None = None) -> Trace:
    tr = Trace()
    cpu_ts, gpu_ts = 1000.0, 1000.0
    tr.span("step[EXTEND bs=1 toks=20]", cpu_ts - 200, 100.0)  # the request's prefill, before the rounds
    for i in range(steps):
        n = last_fused if (last_fused is not None and i == steps - 1) else fused
        gpu_ts = graph_step(tr, "step[DRAFT_EXTEND bs=1]", cpu_ts, max(gpu_ts, cpu_ts + 80), draft_fused, 0)
        # the verify's kernels start before the draft's last ones end on another stream: overlap in time
        gpu_ts = graph_step(tr, "step[TARGET_VERIFY bs=1]", cpu_ts + 70, gpu_ts - 10, n, nccl,
                            gpu_windows=gpu_windows)
        cpu_ts += 140.0  # the CPU moves on long before the GPU has finished
    if not cpu:
        tr.events = [e for e in tr.events if e.get("cat") in ("kernel", "gpu_user_annotation")]
    return tr
