"""SGLANG_BLACKWELL_REQUIRE_TOOLS=1 (.ci/run) turns a skip of the image/workflow checks into a failure: run on a
scratch test tree in a subprocess, with and without it, and .ci/run sets it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from support.require_tools import MUST_RUN_IN_CI, REQUIRE_TOOLS_ENV

TEST_ROOT = Path(__file__).resolve().parents[1]
REPO = TEST_ROOT.parent
SKIPPING = "import pytest\n\ndef test_lint():\n    pytest.skip('hadolint: pip install failed (no network)')\n"


def run(tmp_path: Path, required: bool, value: str = "1") -> subprocess.CompletedProcess:
    (tmp_path / "conftest.py").write_text(f"import sys\nsys.path.insert(0, {str(TEST_ROOT)!r})\n"
                                          "from support.require_tools import pytest_configure  # noqa\n"
                                          "from support.require_tools import pytest_runtest_makereport  # noqa\n")
    (tmp_path / "test_workflows.py").write_text(SKIPPING)  # a module whose skips mean a missing tool
    (tmp_path / "test_other.py").write_text(SKIPPING)  # any other module: a skip stays a skip
    env = {k: v for k, v in os.environ.items() if k != REQUIRE_TOOLS_ENV}
    if required:
        env[REQUIRE_TOOLS_ENV] = value
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA", str(tmp_path)],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)


def test_a_skip_fails_only_when_tools_are_required(tmp_path):
    r = run(tmp_path, required=False)
    assert r.returncode == 0 and "2 skipped" in r.stdout, r.stdout + r.stderr
    r = run(tmp_path, required=True)
    assert r.returncode == 1 and "1 failed, 1 skipped" in r.stdout, r.stdout + r.stderr
    assert ("test_workflows.py::test_lint would have been skipped (Skipped: hadolint: pip install failed (no "
            f"network)), but {REQUIRE_TOOLS_ENV}=1") in r.stdout


def test_the_switch_is_read_by_our_one_parser(tmp_path):
    """`true` means on (envswitch.py: 1/true/on/yes), not a silent off; a value it does not accept stops the run
    before any test, naming the variable."""
    r = run(tmp_path, required=True, value="True")
    assert r.returncode == 1 and "1 failed, 1 skipped" in r.stdout, r.stdout + r.stderr
    r = run(tmp_path, required=True, value="maybe")
    assert r.returncode != 0 and "passed" not in r.stdout and "skipped" not in r.stdout, r.stdout + r.stderr
    assert f"{REQUIRE_TOOLS_ENV}='maybe': not a switch value" in r.stdout + r.stderr


def test_ci_requires_the_tools():
    assert f"export {REQUIRE_TOOLS_ENV}=1" in (REPO / ".ci" / "run").read_text()
    assert {p.name for p in TEST_ROOT.rglob("test_*.py")} >= MUST_RUN_IN_CI
