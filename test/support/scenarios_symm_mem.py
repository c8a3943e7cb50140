"""TP scenarios for sglang's torch symmetric-memory all-reduce communicator (P6), on CPU ranks.

Simulated: the GPU generation and count (support.cuda_sim), NVML's P2P atomics report, whether the symmetric
buffer got a multicast address, and the symm_mem kernels themselves (each computes the all-reduce over the gloo
group and records which kernel the communicator chose). What runs for real is sglang's
TorchSymmMemCommunicator: its capability/world-size tables, its multicast/atomics decision, the size-based
kernel choice and the staging into and out of the symmetric buffer.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
import torch.distributed as dist


class _FakeSymmMemOps:
    """Stands in for torch.ops.symm_mem: the same op names and argument order, computed with gloo."""

    def __init__(self):
        self.calls: list[str] = []

    def _reduce(self, t):
        dist.all_reduce(t)
        return t

    def one_shot_all_reduce_copy_out(self, symm_buffer, local_input, reduce_op, group_name, out):
        self.calls.append("one_shot_all_reduce_copy_out")
        symm_buffer.copy_(local_input)
        out.copy_(self._reduce(symm_buffer.clone()))
        return out

    def one_shot_all_reduce_out(self, symm_buffer, reduce_op, group_name, out):
        self.calls.append("one_shot_all_reduce_out")
        out.copy_(self._reduce(symm_buffer.clone()))
        return out

    def two_shot_all_reduce_(self, symm_buffer, reduce_op, group_name):
        self.calls.append("two_shot_all_reduce_")
        return self._reduce(symm_buffer)

    def multimem_all_reduce_(self, symm_buffer, reduce_op, group_name):
        self.calls.append("multimem_all_reduce_")
        return self._reduce(symm_buffer)


class _TorchWithSymmMemOps:
    """`torch` as seen by the communicator module, except torch.ops.symm_mem (the simulated kernels)."""

    def __init__(self, ops: _FakeSymmMemOps):
        self.ops = SimpleNamespace(symm_mem=ops)

    def __getattr__(self, name):
        return getattr(torch, name)


def communicator_cases(rank: int, world_size: int, cases: list[dict]) -> list[dict]:
    """Each case: {capability, multicast, p2p_atomics}; a fresh communicator per case."""
    return [communicator(rank, world_size, **c) for c in cases]


def communicator(rank: int, world_size: int, capability=(12, 0), multicast: bool = False,
                 p2p_atomics: bool = True, sizes=(43008, 1048576, 16777216)) -> dict:
    from support.cuda_sim import simulate_cuda

    simulate_cuda(capability=tuple(capability), device_count=world_size, p2p_atomics=p2p_atomics)
    from support import sglang_compat

    if sglang_compat.runtime_context():  # sglang >= 0.5.23 reads its configuration while constructing
        sglang_compat.publish_server_args(rank, tp_size=world_size, device="cpu")
    import torch.distributed._symmetric_memory as symm

    symm.empty = lambda n, device=None, dtype=None: torch.zeros(n, dtype=dtype)
    symm.rendezvous = lambda buf, group_name: SimpleNamespace(multicast_ptr=0xC0FFEE if multicast else 0)
    import importlib
    import sys

    # modules imported before the simulation began (sglang's own init) computed their CUDA facts on a CPU
    # machine at import: re-import them on the simulated one, as a GPU process would have imported them
    utils = "sglang.srt.distributed.device_communicators.custom_all_reduce_utils"
    if utils in sys.modules:
        importlib.reload(sys.modules[utils])
    import sglang.srt.distributed.device_communicators.torch_symm_mem as tsm

    tsm = importlib.reload(tsm)

    ops = _FakeSymmMemOps()
    tsm.torch = _TorchWithSymmMemOps(ops)  # the module reaches its kernels through torch.ops.symm_mem
    out: dict = {"constructed": False}
    try:
        comm = tsm.TorchSymmMemCommunicator(group=dist.group.WORLD, device=rank)
    except Exception as e:  # noqa: BLE001 - report what upstream raises
        out["error"] = f"{type(e).__name__}: {e}"
        return out
    out.update(constructed=True, disabled=comm.disabled, kernels={}, max_abs_err={})
    comm.device = torch.device("cpu")  # the simulated GPU's tensors live on the CPU here
    for nbytes in sizes:
        x = torch.full((nbytes // 2,), float(rank + 1), dtype=torch.bfloat16)
        if comm.disabled or not comm.should_torch_symm_mem_allreduce(x):
            out["kernels"][nbytes] = "nccl"
            continue
        before = len(ops.calls)
        y = comm.all_reduce(x.view(-1, 16))
        out["kernels"][nbytes] = ops.calls[before:]
        expected = sum(range(1, world_size + 1))
        out["max_abs_err"][nbytes] = float((y.float() - expected).abs().max())
    return out
