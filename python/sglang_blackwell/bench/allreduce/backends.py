"""One small class per all-reduce backend. Every one follows the same protocol, used by the worker:

    available(ctx) -> (ok, why)      cheap, local: is this backend offered by the installed stack / machine?
    setup(ctx)                       collective (every rank, same order): workspaces, buffers, JIT loads
    supports(tokens) -> why | None   a size this backend cannot run (None: it can)
    run(inp, residual, gamma)        one call, CUDA-graph capturable; returns (sum,) for op "ar",
                                     (norm_out, residual_out) for op "ar_rmsnorm"
    reference                        what the result is checked against: "nccl" or "fp32" (ar_correctness)

`inp` is written by the producer kernel before every call (it stands in for the GEMM that makes the partial
sums) and may be overwritten; `residual` may be updated in place (the harness resets it between runs).
Resources several backends share (the FlashInfer workspace, the symm-mem buffer, the norm) live once in
`ctx.shared`, created by whichever backend needs them first. Multicast is never touched unless
ctx.allow_multicast (symm_multimem is the only multicast backend).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from ...box.allreduce_catalog import CATALOG

Outputs = tuple[torch.Tensor, ...]


@dataclass
class RankContext:
    rank: int
    world_size: int
    device: torch.device
    group: dist.ProcessGroup  # NCCL, the TP group
    hidden: int
    dtype: torch.dtype
    tokens: list[int]
    fi_max_tokens: int
    eps: float = 1e-6
    allow_multicast: bool = False
    p2p_atomics: bool | None = None
    shared: dict[str, Any] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)  # decisions worth recording in the receipt

    @property
    def group_name(self) -> str:
        return self.group.group_name

    @property
    def max_tokens(self) -> int:
        return max(self.tokens)

    def empty(self, tokens: int | None = None) -> torch.Tensor:
        return torch.empty(tokens or self.max_tokens, self.hidden, dtype=self.dtype, device=self.device)


class Backend:
    name: str
    op: str
    resource: str | None = None  # key of the shared resource it needs (a failed one disables its users)

    def __init__(self, name: str) -> None:
        self.name, self.op = name, CATALOG[name].op

    @property
    def reference(self) -> str:
        return "nccl" if self.op == "ar" else "fp32"

    def available(self, ctx: RankContext) -> tuple[bool, str]:
        return True, ""

    def setup(self, ctx: RankContext) -> None:
        self.ctx = ctx

    def supports(self, tokens: int) -> str | None:
        return None

    def run(self, inp: torch.Tensor, residual: torch.Tensor, gamma: torch.Tensor) -> Outputs:
        raise NotImplementedError

    def close(self) -> None:
        pass


# ------------------------------------------------------------------------------------------- NCCL

class Nccl(Backend):
    def __init__(self) -> None:
        super().__init__("nccl")

    def run(self, inp, residual, gamma):
        dist.all_reduce(inp, group=self.ctx.group)
        return (inp,)


# --------------------------------------------------------------------------- residual add + RMSNorm

class AddRMSNorm:
    """In place: residual += x; x = RMSNorm(residual) * gamma. FlashInfer's fused kernel when it loads,
    else torch ops."""

    def __init__(self, ctx: RankContext) -> None:
        self.eps = ctx.eps
        self.impl = "torch"
        self.why = ""
        try:
            from flashinfer.norm import fused_add_rmsnorm

            x, r = ctx.empty(2).normal_(), ctx.empty(2).normal_()
            fused_add_rmsnorm(x, r, torch.ones(ctx.hidden, dtype=ctx.dtype, device=ctx.device), self.eps)
            torch.cuda.synchronize()
            self._fi, self.impl = fused_add_rmsnorm, "flashinfer.norm.fused_add_rmsnorm"
        except Exception as e:  # no flashinfer, or its norm module does not build here
            self.why = f"{type(e).__name__}: {e}"[:300]

    def __call__(self, x: torch.Tensor, residual: torch.Tensor, gamma: torch.Tensor) -> None:
        if self.impl != "torch":
            self._fi(x, residual, gamma, self.eps)
            return
        residual.add_(x)
        r = residual.float()
        x.copy_((r * torch.rsqrt(r.pow(2).mean(-1, keepdim=True) + self.eps) * gamma.float()).to(x.dtype))


def shared_norm(ctx: RankContext) -> AddRMSNorm:
    if "norm" not in ctx.shared:
        ctx.shared["norm"] = norm = AddRMSNorm(ctx)
        ctx.facts["norm_impl"] = norm.impl
        if norm.why:
            ctx.facts["norm_fallback_reason"] = norm.why
    return ctx.shared["norm"]


class WithNorm(Backend):
    """An all-reduce backend followed by the fused add+RMSNorm: the unfused path a runtime takes."""

    def __init__(self, inner: Backend) -> None:
        super().__init__(f"{inner.name}_norm")
        self.inner = inner
        self.resource = inner.resource

    def available(self, ctx):
        return self.inner.available(ctx)

    def setup(self, ctx):
        super().setup(ctx)
        self.inner.setup(ctx)
        self.norm = shared_norm(ctx)

    def supports(self, tokens):
        return self.inner.supports(tokens)

    def run(self, inp, residual, gamma):
        (s,) = self.inner.run(inp, residual, gamma)
        self.norm(s, residual, gamma)
        return (s, residual)

    def close(self):
        self.inner.close()


# ------------------------------------------------------------------------ FlashInfer trtllm fusion

class FlashInferTrtllm:
    """The trtllm all-reduce fusion workspace, created the way the installed sglang line does it.

    "unified" (flashinfer >= 0.6.10: create_allreduce_fusion_workspace takes `group`; the workspace is torch
    symmetric memory, as sglang 0.5.14 uses it) or "legacy" (flashinfer 0.6.4: cudaIpc buffers from
    trtllm_create_ipc_workspace_for_all_reduce_fusion, as sglang 0.5.9 uses it). backend="trtllm" always:
    never "auto"/"mnnvl", which may pick multicast.
    """

    def __init__(self, ctx: RankContext) -> None:
        import flashinfer.comm as comm

        self.comm, self.ctx = comm, ctx
        self.pattern = comm.AllReduceFusionPattern
        create = getattr(comm, "create_allreduce_fusion_workspace", None)
        if create is not None and "group" in inspect.signature(create).parameters:
            self.api = "unified"
            self.workspace = create(backend="trtllm", world_size=ctx.world_size, rank=ctx.rank,
                                    max_token_num=ctx.fi_max_tokens, hidden_dim=ctx.hidden, dtype=ctx.dtype,
                                    group=ctx.group)
            self.trigger_kw = ("trigger_completion_at_end" in
                               inspect.signature(comm.allreduce_fusion).parameters)
        else:
            self.api = "legacy"
            self.ipc, self.workspace = comm.trtllm_create_ipc_workspace_for_all_reduce_fusion(
                ctx.rank, ctx.world_size, ctx.fi_max_tokens, ctx.hidden, group=ctx.group,
                use_fp32_lamport=False)
        torch.cuda.synchronize()
        dist.barrier(group=ctx.group)

    def call(self, inp: torch.Tensor, *, oneshot: bool, fused: bool, out: torch.Tensor | None = None,
             residual: torch.Tensor | None = None, residual_out: torch.Tensor | None = None,
             norm_out: torch.Tensor | None = None, gamma: torch.Tensor | None = None) -> None:
        # Same settings as sglang's flashinfer_allreduce_residual_rmsnorm: PDL on, completion not forced
        # at the end, bf16 accumulation.
        pattern = self.pattern.kARResidualRMSNorm if fused else self.pattern.kAllReduce
        if self.api == "unified":
            kw: dict[str, Any] = dict(
                input=inp, workspace=self.workspace, pattern=pattern, launch_with_pdl=True, output=out,
                residual_out=residual_out, norm_out=norm_out, residual_in=residual, rms_gamma=gamma,
                rms_eps=self.ctx.eps, use_oneshot=oneshot, fp32_acc=False)
            if self.trigger_kw:
                kw["trigger_completion_at_end"] = False
            self.comm.allreduce_fusion(**kw)
            return
        self.comm.trtllm_allreduce_fusion(
            allreduce_in=inp, world_size=self.ctx.world_size, world_rank=self.ctx.rank,
            token_num=inp.shape[0], hidden_dim=self.ctx.hidden, workspace_ptrs=self.workspace,
            launch_with_pdl=True, use_oneshot=oneshot, trigger_completion_at_end=False, fp32_acc=False,
            pattern_code=pattern, allreduce_out=out, residual_in=residual, residual_out=residual_out,
            norm_out=norm_out, quant_out=None, scale_out=None, rms_gamma=gamma, rms_eps=self.ctx.eps,
            scale_factor=None, layout_code=None)

    def close(self) -> None:
        if self.api == "unified":
            self.workspace.destroy()
        else:
            self.comm.trtllm_destroy_ipc_workspace_for_all_reduce_fusion(self.ipc, group=self.ctx.group)


def _flashinfer_comm_available() -> tuple[bool, str]:
    try:
        import flashinfer.comm as comm
    except Exception as e:
        return False, f"flashinfer.comm does not import: {type(e).__name__}: {e}"[:300]
    if not hasattr(comm, "trtllm_allreduce_fusion"):
        return False, "flashinfer.comm has no trtllm_allreduce_fusion"
    return True, ""


class FlashInferFusion(Backend):
    resource = "fi_trtllm"

    def __init__(self, name: str, *, fused: bool, oneshot: bool) -> None:
        super().__init__(name)
        self.fused, self.oneshot = fused, oneshot

    def available(self, ctx):
        return _flashinfer_comm_available()

    def setup(self, ctx):
        super().setup(ctx)
        if "fi_trtllm" not in ctx.shared:
            ctx.shared["fi_trtllm"] = fi = FlashInferTrtllm(ctx)
            ctx.facts["flashinfer_api"] = fi.api
            ctx.facts["flashinfer_max_token_num"] = ctx.fi_max_tokens
        self.fi = ctx.shared["fi_trtllm"]
        self.out, self.out2 = ctx.empty(), ctx.empty()

    def supports(self, tokens):
        if tokens > self.ctx.fi_max_tokens:
            return f"T > workspace max_token_num {self.ctx.fi_max_tokens}"
        if not self.oneshot and tokens <= self.ctx.world_size:
            return "two-shot needs token_num > world_size"
        return None

    def run(self, inp, residual, gamma):
        t = inp.shape[0]
        if self.fused:
            norm_out, res_out = self.out[:t], self.out2[:t]
            self.fi.call(inp, oneshot=self.oneshot, fused=True, residual=residual, residual_out=res_out,
                         norm_out=norm_out, gamma=gamma)
            return (norm_out, res_out)
        out = self.out[:t]
        self.fi.call(inp, oneshot=self.oneshot, fused=False, out=out)
        return (out,)


# ------------------------------------------------------------------------------- torch symm-mem

class SymmBuffer:
    """One symmetric buffer (max tokens x hidden) shared by the symm-mem backends."""

    def __init__(self, ctx: RankContext) -> None:
        import torch.distributed._symmetric_memory as symm_mem

        enable = getattr(symm_mem, "enable_symm_mem_for_group", None)
        if enable is not None and tuple(int(x) for x in torch.__version__.split(".")[:2]) < (2, 11):
            enable(ctx.group_name)
        self.buf = symm_mem.empty(ctx.max_tokens * ctx.hidden, dtype=ctx.dtype, device=ctx.device)
        self.handle = symm_mem.rendezvous(self.buf, ctx.group_name)
        self.multicast_ptr = int(getattr(self.handle, "multicast_ptr", 0) or 0)
        ctx.facts["symm_mem_multicast_ptr_nonzero"] = self.multicast_ptr != 0
        torch.cuda.synchronize()

    def view(self, tokens: int, hidden: int) -> torch.Tensor:
        return self.buf[: tokens * hidden].view(tokens, hidden)


def _symm_ops_missing(*names: str) -> list[str]:
    ops = getattr(torch.ops, "symm_mem", None)
    return [n for n in names if ops is None or not hasattr(ops, n)]


class SymmMem(Backend):
    """torch symmetric memory without multicast. Its barriers do system-scope atomics on the peers' signal
    pads, so it is offered only when every peer pair has native P2P atomics (ctx.p2p_atomics)."""

    ops: tuple[str, ...] = ()
    resource = "symm"

    def available(self, ctx):
        if ctx.p2p_atomics is not True:
            why = "unknown (no CUDA runtime probe)" if ctx.p2p_atomics is None else "absent on some peer pair"
            return False, f"native P2P atomics {why}: symm-mem barriers could hang or race"
        missing = _symm_ops_missing(*self.ops)
        return (False, f"torch.ops.symm_mem lacks {missing}") if missing else (True, "")

    def setup(self, ctx):
        super().setup(ctx)
        if "symm" not in ctx.shared:
            ctx.shared["symm"] = SymmBuffer(ctx)
        self.symm = ctx.shared["symm"]
        self.out = ctx.empty()


class SymmOneShot(SymmMem):
    ops = ("one_shot_all_reduce",)

    def __init__(self) -> None:
        super().__init__("symm_oneshot")

    def setup(self, ctx):
        super().setup(ctx)
        self.copy_out = not _symm_ops_missing("one_shot_all_reduce_copy_out")
        ctx.facts["symm_oneshot_op"] = "one_shot_all_reduce_copy_out" if self.copy_out else \
            "copy-in + one_shot_all_reduce"

    def run(self, inp, residual, gamma):
        t, h = inp.shape
        buf = self.symm.view(t, h)
        if self.copy_out:
            out = self.out[:t]
            torch.ops.symm_mem.one_shot_all_reduce_copy_out(buf, inp, "sum", self.ctx.group_name, out)
            return (out,)
        buf.copy_(inp)
        return (torch.ops.symm_mem.one_shot_all_reduce(buf, "sum", self.ctx.group_name),)


class SymmTwoShot(SymmMem):
    """sglang's TorchSymmMemCommunicator pattern: copy in, two_shot_all_reduce_ in place, copy out."""

    ops = ("two_shot_all_reduce_",)

    def __init__(self) -> None:
        super().__init__("symm_twoshot")

    def run(self, inp, residual, gamma):
        t, h = inp.shape
        buf, out = self.symm.view(t, h), self.out[:t]
        buf.copy_(inp)
        torch.ops.symm_mem.two_shot_all_reduce_(buf, "sum", self.ctx.group_name)
        out.copy_(buf)
        return (out,)


class SymmMultimem(SymmMem):
    """NVLink multicast (multimem.ld_reduce): only with --allow-multicast, only if rendezvous gave a
    multicast address."""

    ops = ("multimem_all_reduce_",)

    def __init__(self) -> None:
        super().__init__("symm_multimem")

    def available(self, ctx):
        if not ctx.allow_multicast:
            return False, "multicast paths run only with --allow-multicast"
        return super().available(ctx)

    def setup(self, ctx):
        super().setup(ctx)
        if not self.symm.multicast_ptr:
            raise RuntimeError("symm-mem rendezvous gave no multicast address (multicast off or unsupported)")

    def run(self, inp, residual, gamma):
        t, h = inp.shape
        buf, out = self.symm.view(t, h), self.out[:t]
        buf.copy_(inp)
        torch.ops.symm_mem.multimem_all_reduce_(buf, "sum", self.ctx.group_name)
        out.copy_(buf)
        return (out,)


# ------------------------------------------------------------------------- FlashInfer PCIe-IPC

class PcieIpcWorkspace:
    """One flashinfer.comm.PcieIpcAllReduceWorkspace (max tokens x hidden), shared by fi_pcie_ipc and
    fi_pcie_ipc_norm; launch configs resolved up front (resolution is collective: never inside graph capture)."""

    def __init__(self, ctx: RankContext) -> None:
        import flashinfer.comm as comm

        self.ws = comm.PcieIpcAllReduceWorkspace(group=ctx.group, max_numel=ctx.max_tokens * ctx.hidden,
                                                 dtype=ctx.dtype)
        configs = self.ws.prepare([(t, ctx.hidden) for t in ctx.tokens], dtype=ctx.dtype)
        self.unsupported = {t for (t, _), c in configs.items() if c is None}
        ctx.facts["pcie_ipc_profile"] = getattr(self.ws, "profile", None)

    def close(self) -> None:
        self.ws.destroy()


class FlashInferPcieIpc(Backend):
    """flashinfer.comm.PcieIpcAllReduceWorkspace (flashinfer >= 0.7.0): CUDA-IPC slabs, staged pushes, no
    remote atomics; what sglang 0.5.23 runs with SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1."""

    resource = "fi_pcie_ipc"

    def __init__(self) -> None:
        super().__init__("fi_pcie_ipc")

    def available(self, ctx):
        try:
            import flashinfer.comm as comm
        except Exception as e:
            return False, f"flashinfer.comm does not import: {type(e).__name__}"
        if not hasattr(comm, "PcieIpcAllReduceWorkspace"):
            return False, "installed flashinfer has no PCIe-IPC all-reduce (needs flashinfer >= 0.7.0)"
        if ctx.world_size not in (2, 4, 8):
            return False, f"PCIe-IPC all-reduce runs at world size 2, 4 or 8 (not {ctx.world_size})"
        return True, ""

    def setup(self, ctx):
        super().setup(ctx)
        if "fi_pcie_ipc" not in ctx.shared:
            ctx.shared["fi_pcie_ipc"] = PcieIpcWorkspace(ctx)
        self.shared = ctx.shared["fi_pcie_ipc"]
        self.out = ctx.empty()

    def supports(self, tokens):
        return "shape not supported by the PCIe-IPC kernels" if tokens in self.shared.unsupported else None

    def run(self, inp, residual, gamma):
        out = self.out[: inp.shape[0]]
        self.shared.ws.all_reduce(inp, out=out)
        return (out,)


def close_shared(ctx: RankContext) -> None:
    """Release what backends share (collective where the resource's teardown is)."""
    for key in ("fi_trtllm", "fi_pcie_ipc"):
        res = ctx.shared.pop(key, None)
        if res is not None:
            res.close()


REGISTRY: dict[str, Callable[[], Backend]] = {
    "nccl": Nccl,
    "fi_ar_oneshot": lambda: FlashInferFusion("fi_ar_oneshot", fused=False, oneshot=True),
    "fi_ar_twoshot": lambda: FlashInferFusion("fi_ar_twoshot", fused=False, oneshot=False),
    "symm_oneshot": SymmOneShot,
    "symm_twoshot": SymmTwoShot,
    "fi_pcie_ipc": FlashInferPcieIpc,
    "symm_multimem": SymmMultimem,
    "nccl_norm": lambda: WithNorm(Nccl()),
    "symm_oneshot_norm": lambda: WithNorm(SymmOneShot()),
    "symm_twoshot_norm": lambda: WithNorm(SymmTwoShot()),
    "fi_pcie_ipc_norm": lambda: WithNorm(FlashInferPcieIpc()),
    "fi_fused_oneshot": lambda: FlashInferFusion("fi_fused_oneshot", fused=True, oneshot=True),
    "fi_fused_twoshot": lambda: FlashInferFusion("fi_fused_twoshot", fused=True, oneshot=False),
}


def make(names: list[str]) -> list[Backend]:
    """Backends in catalog order (every rank must set them up in the same order)."""
    return [REGISTRY[n]() for n in CATALOG if n in names]
