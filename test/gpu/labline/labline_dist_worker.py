"""One rank of the suite's standalone 2-GPU check (run by labline_ranks.run_ranks; not a test module).

1. symm_mem (P6): sglang's own distributed setup as a TP=2 server does it (ModelRunner.init_torch_distributed
   with --disable-custom-all-reduce --enable-torch-symm-mem: set_custom_all_reduce(False),
   set_torch_symm_mem_all_reduce(True), init_distributed_environment(nccl), initialize_model_parallel(2)).
   Records whether the TP group's TorchSymmMemCommunicator is enabled without multicast, which kernel
   kernel_for() names for 42 KB and 1 MiB, whether sglang's all-reduce dispatch sends bf16 tensors to it, and
   whether its result equals NCCL's (torch.distributed on the TP device group) bit for bit, at several sizes;
   plus what the torch_symm_mem logger said.
2. workspace (P5): FlashInfer's trtllm fusion workspace, created the way sglang 0.5.14 creates it
   (flashinfer.comm.create_allreduce_fusion_workspace, backend trtllm, the TP device group) for
   max_token_num 48 (P5's size for the lab flags: decode graphs up to bs 16 x 3 draft tokens) and 2048
   (upstream), hidden = the target's hidden size; device bytes from cudaMemGetInfo around each creation
   (symmetric memory is outside torch's allocator), after a warm-up workspace took the one-time costs.

Writes one JSON object to --result (written before any teardown, so a hang on exit loses nothing).
Refuses to run without the lab's no-multicast environment.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

SAFE = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
SYMM_LOGGER = "sglang.srt.distributed.device_communicators.torch_symm_mem"
# (rows, cols) bf16: 1 and 3 tokens x 7168 (decode / EAGLE-3 verify, 14 / 42 KB), 16 and 48 tokens, an odd
# shape, 1 MiB exactly, 256 tokens (3.5 MiB)
SIZES = [(1, 7168), (3, 7168), (16, 7168), (48, 7168), (5, 4096), (512, 1024), (256, 7168)]
WORKSPACE_TOKENS = [48, 2048]


class ListHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.records: list[dict] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append({"level": record.levelname, "message": record.getMessage()})


def write(path: str, obj: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, default=str)
    os.replace(tmp, path)


@dataclass
class Groups:
    """The TP group's pieces the phases use: sglang's (path "sglang"), or a plain process group with the
    communicator built directly when sglang's initialization failed (path "direct": no dispatch check)."""
    path: str
    comm: Any
    dispatch: Callable | None  # sglang's GroupCoordinator.all_reduce
    device_group: Any
    cpu_group: Any
    setup_error: str | None = None


def setup_sglang(a: argparse.Namespace) -> Groups:
    from sglang.srt.distributed import parallel_state as ps

    ps.set_custom_all_reduce(False)  # --disable-custom-all-reduce
    ps.set_torch_symm_mem_all_reduce(True)  # --enable-torch-symm-mem
    ps.init_distributed_environment(world_size=a.world, rank=a.rank, local_rank=a.rank, backend="nccl",
                                    distributed_init_method=f"tcp://127.0.0.1:{a.port}", timeout=120)
    ps.initialize_model_parallel(tensor_model_parallel_size=a.world)
    tp = ps.get_tp_group()
    return Groups("sglang", tp.torch_symm_mem_comm, tp.all_reduce, tp.device_group, tp.cpu_group)


def setup_direct(a: argparse.Namespace, error: str) -> Groups:
    import datetime

    import torch.distributed as dist
    from sglang.srt.distributed.device_communicators.torch_symm_mem import TorchSymmMemCommunicator

    if not dist.is_initialized():
        dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{a.port + 1}", world_size=a.world,
                                rank=a.rank, timeout=datetime.timedelta(seconds=120))
    cpu = dist.new_group(backend="gloo")
    comm = TorchSymmMemCommunicator(group=cpu, device=a.rank)
    return Groups("direct", comm, None, dist.group.WORLD, cpu, setup_error=error)


def phase_symm_mem(torch, g: Groups, rank: int) -> dict:
    import torch.distributed as dist

    comm = g.comm
    out: dict = {"communicator": comm is not None, "setup_path": g.path, "setup_error": g.setup_error}
    if comm is None:
        out["why"] = "TP group has no TorchSymmMemCommunicator (use_torch_symm_mem_all_reduce not honoured)"
        return out
    out.update(disabled=bool(comm.disabled), use_multimem=getattr(comm, "use_multimem", None),
               max_size=getattr(comm, "max_size", None), oneshot_max_size=getattr(comm, "oneshot_max_size", None),
               has_kernel_for=hasattr(comm, "kernel_for"))
    try:
        import torch.distributed._symmetric_memory as symm_mem

        out["symm_mem_backend"] = symm_mem.get_backend(torch.device("cuda")) if hasattr(
            symm_mem, "get_backend") else None
    except Exception as e:
        out["symm_mem_backend"] = f"{type(e).__name__}: {e}"
    if comm.disabled:
        out["why"] = "communicator disabled"
        return out
    if out["has_kernel_for"]:
        out["kernel_for"] = {"43008": comm.kernel_for(3 * 7168 * 2), "1048576": comm.kernel_for(1 << 20)}
    calls: list[int] = []
    real = comm.all_reduce

    def counting(inp, *, out=None):
        calls.append(inp.numel() * inp.element_size())
        return real(inp, out=out)

    comm.all_reduce = counting  # instance attribute: sglang's dispatch looks it up on the instance
    gen_device = torch.device("cuda", torch.cuda.current_device())
    rows = []
    for i, shape in enumerate(SIZES):
        gen = torch.Generator(device=gen_device).manual_seed(1000 * i + rank)
        x = (torch.randn(shape, generator=gen, device="cuda", dtype=torch.float32) * (1 + i)).to(torch.bfloat16)
        nbytes = x.numel() * x.element_size()
        before = len(calls)
        y_dispatch = g.dispatch(x.clone()) if g.dispatch else None
        dispatched = len(calls) > before if g.dispatch else None
        y_direct = real(x.clone())
        ref = x.clone()
        dist.all_reduce(ref, group=g.device_group)
        torch.cuda.synchronize()
        y = y_dispatch if y_dispatch is not None else y_direct
        row = {"shape": list(shape), "bytes": nbytes,
               "kernel": comm.kernel_for(nbytes) if out["has_kernel_for"] else None,
               "dispatched_to_symm_mem": dispatched,
               "equal_dispatch": None if y_dispatch is None else bool(torch.equal(y_dispatch, ref)),
               "equal_direct": y_direct is not None and bool(torch.equal(y_direct, ref)),
               "max_abs_diff": None if y is None else float((y.float() - ref.float()).abs().max().item()),
               "nonzero": bool(ref.abs().max().item() > 0)}
        rows.append(row)
    comm.all_reduce = real
    out["sizes"] = rows
    out["bit_identical"] = all(r["equal_direct"] and r["equal_dispatch"] is not False for r in rows)
    out["all_dispatched"] = all(r["dispatched_to_symm_mem"] is True for r in rows)
    return out


def phase_workspace(torch, g: Groups, rank: int, world: int, hidden: int) -> dict:
    import flashinfer.comm as fc
    import torch.distributed as dist

    out: dict = {"hidden": hidden, "backend": "trtllm", "measured_bytes": {}, "metadata": {},
                 "torch_allocated_delta": {}, "seconds": {}}

    def create(n: int):
        return fc.create_allreduce_fusion_workspace(backend="trtllm", world_size=world, rank=rank,
                                                    max_token_num=n, hidden_dim=hidden, dtype=torch.bfloat16,
                                                    group=g.device_group)

    keep = [create(8)]  # warm-up: module load, first symmetric allocation, torch's small-block pool
    torch.cuda.synchronize()
    for n in WORKSPACE_TOKENS:
        dist.barrier(group=g.cpu_group)
        torch.cuda.synchronize()
        free0, alloc0, t = torch.cuda.mem_get_info()[0], torch.cuda.memory_allocated(), time.monotonic()
        ws = create(n)
        torch.cuda.synchronize()
        dist.barrier(group=g.cpu_group)
        free1 = torch.cuda.mem_get_info()[0]
        keep.append(ws)  # alive until exit: no freed block can be reused by the next one
        out["measured_bytes"][str(n)] = free0 - free1
        out["torch_allocated_delta"][str(n)] = torch.cuda.memory_allocated() - alloc0
        out["seconds"][str(n)] = round(time.monotonic() - t, 3)
        meta = getattr(ws, "metadata", None) or {}
        out["metadata"][str(n)] = {k: meta.get(k) for k in ("max_token_num", "hidden_dim", "buffer_size",
                                                             "flag_size", "lamport_comm_size",
                                                             "lamport_buffer_size")}
        out["workspace_backend"] = getattr(ws, "backend", None)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--result", required=True)
    ap.add_argument("--hidden", type=int, required=True)
    a = ap.parse_args()
    res: dict = {"rank": a.rank, "ok": False, "env": {k: os.environ.get(k) for k in SAFE}, "phases": {}}
    wrong = {k: os.environ.get(k) for k, v in SAFE.items() if os.environ.get(k) != v}
    if wrong:
        res["error"] = f"refusing to run without the no-multicast environment: {wrong}"
        write(a.result, res)
        return 3
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"[rank{a.rank} %(asctime)s %(levelname)s %(name)s] %(message)s")
    handler = ListHandler()
    logging.getLogger(SYMM_LOGGER).addHandler(handler)
    logging.getLogger(SYMM_LOGGER).setLevel(logging.DEBUG)
    t0 = time.monotonic()
    # the TP group's shared-memory broadcaster feeds scheduler inputs; it has no part in all-reduce
    os.environ.setdefault("SGLANG_USE_MESSAGE_QUEUE_BROADCASTER", "false")
    try:
        import torch

        torch.cuda.set_device(a.rank)
        import sglang.srt.distributed.parallel_state  # noqa: F401

        res["import_s"] = round(time.monotonic() - t0, 1)
        res["capability"] = list(torch.cuda.get_device_capability())
    except Exception as e:
        res["error"] = f"setup: {type(e).__name__}: {e}"
        res["traceback"] = traceback.format_exc()[-3000:]
        write(a.result, res)
        return 1
    try:
        g = setup_sglang(a)
    except Exception as e:  # still check the kernels, through a plain process group; the tests will say so
        res["setup_error"] = f"sglang's distributed init: {type(e).__name__}: {e}"
        res["setup_traceback"] = traceback.format_exc()[-3000:]
        try:
            g = setup_direct(a, res["setup_error"])
        except Exception as e2:
            res["error"] = f"{res['setup_error']}; direct setup: {type(e2).__name__}: {e2}"
            res["traceback"] = traceback.format_exc()[-3000:]
            write(a.result, res)
            return 1
    res["init_s"] = round(time.monotonic() - t0, 1)
    for name, fn in (("symm_mem", lambda: phase_symm_mem(torch, g, a.rank)),
                     ("workspace", lambda: phase_workspace(torch, g, a.rank, a.world, a.hidden))):
        t = time.monotonic()
        try:
            res["phases"][name] = fn()
        except Exception as e:
            res["phases"][name] = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-3000:]}
        res["phases"][name]["seconds_total"] = round(time.monotonic() - t, 2)
        write(a.result, res)
    res["symm_mem_log"] = handler.records
    res["ok"] = all("error" not in p for p in res["phases"].values())
    res["wall_s"] = round(time.monotonic() - t0, 1)
    write(a.result, res)
    sys.stdout.flush()
    sys.stderr.flush()
    # skip NCCL / symmetric-memory teardown at exit (the result is written; run_ranks ends the session); a
    # non-zero code makes run_ranks stop waiting for a peer that may now block in a collective
    os._exit(0 if res["ok"] else 1)


if __name__ == "__main__":
    sys.exit(main())
