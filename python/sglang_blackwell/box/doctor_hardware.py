"""doctor's items about the box and its links: gpus, driver, p2p, multicast, links, iommu, acs. Each reads the
topology (and, for iommu / acs, the host's platform hazards); the GPU-only ones are `n/a` without a GPU."""

from __future__ import annotations

import re
import sys

from . import gpu_presence
from .doctor_check import Check, Context, item
from .hazards import acs_facts, iommu_facts, translated_gpus
from .topology import KIND_MEANING


def check_gpus(c: Context) -> Check:
    t = c.topo
    if c.no_gpu:
        return check_no_gpu(c)
    archs = sorted({g.arch for g in t.gpus})
    detail = f"{t.summary()}; arch {', '.join(archs)}"
    if not any(g.major == 12 for g in t.gpus):
        detail += f" (this fork targets 12.x; {'/'.join(t.capabilities())} takes the upstream paths)"
    return item("gpus", "ok", detail, data=dict(t.machine(), archs=archs, simulated=t.is_simulated))


def check_no_gpu(c: Context) -> Check:
    """NVML (the topology) found no GPU: say what else was asked and what it said, and blame nvidia-ml-py or
    NVML's library only when something else does see a GPU."""
    t = c.topo
    s = gpu_presence.sightings(c.torch)
    said = "; ".join(gpu_presence.describe(s))
    nvml = "; ".join(n.removeprefix("NVML ") for n in t.notes) or "found none"
    data = dict(t.machine(), sightings=s)
    seen = gpu_presence.gpus_seen(s)
    if seen and not s["nvml_module"]:
        return item("gpus", "fail", f"{said}; but nvidia-ml-py is not installed, and doctor reads the GPUs "
                                    "through NVML: the GPU items are n/a",
                    f"pip install nvidia-ml-py into this environment ({sys.executable}), or "
                    "pip install 'sglang-blackwell[gpu]'", data)
    if seen:
        return item("gpus", "fail", f"{said}; but NVML finds none ({nvml}): the GPU items are n/a",
                    "make the driver's NVML library (libnvidia-ml.so.1) loadable here: in a container, start it "
                    "with the GPUs (--gpus all, the NVIDIA container toolkit)", data)
    if t.is_simulated:
        said += f"; the simulated topology {t.source} has no GPU"
    else:  # NVML's own word only where it was asked: nvidia-ml-py matters only on a GPU box
        said += f"; NVML: {nvml}" if s["nvml_module"] else "; NVML: not asked (nvidia-ml-py not installed)"
    return item("gpus", "fail", f"no NVIDIA GPU: {said}: the GPU items are n/a",
                "run it on the GPU box (this fork serves on NVIDIA GPUs, built for Blackwell SM12x), with the NVIDIA "
                "driver loaded: `nvidia-smi` must list the GPUs", data)


def _vt(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v)[:2])


def check_driver(c: Context) -> Check:
    t = c.topo
    if c.no_gpu:
        return item("driver", "n/a", "no GPU")
    data = {"driver": t.driver, "cuda_driver": t.cuda_driver}
    detail = f"driver {t.driver}, supports CUDA up to {t.cuda_driver or 'unknown'}"
    built = c.torch.get("cuda")
    if built and t.cuda_driver and _vt(built) > _vt(t.cuda_driver):
        return item("driver", "fail", f"{detail}; torch is built for CUDA {built}",
                    f"install an NVIDIA driver that supports CUDA {built} (CUDA 13.0 needs 580 or newer), "
                    f"or a torch built for CUDA <= {t.cuda_driver}", data)
    return item("driver", "ok", detail, data=data)


def _pairs(names: list[str], total: int) -> str:
    return f"all {total} pairs" if len(names) == total > 2 else ", ".join(names)


def check_p2p(c: Context) -> Check:
    t = c.topo
    if t.gpu_count < 2:
        return item("p2p", "n/a", "no GPU" if c.no_gpu else "one GPU: no pairs")
    rows = [{"pair": [lk.a, lk.b], "kind": lk.kind, "p2p": lk.p2p, "native_atomics": lk.native_atomics,
             "nvml": {"read": lk.p2p_read, "write": lk.p2p_write, "atomics": lk.p2p_atomics},
             "cuda": {"access": lk.cuda_p2p_access, "native_atomics": lk.cuda_native_atomics}}
            for lk in t.links]
    no_p2p = [f"{lk.a}-{lk.b}" for lk in t.links if lk.p2p is False]
    unknown = [f"{lk.a}-{lk.b}" for lk in t.links if lk.p2p is None]
    no_atomics = [f"{lk.a}-{lk.b}" for lk in t.links if lk.native_atomics is False]
    n = len(t.links)
    p2p = (f"missing for {_pairs(no_p2p, n)}" if no_p2p else f"unknown for {_pairs(unknown, n)}" if unknown
           else "all pairs")
    atomics = (f"none on {_pairs(no_atomics, n)}" if no_atomics else "all pairs" if t.all_native_atomics
               else "unknown")
    detail = f"P2P: {p2p}; native atomics: {atomics}"
    if no_atomics:
        detail += " (torch symm-mem barriers need them: that path stays off here; NCCL and PCIe-IPC do not)"
    if no_p2p:
        return item("p2p", "warn", detail,
                    "without P2P, NCCL stages through host memory and custom/IPC all-reduce stay off: check "
                    "the iommu and acs items; GeForce cards need a driver that exposes P2P", {"pairs": rows})
    return item("p2p", "info" if unknown else "ok", detail, data={"pairs": rows})


def check_multicast(c: Context) -> Check:
    if c.no_gpu:
        return item("multicast", "n/a", "no GPU")
    m = c.topo.multicast
    word = {True: "supported on every GPU", False: "not supported",
            None: "unknown (CUDA driver not queried)"}[m]
    extra = "; sglang's multimem / NVLS paths stay off" if m is False else ""
    return item("multicast", "info", f"CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED: {word}{extra}",
                data={"per_gpu": {g.index: g.multicast for g in c.topo.gpus}, "all": m})


def check_links(c: Context) -> Check:
    t = c.topo
    if c.no_gpu:
        return item("links", "n/a", "no GPU")
    numa = {g.index: g.numa_node for g in t.gpus}
    pcie = {g.index: {"gen": g.pcie_gen, "width": g.pcie_width, "max_gen": g.pcie_max_gen,
                      "max_width": g.pcie_max_width} for g in t.gpus}
    kinds = ", ".join(f"{k} x{n} ({KIND_MEANING['NV' if k.startswith('NV') else k]})"
                      for k, n in t.link_counts().items()) or "one GPU"
    nodes = sorted({n for n in numa.values() if n is not None}) or "unknown"
    detail = f"{kinds}; NUMA nodes {nodes}"
    data = {"matrix": t.matrix(), "counts": t.link_counts(), "numa": numa, "pcie": pcie}
    narrow = [f"GPU{g.index} x{g.pcie_width} of x{g.pcie_max_width}" for g in t.gpus
              if g.pcie_width and g.pcie_max_width and g.pcie_width < g.pcie_max_width]
    if narrow:
        return item("links", "warn", f"{detail}; PCIe link narrower than the slot: {', '.join(narrow)}",
                    "reseat the card, check the riser and the BIOS PCIe bifurcation settings", data)
    return item("links", "ok", detail, data=data)


def check_iommu(c: Context) -> Check:
    if c.no_gpu:
        return item("iommu", "n/a", "no GPU")
    if c.topo.is_simulated:
        return item("iommu", "n/a", f"simulated topology ({c.topo.source}): this host's IOMMU says nothing "
                                    "about it")
    f = iommu_facts(c.topo)
    translated = translated_gpus(f)
    domains = ", ".join(f"{b}={t}" for b, t in f["gpu_domain_types"].items())
    detail = (f"IOMMU {'enabled (' + ', '.join(f['units']) + ')' if f['units'] else 'not active'}; kernel "
              f"cmdline: {' '.join(f['cmdline']) or '(no iommu options)'}; GPU DMA domains: {domains}; "
              f"nvidia_uvm uvm_disable_hmm={f['uvm_disable_hmm'] or 'n/a'}")
    if translated and c.topo.pcie_only:
        return item("iommu", "warn", f"{detail}; {len(translated)} GPU(s) behind a translating IOMMU: PCIe "
                                     "P2P can hang or slow down",
                    "boot with iommu=pt (Intel: intel_iommu=on iommu=pt; AMD: amd_iommu=on iommu=pt) or turn "
                    "the IOMMU off in the BIOS; if P2P still hangs, try nvidia_uvm uvm_disable_hmm=1", f)
    return item("iommu", "info" if translated else "ok", detail, data=f)


def check_acs(c: Context) -> Check:
    if c.no_gpu:
        return item("acs", "n/a", "no GPU")
    if c.topo.is_simulated:
        return item("acs", "n/a", f"simulated topology ({c.topo.source}): no PCIe bridges to read")
    f = acs_facts(c.topo)
    n = len(f["bridges"])
    if f["lspci"] is None:
        return item("acs", "n/a", f"lspci not available; {n} bridge(s) above the GPUs",
                    "apt-get install pciutils (and run doctor as root) to check ACS", f)
    if f["denied"]:
        return item("acs", "n/a", f"lspci cannot read the capabilities of {', '.join(f['denied'])}",
                    "run doctor as root to read ACS", f)
    if f["redirecting"] and c.topo.gpu_count > 1 and not c.topo.all_nvlink:
        return item("acs", "warn", f"ACS redirects peer traffic to the root complex on "
                                   f"{', '.join(f['redirecting'])}: GPU P2P through them is slow or hangs",
                    "disable ACS in the BIOS, or per bridge at boot: setpci -s <bridge> ECAP_ACS+6.w=0000 "
                    "(NCCL troubleshooting guide)", f)
    return item("acs", "ok", f"{n} bridge(s) above the GPUs, {len(f['with_acs'])} with ACS, none redirecting "
                             "P2P", data=f)
