"""What the processes of one test run share: a directory all pytest-xdist workers of the run see, and a lock to make
something in it once.

Each xdist worker has a base temp dir of its own (`<run>/popen-gw0`, ...) under the run's (`<run>`); without
xdist the session's base temp dir is the run's. What is made there must be made under `made_once`, so that two
workers asking for the same thing at once wait for one build instead of racing two into one path.
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
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
