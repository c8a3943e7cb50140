"""Synthetic torch-profiler traces in the Chrome trace format Kineto exports, for CPU tests (the GPU is
simulated): `user_annotation` spans for SGLang's step[...] record_function ranges on the CPU thread,
`cuda_runtime` launches (cudaGraphLaunch for a replayed CUDA graph) sharing `args.correlation` with their
`kernel` events on the device, `gpu_user_annotation` windows on the device. Kernel names are the demangled
names of FlashInfer 0.6.12's trtllm_allreduce_fusion.cuh and NCCL 2.28.

`spec_trace` is an EAGLE-3 run with overlap scheduling: per round a draft step (with its own fused kernels)
and a target-verify step, the GPU running a round while the CPU is already in the next round's spans.

`rank_traces` is one trace per TP rank of the same verify steps, simulated with the meeting semantics of a
collective (no rank leaves an all-reduce before the last one has arrived), with chosen late starts and stalls per
rank and step, so a test knows the true step cost and every rank's wait."""

from __future__ import annotations

from dataclasses import dataclass, field

FI = "flashinfer::trtllm_allreduce_fusion::"
FUSED_ONESHOT = (f"void {FI}allreduce_fusion_kernel_oneshot_lamport<({FI}AllReduceFusionPattern)1, "
                 f"__nv_bfloat16, 2, false, true>({FI}AllReduceFusionParams<__nv_bfloat16>)")
FUSED_TWOSHOT = (f"void {FI}allreduce_fusion_kernel_twoshot_sync<({FI}AllReduceFusionPattern)1, __nv_bfloat16, "
                 f"2, false>({FI}AllReduceFusionParams<__nv_bfloat16>, std::array<int, 2ul>, std::array<int, 2ul>)")
NCCL_AR = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
NCCL_AG = "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
ADD_RMSNORM = "void flashinfer::norm::FusedAddRMSNormKernel<8u, __nv_bfloat16>(__nv_bfloat16*, ...)"
GEMM, ATTN, MOE = "nvjet_sm90_tst_64x8_64x16_2x1_v_bz_TNT", "_fwd_kernel", "fused_moe_kernel"
OTHER = ["void flashinfer::norm::RMSNormKernel<8u, __nv_bfloat16>(...)", "_fwd_kernel_stage1",
         "void flashinfer::trtllm_allreduce::lamport_initialize_kernel<half>(half*, unsigned long)",
         "void flashinfer::trtllm_allreduce::oneShotAllReduceKernel<__nv_bfloat16, 2>(...)"]
CPU, TID, DEV, STREAM = 4242, 4242, 0, 7


class Trace:
    def __init__(self, dev: int = DEV, cpu: int = CPU) -> None:
        self.dev, self.cpu = dev, cpu
        self.events: list[dict] = [{"ph": "M", "name": "process_name", "pid": cpu, "args": {"name": "python"}}]
        self.corr = 100

    def span(self, name: str, ts: float, dur: float, cat: str = "user_annotation", pid=None, tid=TID) -> None:
        pid = self.cpu if pid is None else pid
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur})

    def launch(self, name: str, ts: float) -> int:
        self.corr += 1
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": name, "pid": self.cpu, "tid": TID, "ts": ts,
                            "dur": 4.0, "args": {"correlation": self.corr, "cbid": 311}})
        return self.corr

    def kernel(self, name: str, ts: float, corr: int, dur: float = 3.0, stream: int = STREAM) -> None:
        self.events.append({"ph": "X", "cat": "kernel", "name": name, "pid": self.dev, "tid": stream, "ts": ts,
                            "dur": dur, "args": {"correlation": corr, "device": self.dev, "stream": stream}})

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
        tr.span(name, gpu_ts + w, t - gpu_ts - w, cat="gpu_user_annotation", pid=tr.dev, tid=STREAM + w)
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


@dataclass
class VerifyShape:
    """A DeepSeek-V3-like verify forward (us): embedding, its NCCL all-reduce; per layer attention, a boundary,
    MLP/MoE, a boundary; the LM head, the logits all-gather, the sampling tail. A boundary is the fused
    AR+residual+RMSNorm kernel (fusion on, all but the last) or NCCL's all-reduce + the add+RMSNorm kernel.
    Every kernel is followed by `gap` of launch latency on the device."""
    layers: int = 10
    fusion: bool = True
    embed: float = 10.0
    attn: float = 60.0
    mlp: float = 80.0
    head: float = 40.0
    tail: float = 20.0
    fused: float = 5.0  # the fused kernel, for the last rank to arrive
    nccl: float = 8.0
    add_rmsnorm: float = 3.0
    allgather: float = 9.0
    gap: float = 0.5

    def boundaries(self) -> int:
        return 2 * self.layers

    def fused_calls(self) -> int:
        return 2 * self.layers - 1 if self.fusion else 0

    def cost(self) -> float:
        """The step's GPU time when no rank waits for another (first kernel start to last kernel end)."""
        n_f = self.fused_calls()
        n_u = self.boundaries() - n_f
        kernels = 2 + self.layers * 2 + 1 + 1 + 1 + n_f + 2 * n_u  # embed, AR, attn+mlp per layer, head, AG, tail
        return (self.embed + self.nccl + self.layers * (self.attn + self.mlp) + self.head + self.allgather
                + self.tail + n_f * self.fused + n_u * (self.nccl + self.add_rmsnorm) + (kernels - 1) * self.gap)


@dataclass
class _Rank:
    tr: Trace
    t: float
    corr: int = 0
    slow: dict[int, float] = field(default_factory=dict)  # kernel index -> extra us on this rank


def rank_traces(shape: VerifyShape, steps: int, *, ranks: int = 2, late: dict[tuple[int, int], float] | None = None,
                stall: dict[tuple[int, int], float] | None = None, waits: str = "spin",
                period: float = 20_000.0) -> list[Trace]:
    """One trace per rank of `steps` verify steps replayed from a CUDA graph (a CPU span + cudaGraphLaunch,
    every kernel correlated with it). late[(step, rank)]: that rank starts the step so many us late;
    stall[(step, rank)]: its first MLP kernel takes so much longer. At a meeting kernel every rank waits for the
    last to arrive: waits="spin" the early rank's kernel starts at its arrival and lasts until the release,
    waits="idle" its device idles until the kernel can start (release - cost). Returns [rank 0, rank 1, ...]."""
    late, stall = late or {}, stall or {}
    trs = [Trace(dev=r, cpu=4242 + r) for r in range(ranks)]
    for i in range(steps):
        t0 = 1000.0 + i * period
        rs = []
        for r, tr in enumerate(trs):
            tr.span("step[TARGET_VERIFY bs=1]", t0 - 300, 250.0)
            rs.append(_Rank(tr, t0 + late.get((i, r), 0.0), tr.launch("cudaGraphLaunch", t0 - 200)))
            rs[-1].slow = {0: stall.get((i, r), 0.0)}
        starts = [x.t for x in rs]
        _verify_forward(shape, rs, waits)
        for x, t in zip(rs, starts, strict=True):  # the profiler's GPU window of the step on each device
            x.tr.span("step[TARGET_VERIFY bs=1]", t, x.t - shape.gap - t, cat="gpu_user_annotation", pid=x.tr.dev,
                      tid=STREAM)
    return trs


def _verify_forward(s: VerifyShape, rs: list[_Rank], waits: str) -> None:
    def compute(name: str, dur: float, mlp_index: int | None = None) -> None:
        for x in rs:
            d = dur + (x.slow.get(mlp_index, 0.0) if mlp_index is not None else 0.0)
            x.tr.kernel(name, x.t, x.corr, d)
            x.t += d + s.gap

    def meet(name: str, cost: float) -> None:
        release = max(x.t for x in rs) + cost
        for x in rs:
            start = x.t if waits == "spin" else release - cost
            x.tr.kernel(name, start, x.corr, release - start)
            x.t = release + s.gap

    compute("embedding", s.embed)
    meet(NCCL_AR, s.nccl)
    for layer in range(s.layers):
        for part, dur in ((ATTN, s.attn), (MOE, s.mlp)):
            compute(part, dur, 0 if (part == MOE and layer == 0) else None)
            last = layer == s.layers - 1 and part == MOE
            if s.fusion and not last:
                meet(FUSED_ONESHOT, s.fused)
            else:
                meet(NCCL_AR, s.nccl)
                compute(ADD_RMSNORM, s.add_rmsnorm)
    compute(GEMM, s.head)
    meet(NCCL_AG, s.allgather)
    compute("sampling_tail", s.tail)


def class_trace(steps: int, kernels: list[tuple[str, float]], *, name: str = "step[TARGET_VERIFY bs=1]",
                memcpy_us: float = 0.0) -> Trace:
    """`steps` forwards replayed from a CUDA graph, each running `kernels` ((name, duration us), in order) and,
    with memcpy_us, one device-to-device copy: a known GPU time per kernel and per step (trace.kernel_classes)."""
    tr = Trace()
    cpu_ts = gpu_ts = 1000.0
    for _ in range(steps):
        tr.span(name, cpu_ts, 60.0)
        corr = tr.launch("cudaGraphLaunch", cpu_ts + 40.0)
        t = max(gpu_ts, cpu_ts + 80)
        start = t
        for kname, dur in kernels:
            tr.kernel(kname, t, corr, dur=dur)
            t += dur + 1.0
        if memcpy_us:
            tr.events.append({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD (Device -> Device)",
                              "pid": tr.dev, "tid": STREAM, "ts": t, "dur": memcpy_us,
                              "args": {"correlation": corr, "device": tr.dev, "stream": STREAM}})
            t += memcpy_us + 1.0
        tr.span(name, start, t - start, cat="gpu_user_annotation", pid=tr.dev, tid=STREAM)
        gpu_ts = t
        cpu_ts = t + 10.0
    return tr
