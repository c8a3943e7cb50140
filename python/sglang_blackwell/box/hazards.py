"""Platform hazards known to hang or slow GPU peer-to-peer traffic on PCIe boxes (research anchors B5):
an IOMMU that translates GPU DMA, and ACS redirection on the PCIe bridges above the GPUs. Read from sysfs,
/proc/cmdline and `lspci -D -vvv`; `sys_root` lets tests point at a simulated tree."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from .. import procs
from .topology import Topology

BDF = r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]"
_BDF_RE = re.compile(rf"^{BDF}$")
_CMDLINE_RE = re.compile(r"(intel_iommu|amd_iommu|iommu|iommu\.passthrough|pcie_acs_override)(=|$)")


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def iommu_facts(topo: Topology, sys_root: Path = Path("/")) -> dict[str, Any]:
    """IOMMU units, the kernel's iommu options, each GPU's DMA domain type ("identity" = passthrough,
    "DMA"/"DMA-FQ" = translated) and nvidia_uvm's uvm_disable_hmm."""
    units_dir = sys_root / "sys/class/iommu"
    units = sorted(p.name for p in units_dir.iterdir()) if units_dir.is_dir() else []
    cmdline = (_read(sys_root / "proc/cmdline") or "").split()
    domains = {g.pci_bus_id: _read(sys_root / f"sys/bus/pci/devices/{g.pci_bus_id}/iommu_group/type")
               for g in topo.gpus}
    return {"units": units, "cmdline": [t for t in cmdline if _CMDLINE_RE.match(t)],
            "gpu_domain_types": domains,
            "uvm_disable_hmm": _read(sys_root / "sys/module/nvidia_uvm/parameters/uvm_disable_hmm")}


def translated_gpus(facts: dict[str, Any]) -> list[str]:
    return [bdf for bdf, typ in facts["gpu_domain_types"].items() if typ and typ.upper().startswith("DMA")]


def upstream_bridges(bus_id: str, sys_root: Path = Path("/")) -> list[str]:
    """The PCI bridges between the root complex and a device, from its sysfs path."""
    real = os.path.realpath(sys_root / f"sys/bus/pci/devices/{bus_id}")
    return [p for p in Path(real).parts if _BDF_RE.match(p) and p != bus_id]


def parse_lspci_acs(text: str) -> dict[str, dict[str, Any]]:
    """`lspci -D -vvv` -> {bdf: {"name", "acs_ctl": {flag: on} or None, "denied": capabilities hidden}}."""
    out = {}
    for block in re.split(rf"\n(?={BDF} )", text.strip()):
        m = re.match(rf"({BDF}) (.*)", block.split("\n", 1)[0])
        if not m:
            continue
        ctl = re.search(r"ACSCtl:\s*(.*)", block)
        flags = {f[:-1]: f.endswith("+") for f in ctl[1].split() if f[-1] in "+-"} if ctl else None
        out[m[1]] = {"name": m[2], "acs_ctl": flags, "denied": "<access denied>" in block}
    return out


def acs_facts(topo: Topology, sys_root: Path = Path("/"), lspci: str | None = None) -> dict[str, Any]:
    """Bridges above the GPUs and which of them redirect peer requests/completions (ReqRedir/CmpltRedir)."""
    bridges = sorted({b for g in topo.gpus for b in upstream_bridges(g.pci_bus_id, sys_root)})
    if lspci is None:
        exe = shutil.which("lspci")
        if exe is None:
            return {"lspci": None, "bridges": bridges, "redirecting": [], "denied": [], "with_acs": []}
        try:
            lspci = procs.run([exe, "-D", "-vvv"], capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.TimeoutExpired):
            return {"lspci": None, "bridges": bridges, "redirecting": [], "denied": [], "with_acs": []}
    devs = parse_lspci_acs(lspci)

    def ctl(b: str) -> dict[str, bool]:
        return devs.get(b, {}).get("acs_ctl") or {}

    return {"lspci": True, "bridges": bridges,
            "redirecting": [b for b in bridges if ctl(b).get("ReqRedir") or ctl(b).get("CmpltRedir")],
            "denied": [b for b in bridges if devs.get(b, {}).get("denied")],
            "with_acs": [b for b in bridges if devs.get(b, {}).get("acs_ctl") is not None]}
