"""CPU tests: test/ on sys.path (test/support's helpers), and the CI rule that a skipped tool check fails."""

from __future__ import annotations

import sys
from pathlib import Path

# a skip of the image/workflow linters, validators and builds fails the run under SGLANG_BLACKWELL_REQUIRE_TOOLS=1
_TEST_ROOT = str(Path(__file__).resolve().parents[1])
if _TEST_ROOT not in sys.path:
    sys.path.insert(0, _TEST_ROOT)
from support.require_tools import pytest_configure, pytest_runtest_makereport  # noqa: E402,F401
