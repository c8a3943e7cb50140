"""The machine a set-up run ran on, read, not asked: CPU model, CPUs (all, usable by us, the cgroup's quota),
memory, the OS, the load average, and the versions of the tools the set-up steps run (python3, pip, git, make)."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import Any

from ... import procs


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return None


def cpu_model() -> str | None:
    """/proc/cpuinfo's first "model name" (x86) or "Model" (arm), else what platform knows."""
    for line in (_read("/proc/cpuinfo") or "").splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("model name", "Model") and value.strip():
            return " ".join(value.split())
    return platform.processor() or platform.machine() or None


def usable_cpus() -> int:
    """The CPUs this process may run on (what `nproc` prints)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def cpu_quota() -> float | None:
    """The cgroup v2 CPU quota in CPUs (cpu.max "200000 100000" -> 2.0); None when unlimited or unknown."""
    text = _read("/sys/fs/cgroup/cpu.max")
    if not text:
        return None
    quota, _, period = text.strip().partition(" ")
    try:
        return round(int(quota) / int(period), 2)
    except ValueError:  # "max 100000": no quota
        return None


def memory_gib() -> float | None:
    for line in (_read("/proc/meminfo") or "").splitlines():
        if line.startswith("MemTotal:"):
            return round(int(line.split()[1]) / 2**20, 1)
    return None


def load() -> list[float] | None:
    """The 1, 5 and 15 minute load averages."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def facts() -> dict[str, Any]:
    return {"cpu_model": cpu_model(), "cpus": os.cpu_count(), "nproc": usable_cpus(), "cpu_quota": cpu_quota(),
            "memory_gib": memory_gib(), "os": platform.platform(), "load": load()}


def tool_output(argv: list[str], *, env: dict[str, str] | None = None, timeout_s: float = 60) -> str | None:
    """The first line a tool prints (stdout, else stderr) when it exits 0; None when it is missing or fails."""
    try:
        r = procs.run(argv, capture_output=True, text=True, timeout=timeout_s, env=env,
                      stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if r.returncode != 0:
        return None
    lines = (r.stdout.strip() or r.stderr.strip()).splitlines()
    return lines[0].strip() if lines else None


PY_AND_PIP = """import importlib.metadata as md, sys
try:
    pip = md.version("pip")
except md.PackageNotFoundError:
    pip = "-"
print(sys.version.split()[0], pip)"""


def tool_versions(python: str, env: dict[str, str]) -> dict[str, str | None]:
    """What `make` runs: `python` (the Makefile's PY, python3 unless set) and its pip (one interpreter start),
    git, make."""
    py_pip = (tool_output([python, "-c", PY_AND_PIP], env=env) or "").split()
    git = tool_output(["git", "--version"], env=env)  # "git version 2.39.5"
    make = tool_output(["make", "--version"], env=env)  # "GNU Make 4.3"
    return {"python": py_pip[0] if py_pip else None, "python_exe": python,
            "pip": py_pip[1] if len(py_pip) > 1 and py_pip[1] != "-" else None,
            "git": git.split()[-1] if git else None, "make": make}
