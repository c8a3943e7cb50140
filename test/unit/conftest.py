"""CPU tests: test/ on sys.path (test/support's helpers), the CI rule that a skipped tool check fails, the upstream
trees every test of the run shares (support/trees.py) and the order a parallel run hands files to its workers
(support/worker_order.py)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

# a skip of the image/workflow linters, validators and builds fails the run under SGLANG_BLACKWELL_REQUIRE_TOOLS=1
_TEST_ROOT = str(Path(__file__).resolve().parents[1])
if _TEST_ROOT not in sys.path:
    sys.path.insert(0, _TEST_ROOT)
from support.require_tools import pytest_configure, pytest_runtest_makereport  # noqa: E402,F401
from support.shared_tmp import run_dir  # noqa: E402
from support.worker_order import pytest_collection_modifyitems  # noqa: E402,F401

if TYPE_CHECKING:
    from support.trees import TreeFactory


@pytest.fixture(scope="session")
def tree_factory(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> TreeFactory:
    """Upstream trees and built trees, each made once per run (all xdist workers share them; read-only)."""
    from support.trees import TreeFactory  # what building needs is imported by the tests that build

    return TreeFactory(run_dir(tmp_path_factory, request, "trees"))
