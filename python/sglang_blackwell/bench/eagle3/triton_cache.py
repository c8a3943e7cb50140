"""Which Triton kernels a server compiled during a window: the entries its Triton cache gained.

Triton (3.x `knobs.cache.dir`) caches each compiled kernel specialization in a directory of its own under
`$TRITON_CACHE_DIR`, else `$TRITON_HOME/.triton/cache`, else `~/.triton/cache`; the directory holds the kernel's
metadata `<kernel name>.json`, the group file `__grp__<kernel name>.json` and the binaries. A kernel whose
`tl.constexpr` arguments change (e.g. SGLang's EAGLE `bs_upper = next_power_of_2(bs)`) compiles again on the first
batch of a new size: a new entry. The listing is of the directory the server was started with (its environment), so
it works for servers this harness launched; an attached server's cache is not ours to read.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

GROUP_PREFIX = "__grp__"


def cache_dir(env: Mapping[str, str]) -> Path:
    """The Triton cache directory of a process started with `env`."""
    if env.get("TRITON_CACHE_DIR"):
        return Path(env["TRITON_CACHE_DIR"]).expanduser()
    home = env.get("TRITON_HOME") or env.get("HOME") or os.path.expanduser("~")
    return Path(home).expanduser() / ".triton" / "cache"


def snapshot(directory: Path | None) -> frozenset[str] | None:
    """The cache's entry names (directories); None when it cannot be listed (missing, unreadable)."""
    if directory is None:
        return None
    try:
        return frozenset(e.name for e in os.scandir(directory) if e.is_dir(follow_symlinks=False))
    except OSError:
        return None


def kernel_names(entry: Path) -> list[str]:
    """The kernel names of one cache entry, from its __grp__<name>.json (else <name>.json) file names."""
    try:
        files = [f.name for f in os.scandir(entry) if f.name.endswith(".json")]
    except OSError:
        return []
    groups = [f[len(GROUP_PREFIX):-5] for f in files if f.startswith(GROUP_PREFIX)]
    return sorted(set(groups or [f[:-5] for f in files]))


def compiled(directory: Path | None, before: frozenset[str] | None) -> dict[str, Any]:
    """What the cache gained since `before`: {"dir", "new_entries", "kernels": {name: entries}} (sorted by name),
    with new_entries null when the directory could not be listed now (a cache that did not exist before counts
    as empty then)."""
    after = snapshot(directory)
    out: dict[str, Any] = {"dir": str(directory) if directory else None, "new_entries": None, "kernels": {}}
    if after is None or directory is None:
        return out
    new = sorted(after - (before or frozenset()))
    names = Counter(n for e in new for n in kernel_names(directory / e))
    out.update(new_entries=len(new), kernels=dict(sorted(names.items())))
    return out


def skipped(why: str) -> dict[str, Any]:
    return {"dir": None, "new_entries": None, "kernels": {}, "skipped": why}


def summary_line(rec: dict[str, Any] | None) -> str:
    """`3 Triton compiles (assign_extend_cache_locs x2, ...)` for a progress line."""
    if not rec or rec.get("new_entries") is None:
        return "Triton compiles: -" + (f" ({rec['skipped']})" if rec and rec.get("skipped") else "")
    kernels = ", ".join(f"{k} x{n}" if n > 1 else k for k, n in rec["kernels"].items())
    return f"{rec['new_entries']} Triton compile(s)" + (f" ({kernels})" if kernels else "")
