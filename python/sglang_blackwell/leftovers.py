"""Temporary files and folders named after the run that made them, and the sweep that removes what a killed run
left (SIGKILL, a power cut: no `finally` of ours ran).

A name is <prefix><pid>-<random><suffix>: the pid of the process that made it. The rule for what a sweep may
remove (fetch.sweep_partials' rule): an entry of exactly that shape, of this user, not a symbolic link, of the kind
we make there (a directory, or a regular file), whose pid is not ours and is no live process (procs.alive). Nothing
else is ours to judge, however old or however named: another user's, a live run's (a pid reused by an unrelated
process keeps it too: we cannot tell), an old-style name with no pid. Every maker here sweeps first, so the next
run of the same job cleans up after a killed one.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from . import procs

Kind = Literal["dir", "file"]


def _pattern(prefix: str, suffix: str) -> re.Pattern[str]:
    return re.compile(re.escape(prefix) + r"(\d+)-[a-z0-9_]+" + re.escape(suffix))


def _stale(folder_fd: int, name: str, pid: int, kind: Kind) -> bool:
    try:
        st = os.stat(name, dir_fd=folder_fd, follow_symlinks=False)
    except OSError:
        return False
    shape = stat.S_ISDIR(st.st_mode) if kind == "dir" else stat.S_ISREG(st.st_mode)
    return shape and st.st_uid == os.geteuid() and pid != os.getpid() and not procs.alive(pid)


def sweep(folder: Path, prefix: str, suffix: str = "", *, kind: Kind = "dir") -> list[str]:
    """Remove from `folder` what dead runs of ours left under names `prefix`<pid>-<random>`suffix` (see the module
    docstring); the names removed. A folder that is absent, a symbolic link or unreadable is left alone."""
    pattern = _pattern(prefix, suffix)
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return []
    removed = []
    try:
        for name in os.listdir(fd):
            m = pattern.fullmatch(name)
            if not m or not _stale(fd, name, int(m[1]), kind):
                continue
            with contextlib.suppress(OSError):
                if kind == "file":
                    os.unlink(name, dir_fd=fd)
                else:
                    _rmtree(folder, fd, name)
                removed.append(name)
    finally:
        os.close(fd)
    return removed


def _rmtree(folder: Path, fd: int, name: str) -> None:
    if sys.version_info >= (3, 11):
        shutil.rmtree(name, dir_fd=fd)  # Python >= 3.11: relative to the folder just opened, never a path again
    else:
        shutil.rmtree(folder / name)  # rmtree refuses a symbolic link at the top and never follows one inside


def make_dir(prefix: str, folder: Path | None = None) -> Path:
    """A new private directory `prefix`<our pid>-<random> in `folder` (default: the system's temp folder), after
    sweeping what dead runs left there under the same prefix."""
    where = folder if folder is not None else Path(tempfile.gettempdir())
    sweep(where, prefix)
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=where))


def make_file(prefix: str, suffix: str, folder: Path) -> tuple[int, str]:
    """tempfile.mkstemp's (fd, path) of a new private file `prefix`<our pid>-<random>`suffix` in `folder`, after
    sweeping what dead runs left there under the same prefix and suffix."""
    sweep(folder, prefix, suffix, kind="file")
    return tempfile.mkstemp(prefix=f"{prefix}{os.getpid()}-", suffix=suffix, dir=folder)


@contextlib.contextmanager
def temp_dir(prefix: str, folder: Path | None = None) -> Iterator[Path]:
    """make_dir, removed (with all it holds) when the block ends; what SIGKILL leaves, the next make_dir sweeps."""
    path = make_dir(prefix, folder)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
