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
