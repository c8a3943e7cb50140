"""Run a scenario on N CPU ranks with sglang's real distributed setup (gloo), for patches whose behaviour only
shows at TP > 1 (an all-reduce that is or is not performed). Used from inside probes:

    from support.tp import run_tp
    results = run_tp(2, "support.scenarios_fusion:rmsnorm_fallback", {"hidden": 64})

Each rank runs `fn(rank, world_size, **kwargs)` after sglang's init_distributed_environment +
initialize_model_parallel(tensor_model_parallel_size=N) (or, with sglang_init=False, a plain gloo
torch.distributed group); the list of per-rank return values (JSON-able) is
returned. A rank that raises makes run_tp raise with its traceback.
"""

from __future__ import annotations

import importlib
import os
import socket
import traceback

import torch.multiprocessing as mp


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world_size: int, port: int, target: str, kwargs: dict, queue, sglang_init: bool,
            done, linger: float) -> None:
    phase = "setup-error"  # until the scenario starts, a failure is the process group's, not the scenario's
    try:
        init = f"tcp://127.0.0.1:{port}"
        if sglang_init:
            from support.cpu_ops import register_custom_ops_for_cpu

            register_custom_ops_for_cpu()  # before sglang registers its custom ops (CUDA key only)
            from sglang.srt.distributed.parallel_state import (
                init_distributed_environment,
                initialize_model_parallel,
            )

            from support import sglang_compat

            published = sglang_compat.runtime_context()
            if published:  # sglang >= 0.5.23 builds the groups from the published parallel widths
                sglang_compat.publish_server_args(rank, tp_size=world_size, device="cpu")
            init_distributed_environment(world_size=world_size, rank=rank, local_rank=rank,
                                         distributed_init_method=init, backend="gloo")
            if published:
                initialize_model_parallel()
            else:
                initialize_model_parallel(tensor_model_parallel_size=world_size)
        else:
            import torch.distributed as dist

            dist.init_process_group("gloo", init_method=init, world_size=world_size, rank=rank)
        phase = "error"
        mod_name, fn_name = target.split(":")
        fn = getattr(importlib.import_module(mod_name), fn_name)
        queue.put((rank, "ok", fn(rank, world_size, **kwargs)))
    except BaseException:
        queue.put((rank, phase, traceback.format_exc()))
    # Stay until every rank has reported. A rank that returned first and exited closed its end of the gloo pairs
    # while a peer's last collective could still be sending to it: the peer then failed with "Connection closed by
    # peer" (the P4 scenarios' flake on a loaded 2-core machine). The parent sets `done` once it has every result
    # (or gives up); `linger` bounds the wait so that a parent gone away never leaves a rank behind.
    done.wait(linger)


# a rank that failed inside the scenario, but on the process group's transport (its peer went away while the
# machine was loaded): as much the rendezvous' fault as a setup failure
TRANSIENT = ("DistNetworkError", "Broken pipe", "Connection reset", "Connection closed by peer",
             "Address already in use")


class SetupError(RuntimeError):
    """The ranks could not form their process groups (init_process_group / new_group): the machine's fault
    (load, a port taken between probing and binding), never the scenario's."""


def run_tp(world_size: int, target: str, kwargs: dict | None = None, timeout: float = 180,
           sglang_init: bool = True, attempts: int = 3) -> list:
    """Retries (fresh port, fresh processes) when the process groups fail to form, whatever the message (gloo
    under load: `Broken pipe` in new_group), and when a rank's failure is a transport error of the group; a
    failure of the scenario itself is never retried."""
    for attempt in range(attempts):
        try:
            return _run_tp_once(world_size, target, kwargs, timeout, sglang_init)
        except SetupError:
            if attempt + 1 == attempts:
                raise
        except RuntimeError as e:
            if attempt + 1 == attempts or not any(t in str(e) for t in TRANSIENT):
                raise
    raise AssertionError("unreachable")


# How ranks start. "fork" (default): the caller imports what every rank imports (the CPU op registration,
# sglang's parallel_state, the scenario's module) once, then forks the ranks, which skip those imports (sglang's
# import is most of a scenario's cost on a 2-core CI machine). "spawn": fresh interpreters, as before.
START_ENV = "SGLB_TP_START"


def _preimport(target: str, sglang_init: bool) -> None:
    if sglang_init:
        from support.cpu_ops import register_custom_ops_for_cpu

        register_custom_ops_for_cpu()
        importlib.import_module("sglang.srt.distributed.parallel_state")
    importlib.import_module(target.split(":")[0])


def _run_tp_once(world_size: int, target: str, kwargs: dict | None, timeout: float, sglang_init: bool) -> list:
    start = os.environ.get(START_ENV, "fork")
    if start not in ("fork", "spawn"):
        raise ValueError(f"{START_ENV}={start!r}: expected fork or spawn")
    if start == "fork":
        _preimport(target, sglang_init)
    ctx = mp.get_context(start)
    queue = ctx.Queue()
    done = ctx.Event()
    port = _free_port()
    procs = [ctx.Process(target=_worker,
                         args=(r, world_size, port, target, kwargs or {}, queue, sglang_init, done, timeout))
             for r in range(world_size)]
    for p in procs:
        p.start()
    results: dict[int, object] = {}
    try:
        for _ in range(world_size):
            rank, status, value = queue.get(timeout=timeout)
            if status == "setup-error":
                raise SetupError(f"rank {rank} could not join the process groups:\n{value}")
            if status == "error":
                raise RuntimeError(f"rank {rank} failed:\n{value}")
            results[rank] = value
    finally:
        done.set()
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
    return [results[r] for r in range(world_size)]
