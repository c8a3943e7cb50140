"""support/worker_order.py: the files its table names exist (a renamed file would silently lose its place), and a
worker's collection starts with the longest of them."""

from __future__ import annotations

from pathlib import Path

from support.worker_order import SECONDS, UNIT, seconds


def test_every_file_of_the_table_exists():
    assert [rel for rel in SECONDS if not (UNIT / rel).is_file()] == []


def test_the_longest_files_come_first():
    order = sorted([UNIT / "test_receipts.py", *(UNIT / rel for rel in SECONDS)], key=lambda p: -seconds(p))
    assert order[0] == UNIT / "patches/test_p11_splitkv_draft_extend.py"
    assert order[-1] == UNIT / "test_receipts.py" and seconds(UNIT / "test_receipts.py") == 0
    assert seconds(Path("/elsewhere/test_x.py")) == 0
