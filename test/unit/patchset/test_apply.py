"""The strict applier: zero fuzz, zero offset, errors that name patch, file and hunk; parity with git apply."""

from __future__ import annotations

import subprocess

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sglang_blackwell.errors import ApplyError
from sglang_blackwell.patchset.apply import apply_patch
from sglang_blackwell.patchset.series import parse_patch
from support.wheel_world import ORIGINAL, PATCHED, gate_patch


def _patch(tmp_path, text: str, name: str = "0001-x.patch"):
    p = tmp_path / name
    p.write_text(text)
    return parse_patch(p)


def test_applies_exactly(tmp_path):
    files = {"python/sglang/gate.py": ORIGINAL}
    assert apply_patch(_patch(tmp_path, gate_patch()), files) == {"python/sglang/gate.py"}
    assert files["python/sglang/gate.py"] == PATCHED


def test_shifted_context_is_stale_not_fuzzed(tmp_path):
    files = {"python/sglang/gate.py": b"# a new first line\n" + ORIGINAL}
    with pytest.raises(ApplyError) as e:
        apply_patch(_patch(tmp_path, gate_patch()), files)
    msg = str(e.value)
    assert msg.startswith("patch 0001-x.patch: python/sglang/gate.py: hunk #1:")
    assert "matches only at line 2 (offset +1)" in msg and "refresh" in msg
    assert files["python/sglang/gate.py"].startswith(b"# a new first line")  # untouched


def test_changed_context_says_where(tmp_path):
    files = {"python/sglang/gate.py": ORIGINAL.replace(b"(9, 10)", b"(9, 10, 11)")}
    with pytest.raises(ApplyError) as e:
        apply_patch(_patch(tmp_path, gate_patch()), files)
    assert e.value.hunk == 1
    assert "at line 2 expected '    return major in (9, 10)'" in str(e.value)
    assert "nowhere in the file" in str(e.value)


def test_missing_file_named(tmp_path):
    with pytest.raises(ApplyError, match="python/sglang/gate.py: file header: file not found"):
        apply_patch(_patch(tmp_path, gate_patch()), {})


def _git(cwd, *args):
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, check=False)


lines = st.lists(st.sampled_from(["a", "b", "c", "x = 1", "", "  pass", "def f():", "return 2"]),
                 min_size=0, max_size=30)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(old=lines, new=lines, old_eol=st.booleans(), new_eol=st.booleans())
def test_parity_with_git_apply(tmp_path_factory, old, new, old_eol, new_eol):
    """Whatever `git diff` produces, our applier reproduces the new file byte for byte."""
    d = tmp_path_factory.mktemp("parity")
    a = ("\n".join(old) + ("\n" if old_eol and old else "")).encode()
    b = ("\n".join(new) + ("\n" if new_eol and new else "")).encode()
    (d / "a").mkdir()
    (d / "b").mkdir()
    (d / "a" / "f.py").write_bytes(a)
    (d / "b" / "f.py").write_bytes(b)
    r = _git(d, "diff", "--no-index", "--no-prefix", "--src-prefix=a/", "--dst-prefix=b/", "a/f.py", "b/f.py")
    if not r.stdout:
        return
    diff = r.stdout.replace(b"a/a/f.py", b"a/f.py").replace(b"b/b/f.py", b"b/f.py")
    text = ("From 0 Mon Sep 17 00:00:00 2001\nFrom: t <t@t>\nSubject: [PATCH] t\n\nbody\n---\n"
            + diff.decode())
    files = {"f.py": a}
    apply_patch(_patch(d, text), files)
    assert files["f.py"] == b
