"""What the all-reduce bench records about its TP group: GPU name, capability, link kind, P2P access and native
P2P atomics between the group's GPUs. The facts come from box/topology.py's `detect()` (NVML for GPUs and links,
the CUDA driver for P2P access and atomics, matched by PCI bus id), narrowed to the group as its ranks number the
GPUs (`Topology.cuda_group`). Native P2P atomics are what torch symm-mem's barriers need without multicast.

Runs in rank 0 (CUDA initialized). A probe that fails answers None (unknown), never raises: symm-mem is then
not offered. Nothing here touches multicast. The facts go into the receipt's `meta.topology` as a flat dict
(`group_facts`), the shape `bench allreduce --from-receipt` and the dispatch table read back.
"""

from __future__ import annotations

from typing import Any

from ...box.topology import Topology, detect


def group_facts(group: Topology, devices: list[int], visible: int, source: dict[str, str]) -> dict[str, Any]:
    """The receipt's flat view of a TP group's topology (devices = CUDA ordinals, group in their order)."""
    pairs: dict[str, dict[str, Any]] = {}
    for lk in group.links:
        for a, b in ((lk.a, lk.b), (lk.b, lk.a)):
            pairs[f"{devices[a]}->{devices[b]}"] = {"access": lk.p2p, "native_atomics": lk.native_atomics}
    g = group.gpus[0]
    return {"gpu_name": g.name, "capability": g.capability, "gpu_count": visible, "devices": list(devices),
            "link": group.link_kind, "p2p_access": group.all_p2p, "p2p_atomics": group.all_native_atomics,
            "source": source, "pairs": dict(sorted(pairs.items()))}


def fallback(devices: list[int], error: str) -> dict[str, Any]:
    """What torch alone says, when the topology of the group is not known: link and atomics unknown."""
    import torch

    props = torch.cuda.get_device_properties(devices[0])
    return {"gpu_name": props.name, "capability": f"{props.major}.{props.minor}",
            "gpu_count": torch.cuda.device_count(), "devices": list(devices), "link": "unknown",
            "p2p_access": None, "p2p_atomics": None, "source": {"error": error}, "pairs": {}}


def detect_group(devices: list[int]) -> dict[str, Any]:
    """The TP group's facts (devices: CUDA ordinals in this process)."""
    import torch

    full = detect()
    group = full.cuda_group(devices)
    if group is None:
        why = "; ".join(full.notes) or f"GPUs {devices} not matched to the CUDA driver's devices"
        return fallback(devices, f"box topology: {why}")
    p2p = ("cuDeviceGetP2PAttribute (CUDA driver)" if all(lk.cuda_native_atomics is not None for lk in group.links)
           else "nvml P2P status")
    return group_facts(group, devices, torch.cuda.device_count(),
                       {"p2p": p2p, "link": f"sglang_blackwell.box.topology.detect() ({full.source})"})
