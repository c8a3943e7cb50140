"""What nvidia-smi says about this machine: GPUs, compute processes, memory in use. No CUDA initialization."""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

from .. import procs


def available() -> bool:
    return shutil.which("nvidia-smi") is not None


def _query(args: list[str]) -> list[list[str]]:
    try:
        r = procs.run(["nvidia-smi", *args, "--format=csv,noheader,nounits"], capture_output=True,
                      text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if r.returncode != 0:
        return []
    return [[c.strip() for c in ln.split(",")] for ln in r.stdout.splitlines() if ln.strip()]


def compute_apps() -> list[dict[str, Any]]:
    out = []
    for row in _query(["--query-compute-apps=pid,used_memory"]):
        try:
            out.append({"pid": int(row[0]), "used_memory_mib": int(row[1]) if row[1].isdigit() else None})
        except (ValueError, IndexError):
            continue
    return out


def memory_used_mib() -> list[int]:
    return [int(r[0]) for r in _query(["--query-gpu=memory.used"]) if r and r[0].isdigit()]


def machine() -> dict[str, Any]:
    """receipts' machine block: gpu_name, gpu_count, capability, links (None where unknown)."""
    rows = _query(["--query-gpu=name,compute_cap"])
    if not rows:
        return {"gpu_name": None, "gpu_count": 0 if available() else None, "capability": None, "links": None}
    names = sorted({r[0] for r in rows})
    caps = sorted({r[1] for r in rows if len(r) > 1})
    return {"gpu_name": names[0] if len(names) == 1 else names, "gpu_count": len(rows),
            "capability": caps[0] if len(caps) == 1 else caps, "links": _links()}


def _links() -> str | None:
    try:
        r = procs.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if r.returncode != 0:
        return None
    text = r.stdout
    for kind in ("NV", "PIX", "PXB", "PHB", "NODE", "SYS"):
        if any(tok.startswith(kind) for ln in text.splitlines()[1:] for tok in ln.split()[1:]):
            return "NVLink" if kind == "NV" else f"PCIe ({kind})"
    return None


def machine_label(m: dict[str, Any]) -> str:
    """'2x NVIDIA H200' for the summary; 'unknown' without nvidia-smi."""
    if not m.get("gpu_count"):
        return "unknown (no GPU seen by nvidia-smi)" if m.get("gpu_count") == 0 else "unknown"
    name = m["gpu_name"] if isinstance(m["gpu_name"], str) else "+".join(m["gpu_name"])
    return f"{m['gpu_count']}x {name}"
