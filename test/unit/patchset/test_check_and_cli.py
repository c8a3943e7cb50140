"""`check` and the CLI's error contract: non-zero exit naming the patch and hunk at fault."""

from __future__ import annotations

import subprocess
import sys

import pytest

from support.wheel_world import ORIGINAL, make_wheel, sha256


def _cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "sglang_blackwell.cli", *args], capture_output=True, text=True,
                          env=env)


def test_check_passes_on_tiny_base(tiny_base):
    import os

    r = _cli("check", "--all", env=dict(os.environ))
    assert r.returncode == 0, r.stderr
    assert "0001-gate-accepts-12.patch: applies [P9] Pending" in r.stdout


def test_check_fails_naming_patch_and_hunk(tiny_base, server):
    import os

    whl = make_wheel(server.root / "sglang-0.0.1-py3-none-any.whl", "sglang", "0.0.1",
                     {"sglang/__init__.py": b"", "sglang/gate.py": b"# moved\n" + ORIGINAL})
    toml = tiny_base / "base.toml"
    t = toml.read_text()
    import re

    t = re.sub(r'sha256 = "[0-9a-f]+"', f'sha256 = "{sha256(whl)}"', t)
    t = re.sub(r"size = \d+", f"size = {whl.stat().st_size}", t)
    toml.write_text(t)
    r = _cli("check", env=dict(os.environ))
    assert r.returncode == 1
    assert "patch 0001-gate-accepts-12.patch: python/sglang/gate.py: hunk #1:" in r.stderr
    assert "offset +1" in r.stderr


def test_unknown_base_is_a_clear_error(tiny_base):
    import os

    r = _cli("build", "--base", "7.7", env=dict(os.environ))
    assert r.returncode == 2 and "unknown base '7.7' (known: 9.9.9)" in r.stderr


@pytest.mark.network
def test_check_all_real_bases():
    r = _cli("check", "--all")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "base 0.5.9: OK" in r.stdout
