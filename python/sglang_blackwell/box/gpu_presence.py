"""Whether this machine has an NVIDIA GPU, asked of everything besides NVML that can tell: `nvidia-smi -L`, the
kernel driver's /proc/driver/nvidia, torch.cuda, and whether NVML could be asked at all (nvidia-ml-py). doctor
says what each of them said, so that "no GPU" names what was looked at, and a GPU that NVML alone misses is
blamed on NVML (a missing nvidia-ml-py, an unloadable libnvidia-ml.so.1), not on the machine."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path
from typing import Any

from .. import procs

PROC_DRIVER = Path("/proc/driver/nvidia")  # present while the NVIDIA kernel module is loaded
SMI_TIMEOUT_S = 20.0


def nvidia_smi() -> dict[str, Any]:
    """`nvidia-smi -L` from PATH: its path, how many GPUs it lists (None: it could not say) and its error."""
    path = shutil.which("nvidia-smi")
    out: dict[str, Any] = {"path": path, "gpus": None, "error": None}
    if path is None:
        return out
    try:
        r = procs.run([path, "-L"], capture_output=True, text=True, errors="replace", timeout=SMI_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        out["error"] = f"no answer within {SMI_TIMEOUT_S:.0f} s"
        return out
    except OSError as e:
        out["error"] = e.strerror or str(e)
        return out
    if r.returncode != 0:
        first = next((ln.strip() for ln in (r.stdout + r.stderr).splitlines() if ln.strip()), "")
        out["error"] = f"exit {r.returncode}" + (f": {first[:200]}" if first else "")
        return out
    out["gpus"] = sum(1 for ln in r.stdout.splitlines() if ln.startswith("GPU "))
    return out


def proc_driver(root: Path = PROC_DRIVER) -> dict[str, Any]:
    """The NVIDIA kernel driver's /proc entry: loaded or not, and its GPUs (one folder each under gpus/)."""
    gpus_dir = root / "gpus"
    try:
        gpus = sum(1 for _ in gpus_dir.iterdir()) if gpus_dir.is_dir() else None
    except OSError:
        gpus = None
    return {"path": str(root), "present": root.is_dir(), "gpus": gpus}


def sightings(torch: dict[str, Any]) -> dict[str, Any]:
    """What each source says; `torch` is stackinfo.torch_facts() (torch is not imported twice)."""
    return {"nvidia_smi": nvidia_smi(), "proc_driver": proc_driver(),
            "torch_cuda": {k: torch.get(k) for k in ("installed", "version", "cuda", "cuda_available",
                                                      "device_count", "error")},
            "nvml_module": importlib.util.find_spec("pynvml") is not None}


def gpus_seen(s: dict[str, Any]) -> dict[str, int]:
    """source -> the GPUs it sees, for the sources that see at least one."""
    counts = {"nvidia-smi": s["nvidia_smi"]["gpus"], str(PROC_DRIVER): s["proc_driver"]["gpus"],
              "torch.cuda": s["torch_cuda"].get("device_count")}
    return {k: n for k, n in counts.items() if n}


def describe(s: dict[str, Any]) -> list[str]:
    """One phrase per source: what was looked at, and what it said."""
    smi, proc, tc = s["nvidia_smi"], s["proc_driver"], s["torch_cuda"]
    if smi["path"] is None:
        said = ["nvidia-smi: not on PATH"]
    elif smi["error"]:
        said = [f"nvidia-smi -L failed ({smi['error']})"]
    else:
        said = [f"nvidia-smi -L lists {smi['gpus']} GPU(s)"]
    if not proc["present"]:
        said.append(f"{proc['path']}: absent (no NVIDIA kernel driver loaded)")
    else:
        said.append(f"{proc['path']}: driver loaded" + (f", {proc['gpus']} GPU(s)" if proc["gpus"] is not None
                                                         else ""))
    if not tc.get("installed"):
        said.append("torch.cuda: torch is not installed")
    elif not tc.get("cuda"):
        said.append(f"torch.cuda: torch {tc['version']} is a CPU build")
    elif not tc.get("cuda_available"):
        said.append(f"torch.cuda: torch {tc['version']} (CUDA {tc['cuda']}) sees no GPU"
                    + (f" ({tc['error']})" if tc.get("error") else ""))
    else:
        said.append(f"torch.cuda: {tc['device_count']} GPU(s)")
    return said
