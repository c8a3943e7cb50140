"""Facts about the installed serving stack, for `doctor`: torch (CUDA build, arch list, NCCL), whether sglang
and flashinfer are this fork's builds, whether flashinfer's trtllm_comm JIT accepts a capability, and which
SASS the SGLang kernel wheel holds. Installed packages are read as files where possible, never imported
(torch is imported: its arch list and NCCL version live in the binary)."""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import re
import subprocess
import sys
import tempfile
from typing import Any

from .. import procs
from ..artifacts.fatbin import read_cuda_binary
from ..artifacts.wheel import MARKER_FILE
from ..errors import UserError
from .allreduce_paths import package_dir

LOCAL_LABEL_RE = re.compile(r"\+(sm120\.\d+)$")
KERNEL_DISTS = ("sglang-kernel", "sgl-kernel")


def torch_facts() -> dict[str, Any]:
    """Version, CUDA build, arch list and NCCL of the torch in this interpreter."""
    out: dict[str, Any] = {"installed": False}
    try:
        import torch
    except ModuleNotFoundError:
        return out
    except Exception as e:  # a broken install can raise anything at import
        out["error"] = f"{type(e).__name__}: {e}"
        return out
    out.update(installed=True, version=torch.__version__, cuda=torch.version.cuda, arch_list=[], nccl=None,
               cuda_available=False, device_count=0)
    try:
        out["cuda_available"] = bool(torch.cuda.is_available())
        out["device_count"] = torch.cuda.device_count() if out["cuda_available"] else 0
        archs = torch.cuda.get_arch_list() if out["cuda_available"] else []
        if not archs and torch.version.cuda:  # the build's list, without a usable GPU
            flags = getattr(torch._C, "_cuda_getArchFlags", lambda: None)()
            archs = flags.split() if flags else []
        out["arch_list"] = list(archs)
    except Exception as e:
        out["error"] = f"{type(e).__name__}: {e}"
    try:
        v = torch.cuda.nccl.version()
        out["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except Exception:  # CPU builds have no NCCL
        pass
    return out


def arch_covered(arch_list: list[str], major: int, minor: int) -> bool:
    """Does an arch list (torch's) run on capability major.minor? SASS of the same major and a lower or equal
    minor ('a' variants only on their exact arch), or PTX of a lower or equal arch."""
    for a in arch_list:
        m = re.fullmatch(r"(sm|compute)_(\d+)([af]?)", a)
        if not m:
            continue
        amaj, amin, suffix = int(m[2]) // 10, int(m[2]) % 10, m[3]
        if suffix == "a" and (amaj, amin) != (major, minor):
            continue
        if m[1] == "sm" and amaj == major and amin <= minor:
            return True
        if m[1] == "compute" and (amaj, amin) <= (major, minor) and (not suffix or amaj == major):
            return True
    return False


def dist_facts(name: str) -> dict[str, Any] | None:
    """An installed distribution: version, our local label (+sm120.N), our marker file; None: not there."""
    try:
        d = md.distribution(name)
    except md.PackageNotFoundError:
        return None
    label = LOCAL_LABEL_RE.search(d.version)
    marker = None
    raw = d.read_text(MARKER_FILE)
    if raw:
        try:
            marker = json.loads(raw)
        except ValueError:
            marker = {"error": f"{MARKER_FILE} is not valid JSON"}
    patches = [p.get("logical_id") or p.get("name") for p in (marker or {}).get("patches", [])]
    return {"name": name, "version": d.version, "local_label": label[1] if label else None, "marker": marker,
            "patches": patches}


# Runs in a subprocess with FLASHINFER_CUDA_ARCH_LIST set: building the JIT spec applies the module's arch
# table (and raises "No supported CUDA architectures ..." if the capability is not in it); nothing compiles.
TRTLLM_PROBE = r"""
import inspect, json, re
out = {"importable": True}
try:
    from flashinfer.jit.comm import gen_trtllm_comm_module
except Exception as e:
    print("SGLB " + json.dumps({"importable": False, "error": f"{type(e).__name__}: {e}"}))
    raise SystemExit
try:
    src = inspect.getsource(gen_trtllm_comm_module)
    m = re.search(r"supported_major_versions=\[([0-9, ]*)\]", src)
    out["majors"] = [int(x) for x in m[1].split(",") if x.strip()] if m else None
except Exception:
    out["majors"] = None
try:
    gen_trtllm_comm_module()
    out["accepted"] = True
except RuntimeError as e:
    out["accepted"], out["error"] = False, str(e)
print("SGLB " + json.dumps(out))
"""


def trtllm_comm_probe(capability: str, python: str = sys.executable, timeout: int = 120) -> dict[str, Any]:
    """Does the installed flashinfer's trtllm_comm JIT module accept this capability ("12.0")?"""
    major, minor = capability.split(".")
    arch = f"{major}.{minor}{'a' if int(major) >= 9 else ''}"
    with tempfile.TemporaryDirectory(prefix="sglb-fi-") as workspace:  # keep the user's JIT cache untouched
        env = dict(os.environ, FLASHINFER_CUDA_ARCH_LIST=arch, FLASHINFER_WORKSPACE_BASE=workspace)
        try:
            r = procs.run([python, "-c", TRTLLM_PROBE], capture_output=True, text=True, timeout=timeout,
                          env=env)
        except subprocess.TimeoutExpired:
            return {"arch": arch, "importable": None, "error": f"timed out after {timeout} s"}
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("SGLB ")), None)
    if line is None:
        tail = (r.stderr.strip().splitlines() or ["no output"])[-1]
        return {"arch": arch, "importable": None, "error": f"exit {r.returncode}: {tail}"}
    return dict(json.loads(line[5:]), arch=arch)


def kernel_facts() -> dict[str, Any] | None:
    """The installed SGLang kernel package (sgl_kernel, not imported): its .so files and their SASS/PTX."""
    root = package_dir("sgl_kernel")
    if root is None:
        return None
    dist = next((d for d in (dist_facts(n) for n in KERNEL_DISTS) if d), None)
    files = []
    for so in sorted(root.rglob("*.so")):
        try:
            files.append(dict(read_cuda_binary(so).to_dict(), path=str(so.relative_to(root))))
        except UserError as e:
            files.append({"path": str(so.relative_to(root)), "error": str(e)})
    return {"root": str(root), "dist": dist, "files": files}
