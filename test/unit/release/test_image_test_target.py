"""`make image-test` where it cannot run: the real Makefile (and its gate, test/support/image_preflight.py), copied
byte for byte into a scratch tree and run by the real make with a PATH that holds only what is named.

A missing buildah or debootstrap, or no root, is one `image-test: NOT RUN: ...` line and a failing make, before any
build work (the scratch tree has no pyproject.toml and VENV names a path no venv can be made at: a make that went on
would say so at once); SGLANG_BLACKWELL_IMAGE_TEST=0 is `image-test: SKIPPED (asked: ...)` and exit 0."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
GATE = Path("test/support/image_preflight.py")
NO_VENV = "/dev/null/venv"  # nothing can be created under it: a make that starts building fails at once
TOOLS = ("buildah", "debootstrap")
# the system's python3, as the Makefile's $(PY) is on a fresh box (and one that uid 65534 can run: a venv's or
# pyenv's python may live under a private home)
PYTHON3 = shutil.which("python3", path=os.defpath) or sys.executable


@pytest.fixture
def tree():
    """The Makefile and its gate in a world-readable scratch directory (a run as `nobody` must read them)."""
    with tempfile.TemporaryDirectory(prefix="image-test-target-") as d:
        root = Path(d)
        root.chmod(0o755)
        shutil.copy2(REPO / "Makefile", root / "Makefile")
        (root / GATE.parent).mkdir(parents=True)
        shutil.copy2(REPO / GATE, root / GATE)
        for p in (root / "test", root / GATE.parent):
            p.chmod(0o755)
        (root / "bin").mkdir(mode=0o755)
        yield root


def make_image_test(tree: Path, on_path: tuple[str, ...] = (), *args: str, env: dict[str, str] | None = None,
                    as_nobody: bool = False) -> subprocess.CompletedProcess:
    """The real make, PATH = a folder with python3 and the named tools. The gate only looks the tools up by name
    on PATH and never runs them, so each named tool is a link to `true`."""
    bindir = tree / "bin"
    (bindir / "python3").symlink_to(PYTHON3)
    for t in on_path:
        (bindir / t).symlink_to(shutil.which("true"))
    cmd = [shutil.which("make"), "image-test", f"VENV={NO_VENV}", *args]
    if as_nobody and os.geteuid() == 0:
        cmd = [shutil.which("setpriv") or "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *cmd]
    return subprocess.run(cmd, cwd=tree, capture_output=True, text=True, timeout=60,
                          env={"PATH": str(bindir), "HOME": str(tree), "LC_ALL": "C", **(env or {})})


def assert_nothing_built(r: subprocess.CompletedProcess) -> None:
    out = r.stdout + r.stderr
    assert NO_VENV not in out and "pytest" not in out, out


@pytest.mark.parametrize("present", [(), ("buildah",), ("debootstrap",)])
def test_missing_tool_is_not_run_and_fails(tree, present):
    r = make_image_test(tree, present)
    missing = [t for t in TOOLS if t not in present]
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.splitlines()[0].startswith(
        f"image-test: NOT RUN: {', '.join(missing)} not found (apt-get install {' '.join(missing)}, as root)"), r.stderr
    assert_nothing_built(r)


def test_not_root_is_not_run_and_fails(tree):
    """Both tools there, the make run as uid 65534 (dropped to it where the tests run as root)."""
    r = make_image_test(tree, TOOLS, as_nobody=True)
    assert r.returncode == 2, r.stdout + r.stderr
    line = r.stderr.splitlines()[0]
    assert line.startswith("image-test: NOT RUN: not root (uid ") and "sudo" in line and "not found" not in line, line
    assert_nothing_built(r)


@pytest.mark.parametrize("how", ["environment", "make variable"])
def test_asked_skip_says_so_and_passes(tree, how):
    asked = "SGLANG_BLACKWELL_IMAGE_TEST=0"
    if how == "environment":
        r = make_image_test(tree, (), env={"SGLANG_BLACKWELL_IMAGE_TEST": "0"})
    else:
        r = make_image_test(tree, (), asked)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines() == [f"image-test: SKIPPED (asked: {asked})"] and r.stderr == "", r.stdout + r.stderr
    assert_nothing_built(r)


def test_unknown_value_is_refused_naming_the_variable(tree):
    r = make_image_test(tree, TOOLS, env={"SGLANG_BLACKWELL_IMAGE_TEST": "yes"})
    assert r.returncode == 2
    assert r.stderr.splitlines()[0] == ("image-test: SGLANG_BLACKWELL_IMAGE_TEST='yes': expected 1 (run, the "
                                        "default) or 0 (skip, saying so)"), r.stderr
    assert_nothing_built(r)


@pytest.mark.skipif(os.geteuid() != 0, reason="the gate lets only root through; these tests run as uid "
                    f"{os.geteuid()}")
def test_ready_box_passes_the_gate_and_goes_on_to_build(tree):
    """Both tools and root: no NOT RUN, and the second make starts on the test venv (which cannot be made here)."""
    r = make_image_test(tree, TOOLS)
    assert "NOT RUN" not in r.stdout + r.stderr
    assert f"needed by '{NO_VENV}/bin/sglang-blackwell'" in r.stderr, r.stdout + r.stderr
