"""`sglang-blackwell check --upstream`: the drift report, against a real HTTP server on localhost that speaks
PyPI's JSON API and serves wheels. The series is made with real git (format-patch); the "new upstream release"
moves one patch's context, changes another's and already contains a third."""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path

import pytest

from sglang_blackwell.cli import main
from sglang_blackwell.errors import UserError
from sglang_blackwell.patchset.drift import classify_series, parse_upstream, pick_wheel, release
from sglang_blackwell.patchset.series import load_series
from support.fake_base import Patched, WheelPin, render_base
from support.wheel_world import make_wheel, sha256

FILES = {name: "".join(f"{name}_line_{i} = {i}\n" for i in range(12)).encode() for name in "abcd"}


def _git(cwd: Path, *args: str) -> str:
    env = {"GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(cwd),
           "GIT_AUTHOR_NAME": "T", "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "T",
           "GIT_COMMITTER_EMAIL": "t@example.invalid", "PATH": "/usr/bin:/bin:/usr/local/bin"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


def _dep3(lid: str, subject: str) -> str:
    return (f"{subject}\n\nWhy: the test needs it.\n\nOrigin: vendor, tests\nForwarded: no\n"
            f"Upstream-Status: Pending\nLogical-Id: {lid}\nLast-Update: 2026-11-30\n")


def _series(tmp_path: Path) -> Path:
    """Four patches, one per file (P1..P4 on a.py..d.py), each changing line 6, made by git format-patch."""
    repo = tmp_path / "upstream"
    (repo / "python" / "sglang").mkdir(parents=True)
    for name, data in FILES.items():
        (repo / "python" / "sglang" / f"{name}.py").write_bytes(data)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "upstream")
    for lid, name in zip(("P1", "P2", "P3", "P4"), "abcd", strict=True):
        f = repo / "python" / "sglang" / f"{name}.py"
        f.write_text(f.read_text().replace(f"{name}_line_6 = 6", f"{name}_line_6 = 600  # patched"))
        _git(repo, "commit", "-q", "-am", _dep3(lid, f"{name}: patch line 6"))
    out = tmp_path / "patches" / "1.0.0" / "sglang"
    _git(repo, "format-patch", "-q", "--zero-commit", "--no-signature", "-o", str(out), "HEAD~4")
    (out / "series").write_text("".join(f"{p.name}\n" for p in sorted(out.glob("*.patch"))))
    return out


def _new_release() -> dict[str, bytes]:
    """a.py unchanged; b.py gained 3 lines on top; c.py's context changed; d.py has the change already."""
    b, c, d = (FILES[n].decode() for n in "bcd")
    return {"a": FILES["a"], "b": ("# new header\n# more\n\n" + b).encode(),
            "c": c.replace("c_line_5 = 5", "c_line_5 = 55").replace("c_line_7 = 7", "c_line_7 = 77").encode(),
            "d": d.replace("d_line_6 = 6", "d_line_6 = 600  # patched").encode()}


@pytest.fixture
def pypi(tmp_path, server, monkeypatch):
    """base 1.0.0 pins sglang 0.0.1; the served index also has 0.0.2 (drifted) and a 0.0.3rc1 pre-release."""
    series_dir = _series(tmp_path)
    releases = {}
    for version, files in (("0.0.1", FILES), ("0.0.2", _new_release()), ("0.0.3rc1", FILES)):
        whl = make_wheel(server.root / f"sglang-{version}-py3-none-any.whl", "sglang", version,
                         {"sglang/__init__.py": b"", **{f"sglang/{n}.py": data for n, data in files.items()}})
        releases[version] = [{"filename": whl.name, "url": f"{server.url}/{whl.name}", "size": whl.stat().st_size,
                              "digests": {"sha256": sha256(whl)}, "yanked": False}]
    old = releases["0.0.1"][0]
    (series_dir.parent / "base.toml").write_text(render_base("1.0.0", [Patched("sglang", "sglang", "0.0.1", [WheelPin(
        old["filename"], old["url"], old["digests"]["sha256"], old["size"])])], label="sm120.1"))
    (server.root / "pypi" / "sglang").mkdir(parents=True)
    (server.root / "pypi" / "sglang" / "json").write_text(json.dumps(
        {"info": {"version": "0.0.2"}, "releases": releases, "urls": releases["0.0.2"]}))
    monkeypatch.setenv("SGLANG_BLACKWELL_PATCHES", str(series_dir.parent.parent))
    monkeypatch.setenv("SGLANG_BLACKWELL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("SGLANG_BLACKWELL_PYPI_URL", server.url)
    return server


def test_report_names_each_patch_verdict(pypi, capsys):
    rc = main(["check", "--upstream", "latest"])
    out = capsys.readouterr().out
    assert rc == 1, out  # drift
    assert "sglang 0.0.2 (newer than the pin); base 1.0.0 pins 0.0.1" in out  # not the 0.0.3rc1 pre-release
    verdicts = {ln.split()[-2]: ln.split("  ")[1].strip() for ln in out.splitlines() if "[P" in ln}
    assert verdicts == {"0001-a-patch-line-6.patch": "applies", "0002-b-patch-line-6.patch": "needs refresh",
                        "0003-c-patch-line-6.patch": "conflicts", "0004-d-patch-line-6.patch": "already upstream"}
    assert "python/sglang/b.py hunk #1 @@ -4,7 +4,7 @@ b_line_2 = 2: context now at line 7 (+3 lines)" in out
    assert "python/sglang/c.py hunk #1" in out and "expected 'c_line_5 = 5', found 'c_line_5 = 55'" in out
    assert "summary: 1 applies, 1 needs refresh, 1 conflicts, 1 already upstream" in out

    rc = main(["check", "--upstream", "latest", "--json"])
    rep = json.loads(capsys.readouterr().out)
    assert rc == 1 and rep["drift"] and rep["counts"]["conflicts"] == 1
    assert rep["packages"][0]["wheel"] == "sglang-0.0.2-py3-none-any.whl"


def test_pinned_release_has_no_drift_and_the_wheel_is_cached(pypi, capsys):
    assert main(["check", "--upstream", "sglang==0.0.1"]) == 0
    assert "summary: 4 applies (no drift)" in capsys.readouterr().out
    hits = len([h for h in pypi.hits if h.endswith(".whl")])
    assert main(["check", "--upstream", "sglang==0.0.1"]) == 0
    assert len([h for h in pypi.hits if h.endswith(".whl")]) == hits, "second run must use the cache"


def test_unreachable_index_is_a_clear_error(pypi, monkeypatch, capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("SGLANG_BLACKWELL_PYPI_URL", f"http://127.0.0.1:{port}")
    rc = main(["check", "--upstream", "latest"])
    err = capsys.readouterr().err
    assert rc == 2 and "cannot read PyPI's JSON API" in err and f"127.0.0.1:{port}/pypi/sglang/json" in err


def test_spec_and_release_errors(pypi):
    assert parse_upstream("latest") == {}
    assert parse_upstream("sglang==0.5.24, Flashinfer_Python==0.7.4") == {"sglang": "0.5.24",
                                                                         "flashinfer-python": "0.7.4"}
    with pytest.raises(UserError, match="expected 'latest' or NAME==VERSION"):
        parse_upstream("sglang>=1")
    with pytest.raises(UserError, match="has no release '9.9'"):
        release("sglang", "9.9")
    from sglang_blackwell.patchset.bases import get_base
    from sglang_blackwell.patchset.drift import drift_report

    with pytest.raises(UserError, match="does not patch"):
        drift_report(get_base("1.0.0"), "vllm==1.0")


def test_partly_upstream_and_wheel_choice(pypi, tmp_path):
    """A patch whose change upstream took in one file but not another: 'partly upstream'; the chosen wheel is
    the one for this Python when several exist."""
    series = load_series(tmp_path / "patches" / "1.0.0" / "sglang", "1.0.0", "sglang")
    files = {f"python/sglang/{n}.py": data for n, data in _new_release().items()}
    verdicts = [v.verdict for v in classify_series(series.patches, files)]
    assert verdicts == ["applies", "needs refresh", "conflicts", "already upstream"]

    from sglang_blackwell.patchset.bases import Artifact
    from sglang_blackwell.patchset.drift import Release, classify

    two = series.patches[2]  # c.py: make it a two-file patch by pairing with d's already-upstream hunk
    two.files = two.files + series.patches[3].files
    v = classify(two, dict(files))
    assert v.verdict == "partly upstream", v
    arts = [Artifact(f"sglang-1.0-cp{x}-cp{x}-manylinux_2_34_x86_64.whl", "u", "0" * 64) for x in (311, 312)]
    assert pick_wheel(Release("sglang", "1.0", arts), python="3.12").filename.startswith("sglang-1.0-cp312")
    with pytest.raises(UserError, match="no x86_64 or pure-Python wheel"):
        pick_wheel(Release("sglang", "1.0", [Artifact("sglang-1.0-cp312-cp312-macosx_14_0_arm64.whl", "u",
                                                      "0" * 64)]))


@pytest.mark.parametrize("rc", [0, 1, 2])
def test_ci_runs_the_report_without_failing_on_drift_or_network(tmp_path, rc):
    """.ci/run's drift step, run by bash -euo pipefail with a stand-in CLI exiting 0 (no drift), 1 (drift) or 2
    (PyPI unreachable): the report is printed and the step succeeds every time."""
    script = (Path(__file__).resolve().parents[3] / ".ci" / "run").read_text()
    step = script[script.index("# Drift report:"):]
    assert "check --upstream latest" in step
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    stub = tmp_path / ".venv" / "bin" / "sglang-blackwell"
    stub.write_text(f"#!/bin/bash\necho \"report for $*\"\nexit {rc}\n")
    stub.chmod(0o755)
    r = subprocess.run(["bash", "-c", "set -euo pipefail\n" + step], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "report for check --upstream latest" in r.stdout
    assert ("no drift" in r.stdout) == (rc == 0) and (f"exit {rc}" in r.stdout) == (rc != 0)
