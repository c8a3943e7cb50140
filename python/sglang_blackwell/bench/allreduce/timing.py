"""In-graph per-call latency, the way a decode/verify forward runs collectives.

One CUDA graph holds `calls` steps; every step is the producer kernel (a copy writing the all-reduce input:
it stands in for the GEMM that makes the partial sums) followed by the collective. Back-to-back NCCL calls
in one graph, without a kernel between them, are misleadingly slow (research/lab-allreduce, caveat 1).
Before every timed replay the ranks meet (a tiny NCCL all-reduce), then each GPU spins ~100 us so that both
hosts have launched the replay before either GPU starts it. Per call = event time of one replay / calls.
Per rank: median over `reps` timed replays after `warmup` untimed ones; reported: the slowest rank's median.
The producer alone is timed the same way; net = gross - producer.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class TimingPlan:
    calls: int = 50
    reps: int = 25
    warmup: int = 3
    spin_cycles: int = 200_000  # ~100 us at 2 GHz


class Aligner:
    """Start every rank's timed region together: NCCL handshake, then a GPU spin covering host skew."""

    def __init__(self, group: dist.ProcessGroup, device: torch.device, spin_cycles: int) -> None:
        self.group, self.spin = group, spin_cycles
        self.token = torch.zeros(1, device=device)

    def __call__(self) -> None:
        dist.all_reduce(self.token, group=self.group)
        torch.cuda._sleep(self.spin)


def capture(step: Callable[[], object], calls: int) -> torch.cuda.CUDAGraph:
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            step()
    torch.cuda.synchronize()
    return g


def time_graph(graph: torch.cuda.CUDAGraph, *, reset: Callable[[], None], align: Callable[[], None],
               plan: TimingPlan) -> list[float]:
    """Per-call microseconds of each timed replay on this rank."""
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    for i in range(plan.warmup + plan.reps):
        reset()
        torch.cuda.synchronize()
        align()
        start.record()
        graph.replay()
        stop.record()
        stop.synchronize()
        if i >= plan.warmup:
            samples.append(start.elapsed_time(stop) * 1e3 / plan.calls)
    return samples


def rank_summary(samples: list[float]) -> dict[str, float]:
    return {"median": statistics.median(samples), "min": min(samples), "max": max(samples)}


def slowest_rank(per_rank: list[dict[str, float]]) -> dict[str, object]:
    """Combine ranks: the slowest rank's median is the latency (a collective finishes with its last rank)."""
    meds = [r["median"] for r in per_rank]
    return {"us": max(meds), "per_rank": [round(m, 3) for m in meds],
            "min": min(r["min"] for r in per_rank), "max": max(r["max"] for r in per_rank)}
