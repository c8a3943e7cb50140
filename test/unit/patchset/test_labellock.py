"""The local version label rule (labellock.py): a changed series, upstream pin or requirement rewrite fails
`check` until local_label is bumped and recorded; a recorded label is never re-recorded with other inputs."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from sglang_blackwell.errors import UserError
from sglang_blackwell.patchset.bases import get_base, list_bases
from sglang_blackwell.patchset.labellock import lock_problems, read_lock, write_lock
from support.wheel_world import gate_patch


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "sglang_blackwell.cli", *args], capture_output=True, text=True,
                          env=dict(os.environ))


def test_real_bases_are_locked(monkeypatch):
    monkeypatch.delenv("SGLANG_BLACKWELL_PATCHES", raising=False)
    for b in list_bases():
        assert lock_problems(b) == [], b.name


def _set_label(base_dir, label):
    toml = base_dir / "base.toml"
    text = toml.read_text()
    old = text.split('local_label = "', 1)[1].split('"', 1)[0]
    toml.write_text(text.replace(f'local_label = "{old}"', f'local_label = "{label}"'))


def test_changed_patch_needs_a_new_label(tiny_base):
    patch = tiny_base / "sglang" / "0001-gate-accepts-12.patch"
    patch.write_text(gate_patch().replace("The gate forgot SM12x; accept it.", "The gate forgot SM12x."))
    r = _cli("check")
    assert r.returncode == 1
    assert (f"base 9.9.9: wheels labelled +sm120.7 were made from other inputs (the sglang series changed since "
            f"sm120.7 was recorded in {tiny_base / 'LABEL.lock'}): bump local_label in {tiny_base / 'base.toml'} "
            "and run "
            "`sglang-blackwell label lock --base 9.9.9`") in r.stderr
    with pytest.raises(UserError, match="sm120.7 was recorded with other inputs"):
        write_lock(get_base("9.9.9"))

    _set_label(tiny_base, "sm120.8")
    assert "local_label sm120.8 is not recorded" in _cli("check").stderr
    r = _cli("label", "lock", "--base", "9.9.9")
    assert r.returncode == 0 and "recorded sm120.8" in r.stdout
    assert _cli("check").returncode == 0
    assert list(read_lock(get_base("9.9.9"))) == ["sm120.7", "sm120.8"]  # history kept


def test_requirement_rewrite_change_needs_a_new_label(tiny_base):
    toml = tiny_base / "base.toml"
    toml.write_text(toml.read_text().replace("flashinfer_python==0.6.4", "flashinfer_python==0.6.5"))
    assert "upstream pins or requirement rewrites changed" in lock_problems(get_base("9.9.9"))[0]


def test_labels_only_go_up(tiny_base):
    _set_label(tiny_base, "sm120.6")
    with pytest.raises(UserError, match="local_label sm120.6 is not above the recorded sm120.7"):
        write_lock(get_base("9.9.9"))


def test_missing_lock_is_named(tiny_base):
    (tiny_base / "LABEL.lock").unlink()
    assert lock_problems(get_base("9.9.9")) == [
        f"{tiny_base / 'LABEL.lock'}: missing or empty: run `sglang-blackwell label lock --base 9.9.9`"]
