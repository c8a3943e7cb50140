"""checkout/export: the patch queue round trip changes no byte; edits become patches."""

from __future__ import annotations

import filecmp
import shutil
import subprocess

import pytest

from sglang_blackwell.errors import UserError
from sglang_blackwell.patchset.bases import get_base
from sglang_blackwell.patchset.queue import _git_env, checkout, export


def _commit(tree, msg):
    subprocess.run(["git", "commit", "-q", "-a", "-m", msg], cwd=tree, env=_git_env(), check=True)


def test_round_trip_changes_no_byte_tiny(tiny_base, tmp_path):
    """The hand-written test patch is not in canonical `git format-patch` form: the first export
    canonicalizes it; from then on a checkout/export round trip changes no byte."""
    tree = tmp_path / "co"
    assert checkout(get_base("9.9.9"), "sglang", tree) == 1
    assert (tree / "python" / "sglang" / "gate.py").read_bytes().count(b"(9, 10, 12)") == 1
    export(tree)
    before = tmp_path / "before"
    shutil.copytree(tiny_base / "sglang", before)
    tree2 = tmp_path / "co2"
    checkout(get_base("9.9.9"), "sglang", tree2)
    export(tree2)
    cmp = filecmp.dircmp(before, tiny_base / "sglang")
    assert not cmp.diff_files and not cmp.left_only and not cmp.right_only


@pytest.mark.network
@pytest.mark.parametrize("package", ["sglang", "flashinfer"])
def test_round_trip_changes_no_byte_real_series(package, tmp_path, monkeypatch):
    monkeypatch.delenv("SGLANG_BLACKWELL_PATCHES", raising=False)
    monkeypatch.delenv("SGLANG_BLACKWELL_CACHE", raising=False)
    base = get_base("0.5.9")
    series_dir = base.dir / package
    copy = tmp_path / "series"
    shutil.copytree(series_dir, copy)
    tree = tmp_path / "co"
    checkout(base, package, tree)
    export(tree, copy)
    for f in series_dir.iterdir():
        assert (copy / f.name).read_bytes() == f.read_bytes(), f.name
    assert sorted(p.name for p in copy.iterdir()) == sorted(p.name for p in series_dir.iterdir())


def test_new_commit_becomes_the_next_patch(tiny_base, tmp_path):
    tree = tmp_path / "co"
    checkout(get_base("9.9.9"), "sglang", tree)
    f = tree / "python" / "sglang" / "gate.py"
    f.write_text(f.read_text().replace("return 1", "return 2"))
    _commit(tree, "other: return 2\n\nBecause.\n\nOrigin: vendor\nForwarded: no\nUpstream-Status: Pending\n"
                  "Logical-Id: P10\nLast-Update: 2026-11-30")
    names = export(tree)
    assert names == ["0001-gate-accepts-12.patch", "0002-other-return-2.patch"]
    assert (tiny_base / "sglang" / "series").read_text().splitlines()[-1] == "0002-other-return-2.patch"
    from sglang_blackwell.patchset.check import check_base
    from sglang_blackwell.patchset.labellock import write_lock

    # a new patch under the old label fails check (labellock.py) until the label is bumped and locked
    res = check_base(get_base("9.9.9"))
    assert [p for p in res.problems if "wheels labelled +sm120.7 were made from other inputs" in p]
    toml = tiny_base / "base.toml"
    toml.write_text(toml.read_text().replace('local_label = "sm120.7"', 'local_label = "sm120.8"'))
    write_lock(get_base("9.9.9"))
    assert check_base(get_base("9.9.9")).ok


def test_checkout_refuses_a_non_empty_dir_and_export_a_dirty_tree(tiny_base, tmp_path):
    d = tmp_path / "busy"
    d.mkdir()
    (d / "x").write_text("x")
    with pytest.raises(UserError, match="exists and is not empty"):
        checkout(get_base("9.9.9"), "sglang", d)
    tree = tmp_path / "co"
    checkout(get_base("9.9.9"), "sglang", tree)
    (tree / "python" / "sglang" / "gate.py").write_text("dirty\n")
    with pytest.raises(UserError, match="uncommitted changes"):
        export(tree)
