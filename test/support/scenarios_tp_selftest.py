"""Scenarios for test_tp_support.py: the smallest things two gloo ranks can do."""

from __future__ import annotations


def world(rank: int, world_size: int) -> list[int]:
    import torch
    import torch.distributed as dist

    t = torch.ones(1)
    dist.all_reduce(t)
    return [rank, int(t.item())]


def refuse(rank: int, world_size: int) -> None:
    raise AssertionError("scenario says no")


def peer_alive_after_return(rank: int, world_size: int, wait_s: float) -> dict:
    """Rank 0 returns at once; rank 1 waits, then looks whether rank 0's process is still running (not exited, not
    a zombie): a rank must stay until every rank has reported, or a peer's last collective can still be sending to
    a closed socket."""
    import os
    import time

    import torch.distributed as dist

    pids: list = [None] * world_size
    dist.all_gather_object(pids, os.getpid())
    if rank == 0:
        return {"rank": 0}
    time.sleep(wait_s)
    try:
        with open(f"/proc/{pids[0]}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        state = "gone"
    return {"rank": rank, "rank0_state": state}
