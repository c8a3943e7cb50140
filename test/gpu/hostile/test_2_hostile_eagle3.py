"""The EAGLE-3 arm (the userpath suite's speculative flags and the lab draft): every hostile case, in
hostile_receipt.CASES' order, against one server (started again after a case that killed it). A test passes when
its case is clean."""

from __future__ import annotations

import pytest
from hostile_arm import run_case

from sglang_blackwell.qualify.hostile_receipt import CASES

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("case", CASES)
def test_case(eagle3_arm, case):
    run_case(eagle3_arm, case)
