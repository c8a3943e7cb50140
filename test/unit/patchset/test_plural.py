"""`N things` in the right number: the helper, and the two messages `make` prints with it (the build line and the
patch report), for a base whose series has one patch (the tiny base of test/support/wheel_world.py)."""

from __future__ import annotations

import pytest

from sglang_blackwell.artifacts.build import build
from sglang_blackwell.patchset.bases import get_base
from sglang_blackwell.patchset.plural import counted
from sglang_blackwell.patchset.report import patch_report


@pytest.mark.parametrize(("n", "noun", "want"), [
    (1, "patch", "1 patch"), (6, "patch", "6 patches"), (0, "patch", "0 patches"),
    (1, "file", "1 file"), (2, "file", "2 files"), (3, "wheel", "3 wheels"), (2, "box", "2 boxes"),
    (2, "dependency", "2 dependencies"), (2, "key", "2 keys"), (1, "dependency", "1 dependency"),
])
def test_counted(n, noun, want):
    assert counted(n, noun) == want


def test_a_plural_the_rule_gets_wrong_is_given():
    assert counted(2, "child", "children") == "2 children" and counted(1, "child", "children") == "1 child"


def test_build_and_report_say_1_patch(tiny_base, tmp_path):
    base = get_base("9.9.9")
    said: list[str] = []
    (w,), _ = build(base, tmp_path / "dist", progress=said.append)
    assert f"built {w.path.name} (1 patch)" in said, said
    assert "sglang 0.0.1 -> 0.0.1+sm120.7: 1 patch" in patch_report(base).splitlines()
