"""The one JSON envelope every result this project writes uses (benchmarks, qualification, doctor, lab runs).

    {"schema": "sglang-blackwell/receipt/1", "kind": ..., "created": ISO-8601 UTC, "command": argv,
     "git_commit": ..., "base": ..., "versions": {sglang, flashinfer, torch, cuda, nccl, driver},
     "machine": {gpu_name, gpu_count, capability, links}, "tp": int | null, "summary": {...}, ...}

Kind-specific detail goes in `summary` (small, comparable across runs) and any extra top-level keys.
"""

from __future__ import annotations

import datetime as _dt
import importlib.metadata as md
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from . import procs
from .paths import write_atomic

SCHEMA = "sglang-blackwell/receipt/1"
ENVELOPE_KEYS = ("schema", "kind", "created", "command", "git_commit", "base", "versions", "machine", "tp",
                 "summary")
VERSION_KEYS = ("sglang", "flashinfer", "torch", "cuda", "nccl", "driver")
MACHINE_KEYS = ("gpu_name", "gpu_count", "capability", "links")


def _dist_version(name: str) -> str | None:
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


def git_commit(cwd: Path | None = None) -> str | None:
    try:
        r = procs.run(["git", "rev-parse", "HEAD"], cwd=cwd or Path(__file__).parent, capture_output=True,
                      text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if r.returncode != 0:
        return None
    dirty = procs.run(["git", "status", "--porcelain", "--untracked-files=no"],
                      cwd=cwd or Path(__file__).parent, capture_output=True, text=True).stdout.strip()
    return r.stdout.strip() + ("-dirty" if dirty else "")


def _torch_cuda_unimported() -> str | None:
    """torch.version.cuda read from the installed torch's version.py, without importing torch (~1-2 s a process)."""
    import ast
    import importlib.util

    try:
        spec = importlib.util.find_spec("torch")  # a top-level package: found, not imported
    except (ImportError, ValueError):
        return None
    for d in (spec.submodule_search_locations or []) if spec else []:
        try:
            tree = ast.parse((Path(d) / "version.py").read_text())
        except (OSError, SyntaxError, ValueError):
            continue
        for node in tree.body:
            target = node.target if isinstance(node, ast.AnnAssign) else (
                node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None)
            if isinstance(target, ast.Name) and target.id == "cuda" and node.value is not None:
                try:
                    value = ast.literal_eval(node.value)
                except ValueError:
                    return None
                return value if isinstance(value, str) else None
    return None


def _gpu_visible() -> bool:
    """An NVIDIA device node is present (the NCCL version needs torch with CUDA; without a GPU there is none)."""
    return Path("/dev/nvidia0").exists() or Path("/dev/nvidiactl").exists()


def collect_versions() -> dict[str, str | None]:
    """Versions of the serving stack, without initializing CUDA; torch is imported only where it is imported
    already or a GPU is visible (the NCCL version), else its CUDA version is read from its version.py."""
    v: dict[str, str | None] = {
        "sglang": _dist_version("sglang"),
        "flashinfer": _dist_version("flashinfer-python"),
        "torch": _dist_version("torch"),
        "cuda": None,
        "nccl": None,
        "driver": None,
    }
    if "torch" in sys.modules or (v["torch"] and _gpu_visible()):
        try:
            import torch

            v["cuda"] = torch.version.cuda
            if torch.cuda.is_available():
                nccl = torch.cuda.nccl.version()
                v["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
        except Exception:
            pass
    elif v["torch"]:
        v["cuda"] = _torch_cuda_unimported()
    try:
        import pynvml

        pynvml.nvmlInit()
        d = pynvml.nvmlSystemGetDriverVersion()
        v["driver"] = d.decode() if isinstance(d, bytes) else d
    except Exception:
        pass
    return v


def make_receipt(kind: str, summary: dict[str, Any], *, base: str | None = None, tp: int | None = None,
                 machine: dict[str, Any] | None = None, versions: dict[str, Any] | None = None,
                 command: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    m = {k: None for k in MACHINE_KEYS}
    m.update(machine or {})
    vers = {k: None for k in VERSION_KEYS}
    vers.update(versions if versions is not None else collect_versions())
    r = {
        "schema": SCHEMA,
        "kind": kind,
        "created": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(),
        "command": command if command is not None else [os.path.basename(sys.argv[0]), *sys.argv[1:]],
        "git_commit": git_commit(),
        "base": base,
        "versions": vers,
        "machine": m,
        "tp": tp,
        "summary": summary,
    }
    r.update(extra)
    return r


def validate_receipt(r: dict[str, Any]) -> list[str]:
    probs = [f"missing key {k!r}" for k in ENVELOPE_KEYS if k not in r]
    if r.get("schema") != SCHEMA:
        probs.append(f"schema is {r.get('schema')!r}, expected {SCHEMA!r}")
    if not isinstance(r.get("summary"), dict):
        probs.append("summary must be an object")
    for k in VERSION_KEYS:
        if k not in (r.get("versions") or {}):
            probs.append(f"versions lacks {k!r}")
    for k in MACHINE_KEYS:
        if k not in (r.get("machine") or {}):
            probs.append(f"machine lacks {k!r}")
    return probs


def write_receipt(r: dict[str, Any], path: Path) -> Path:
    probs = validate_receipt(r)
    if probs:
        raise ValueError(f"refusing to write an invalid receipt to {path}: {probs}")
    return write_atomic(path, json.dumps(r, indent=1, sort_keys=False, default=str) + "\n")
