"""hadolint on docker/Dockerfile and shellcheck on docker/*.sh (the install script, the stand-in image build), all
clean; each linter is shown to fail on a known-bad variant (so a clean result means it ran). The linters come from
PyPI (pinned, cached)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

TEST_ROOT = Path(__file__).resolve().parents[2]
if str(TEST_ROOT) not in sys.path:
    sys.path.insert(0, str(TEST_ROOT))

from support.tools import HADOLINT, SHELLCHECK, ToolUnavailable, pip_tool  # noqa: E402

REPO = TEST_ROOT.parent
pytestmark = pytest.mark.network


def tool(spec) -> Path:
    try:
        return pip_tool(*spec)
    except ToolUnavailable as e:
        pytest.skip(str(e))


def run(exe: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=120)


def test_hadolint_clean():
    r = run(tool(HADOLINT), "--no-color", str(REPO / "docker/Dockerfile"))
    assert (r.returncode, r.stdout + r.stderr) == (0, "")


def test_hadolint_catches_a_bad_dockerfile(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text((REPO / "docker/Dockerfile").read_text().replace(
        "USER 10001:10001", "RUN cd /opt && ls\nUSER 10001:10001"))
    r = run(tool(HADOLINT), "--no-color", str(bad))
    assert r.returncode != 0 and "DL3003" in r.stdout  # "use WORKDIR to switch to a directory"


def test_shellcheck_clean():
    scripts = sorted((REPO / "docker").glob("*.sh"))
    assert [s.name for s in scripts] == ["install-stack.sh", "standin-image.sh"]
    r = run(tool(SHELLCHECK), "--severity=style", *map(str, scripts))
    assert (r.returncode, r.stdout + r.stderr) == (0, "")


def test_shellcheck_catches_a_bad_script(tmp_path):
    bad = tmp_path / "install-stack.sh"
    bad.write_text((REPO / "docker/install-stack.sh").read_text().replace('rm -rf "$VENV"', "rm -rf $VENV"))
    r = run(tool(SHELLCHECK), str(bad))
    assert r.returncode != 0 and "SC2086" in r.stdout  # unquoted variable
