"""What the processes of one test run share: a directory all pytest-xdist workers of the run see, and a lock to make
something in it once.

Each xdist worker has a base temp dir of its own (`<run>/popen-gw0`, ...) under the run's (`<run>`); without
xdist the session's base temp dir is the run's. What is made there must be made under `made_once`, so that two
workers asking for the same thing at once wait for one build instead of racing two into one path.
"""

from __future__ import annotations

import fcntl
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


def run_dir(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest, name: str) -> Path:
    """<the run's base temp dir>/<name>, the same directory in every worker of this run."""
    base = tmp_path_factory.getbasetemp()
    if hasattr(request.config, "workerinput"):  # an xdist worker: its basetemp is a child of the run's
        base = base.parent
    d = base / name
    d.mkdir(parents=True, exist_ok=True)
    return d


@contextmanager
def made_once(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive lock on lock_path (created if missing) while the body checks for and makes a thing."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def made_once_dir(parent: Path, key: str, make: Callable[[Path], None]) -> Path:
    """parent/key, filled by make(parent/key) once per run: the first process that asks makes it, under the lock;
    one that asks meanwhile waits and then takes it as it is. Made in place (what it holds may name its own path:
    a venv, a file:// index), whole only once the marker beside it is written; one a dead process left half made
    is made again. `key` must say everything the directory is made from. Read-only for whoever takes it."""
    dest = parent / key
    done = parent / f".{key}.complete"
    if not done.exists():
        with made_once(parent / f".{key}.lock"):
            if not done.exists():
                shutil.rmtree(dest, ignore_errors=True)
                dest.mkdir(parents=True)
                make(dest)
                done.write_text("")
    return dest
