"""Whether the caches a fresh clone's set-up reads held anything: pip's (where that pip says it is; only its
download and wheel caches count, not its self-check stamps) and ours (~/.cache/sglang-blackwell: the pinned
upstream wheels, the image's package caches). Measured by walking them, before and after the run, per top-level
folder: "cold" (nothing that counts), "warm", or "disabled" (pip's cache turned off)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

from ... import procs
from ...paths import cache_dir

PIP_REUSED = ("http", "http-v2", "wheels")  # what pip takes from its cache instead of downloading or building


def _walk(path: Path) -> tuple[int, int]:
    files = size = 0
    for top, _dirs, names in os.walk(path):
        for name in names:
            try:
                st = os.lstat(os.path.join(top, name))
            except OSError:
                continue
            files += 1
            size += st.st_size
    return files, size


def usage(path: Path, counts: tuple[str, ...] | None = None) -> dict[str, Any]:
    """Files and bytes under `path`, per top-level entry (links not followed; absent: 0). `counts`: the entries
    that make it warm (None: all)."""
    parts: dict[str, dict[str, int]] = {}
    try:
        entries = sorted(os.scandir(path), key=lambda e: e.name)
    except OSError:
        entries = []
    for e in entries:
        try:
            one = (1, e.stat(follow_symlinks=False).st_size)
        except OSError:
            continue
        files, size = _walk(Path(e.path)) if e.is_dir(follow_symlinks=False) else one
        parts[e.name] = {"files": files, "bytes": size}
    counted = [v for k, v in parts.items() if counts is None or k in counts]
    files = sum(v["files"] for v in counted)
    return {"path": str(path), "files": files, "bytes": sum(v["bytes"] for v in counted),
            "state": "warm" if files else "cold", "parts": parts, **({"counted": list(counts)} if counts else {})}


def _ask_pip(python: str, env: dict[str, str]) -> tuple[Path | None, str]:
    """(the cache folder `python -m pip cache dir` prints, "") or (None, why not)."""
    try:
        r = procs.run([python, "-m", "pip", "cache", "dir"], capture_output=True, text=True, timeout=60,
                      env=env, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, str(e)
    out = r.stdout.strip()
    if r.returncode == 0 and out:
        return Path(out.splitlines()[-1]), ""
    said = (r.stderr.strip() or out).splitlines()
    return None, said[-1] if said else f"exit {r.returncode}"


def pip_cache(python: str, env: dict[str, str]) -> dict[str, Any]:
    """pip's cache as `python -m pip cache dir` names it (pip.conf, PIP_CACHE_DIR and XDG_CACHE_HOME apply); where
    pip cannot be asked, the place pip uses by default."""
    path, why = _ask_pip(python, env)
    if path is not None:
        return usage(path, PIP_REUSED)
    if "disabled" in why:  # PIP_NO_CACHE_DIR: "pip cache commands can not function since cache is disabled."
        return {"path": None, "files": 0, "bytes": 0, "state": "disabled", "note": why}
    xdg = env.get("XDG_CACHE_HOME")
    default = Path(env["PIP_CACHE_DIR"]) if env.get("PIP_CACHE_DIR") else \
        (Path(xdg) if xdg else Path(env.get("HOME") or Path.home()) / ".cache") / "pip"
    return {**usage(default, PIP_REUSED), "note": f"`{python} -m pip cache dir` failed ({why}): pip's default place"}


def cache_state(python: str, env: dict[str, str], *, again: dict[str, Any] | None = None) -> dict[str, Any]:
    """{"pip": ..., "sglang-blackwell": ..., "state": "cold" | "warm" | "mixed"} (a disabled cache counts as cold:
    nothing comes from it). again: a state measured before, whose folders are measured once more."""
    if again is None:
        pip = pip_cache(python, env)
    elif again["pip"]["path"] is None:
        pip = dict(again["pip"])
    else:
        pip = {**again["pip"], **usage(Path(again["pip"]["path"]), PIP_REUSED)}
    caches = {"pip": pip, "sglang-blackwell": usage(cache_dir())}
    states = {c["state"] for c in caches.values()}
    state = "warm" if states == {"warm"} else "mixed" if "warm" in states else "cold"
    return {**caches, "state": state}
