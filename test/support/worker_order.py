"""The order in which a parallel `make test` (pytest-xdist, --dist loadfile) hands test files to its workers.

xdist gives each worker a whole file at a time, in collection order (the Makefile passes --no-loadscope-reorder:
xdist's own reorder, by the number of tests in a file, would put the per-patch probe files, a few tests each but
up to two minutes of module fixtures, last, and the run would end on one worker still probing). So in a worker the
files of test/unit/patches are collected first, the rest after them in their usual order: the long units start
while the short ones can still fill the other workers. A serial run keeps pytest's order.
"""

from __future__ import annotations

from pathlib import Path

import pytest

# longest first: these files' module fixtures run the patched trees' probes (about 35% of the suite's time)
FIRST = Path(__file__).resolve().parents[1] / "unit" / "patches"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not hasattr(config, "workerinput"):  # not an xdist worker
        return
    items.sort(key=lambda item: FIRST not in item.path.parents)  # stable: each file's own order is kept
