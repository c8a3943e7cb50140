"""A doctor item: the Check record (stable id, title, status, detail, fix, data), the items' ids and titles in
report order, and the Context every item reads (the topology, the installed stack, the options)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .topology import Topology

STATUSES = ("ok", "info", "warn", "fail", "n/a")
TITLES = {
    "gpus": "GPUs and capability",
    "driver": "NVIDIA driver",
    "torch": "torch build and arch list",
    "nccl_version": "NCCL version",
    "fork_builds": "this fork's sglang/flashinfer builds",
    "flashinfer_trtllm_comm": "flashinfer trtllm_comm JIT (fused all-reduce) accepts this capability",
    "kernel_sass": "SGLang kernel wheel has SASS for this GPU",
    "p2p": "P2P access and native atomics per GPU pair",
    "multicast": "multicast (NVLS, symm-mem multimem)",
    "links": "link topology",
    "iommu": "IOMMU (platform hazard for PCIe P2P)",
    "acs": "ACS on the PCIe bridges above the GPUs (platform hazard for PCIe P2P)",
    "nccl_env": "NCCL environment in effect, and the managed block",
    "pcie_ipc": "FlashInfer PCIe-IPC all-reduce (opt-in: sglang >= 0.5.23, flashinfer >= 0.7.0)",
    "allreduce_paths": "all-reduce path per message size (patched SGLang, no server flags)",
    "spec_verify": "EAGLE-3 target-verify attention at long context (P8) and the first-use warm-up (P9)",
}
CHECK_IDS = tuple(TITLES)
CHECK_KEYS = ("id", "title", "status", "detail", "fix", "data")
TARGET_CAPABILITY = "12.0"  # what this fork is for: reported where the box has no GPU
INSTALL = "sglang-blackwell install"


@dataclass
class Check:
    id: str
    title: str
    status: str
    detail: str
    fix: str | None = None
    data: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"check {self.id}: status {self.status!r} not in {STATUSES}")


def item(id: str, status: str, detail: str, fix: str | None = None, data: dict | None = None) -> Check:
    return Check(id, TITLES[id], status, detail, fix, data or {})


@dataclass
class Context:
    topo: Topology
    torch: dict[str, Any]
    sglang: dict[str, Any] | None
    flashinfer: dict[str, Any] | None
    python: str | None
    tp: int | None
    progress: Callable[[str], None] | None = None
    trtllm: dict[str, Any] = field(default_factory=dict)  # capability -> trtllm_comm_probe result

    @property
    def no_gpu(self) -> bool:
        return self.topo.gpu_count == 0

    def say(self, msg: str) -> None:
        if self.progress:
            self.progress(msg)
