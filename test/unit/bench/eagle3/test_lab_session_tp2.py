"""The TP=2 lab session's scripts on a CPU machine (benchmark/lab/session_tp2.sh and its helpers): the carry check
that runs here before the session (real git, real files), the packing of traces into parts that come back (real
tar and split, put back together), the session script's own dry paths, and shellcheck on all of them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

TEST_ROOT = Path(__file__).resolve().parents[3]
if str(TEST_ROOT) not in sys.path:
    sys.path.insert(0, str(TEST_ROOT))

from support.tools import SHELLCHECK, ToolUnavailable, pip_tool  # noqa: E402

ROOT = TEST_ROOT.parent
LAB = ROOT / "benchmark" / "lab"
SCRIPTS = ["session_tp2.sh", "pack_parts.sh", "gpu_suite.sh", "serve_check.sh", "bench_eagle3.sh"]
GRID_SCRIPTS = ["session_grid.sh", "first_burst_probe.sh", "session_long.sh"]  # the TP=1 grid sessions
# the other scripts that source lib.sh (its log, die, usage, check_deadline, end_leftover_session)
LIB_USERS = ["userpath.sh", "session_tp1.sh", "session.sh"]  # session.sh: parsed only
MIB = 2**20


def run(*cmd: str, cwd: Path = ROOT, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), cwd=cwd, capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


def fake_bundle(d: Path, sizes: dict[str, int], *, bundle_id: str = "ab" * 32, jit: bool = True,
                chunks: list[str] | None = None) -> list[Path]:
    files = [{"path": f"wheels/w-{c}.whl", "kind": "dependency", "chunk": c, "size": n} for c, n in sizes.items()]
    if jit:
        files += [{"path": f"aot/{m}/{m}.so", "kind": "jit", "module": m, "archs": ["9.0a"], "chunk": "c3",
                   "size": 10} for m in ("trtllm_comm", "norm")]
    out = []
    for c, n in sizes.items():
        (d / c / "wheels").mkdir(parents=True)
        (d / c / "wheels" / f"w-{c}.whl").write_bytes(b"\0" * n)
        m = {"schema": "sglang-blackwell/bundle/1", "bundle_id": bundle_id, "chunk": c,
             "chunks": chunks or list(sizes), "base": "0.5.14", "python_tag": "cp312", "files": files}
        (d / c / "manifest.json").write_text(json.dumps(m))
        out.append(d / c)
    return out


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    r = tmp_path / "repo"
    r.mkdir()
    run("git", "init", "-q", str(r))
    (r / "tracked.bin").write_bytes(b"t" * (3 * MIB))
    (r / ".gitignore").write_text("ignored/\n")
    (r / "ignored").mkdir()
    (r / "ignored" / "big.bin").write_bytes(b"i" * (20 * MIB))  # ignored: does not travel
    (r / "untracked.bin").write_bytes(b"u" * MIB)  # untracked, not ignored: travels
    run("git", "-C", str(r), "add", "tracked.bin", ".gitignore")
    return r


def carry_check(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return run(sys.executable, str(LAB / "carry_check.py"), "--repo", str(repo), *args)


def test_carry_check_counts_the_tree_that_travels_and_passes_a_bundle_that_fits(tmp_path, repo):
    chunks = fake_bundle(tmp_path / "b", {"c1": 44 * MIB, "c2": 44 * MIB, "c3": 30 * MIB})
    r = carry_check(repo, "--jit", "9.0a:trtllm_comm,norm", *map(str, chunks))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "the tree that travels with every call: 4.00 MiB" in r.stdout  # 3 tracked + 1 untracked, not ignored
    assert "with the tree  48.00 MiB of 64 (ok" in r.stdout and "norm (c3), trtllm_comm (c3)" in r.stdout


@pytest.mark.parametrize(("case", "why"), [
    ("too big", "over the 64 MiB a call carries"),
    ("missing chunk", "the bundle has chunks ['c1', 'c2', 'c3'], given ['c1', 'c2']"),
    ("no jit", "no prebuilt FlashInfer module(s) norm, trtllm_comm for 9.0a"),
])
def test_carry_check_names_what_would_not_work(tmp_path, repo, case, why):
    sizes = {"c1": 61 * MIB if case == "too big" else MIB, "c2": MIB, "c3": MIB}
    if case == "missing chunk":
        sizes.pop("c3")
    chunks = fake_bundle(tmp_path / "b", sizes, jit=case != "no jit",
                         chunks=["c1", "c2", "c3"] if case == "missing chunk" else None)
    r = carry_check(repo, "--jit", "9.0a:trtllm_comm,norm", *map(str, chunks))
    assert r.returncode == 1 and why in r.stdout, r.stdout


def test_carry_check_keeps_a_reserve_the_device_tool_counts_beyond_the_bytes(tmp_path, repo):
    """2026-12-08: the device tool refused 63.91 MiB by this count; a chunk must leave --reserve-mib (1) free."""
    chunks = fake_bundle(tmp_path / "b", {"c1": 59 * MIB + MIB // 2, "c2": MIB}, jit=False)  # + 4 MiB tree: 63.5
    r = carry_check(repo, *map(str, chunks))
    assert r.returncode == 1 and "less the 1.00 MiB reserve" in r.stdout, r.stdout
    r = carry_check(repo, "--reserve-mib", "0.25", *map(str, chunks))
    assert r.returncode == 0, r.stdout
    r = carry_check(repo, "--reserve-mib", "64", *map(str, chunks))
    assert r.returncode == 2 and "--reserve-mib 64.0" in r.stderr


def test_carry_check_refuses_chunks_of_two_bundles_and_bad_input(tmp_path, repo):
    a = fake_bundle(tmp_path / "a", {"c1": 10, "c2": 10}, jit=False)
    b = fake_bundle(tmp_path / "b", {"c1": 10, "c2": 10}, bundle_id="cd" * 32, jit=False)
    r = carry_check(repo, str(a[0]), str(b[1]))
    assert r.returncode == 1 and "chunks of different bundles" in r.stdout
    r = carry_check(repo, str(tmp_path / "nowhere"))
    assert r.returncode == 2 and "not a bundle chunk's manifest" in r.stderr
    r = carry_check(repo, "--jit", "9.0a", str(a[0]))
    assert r.returncode == 2 and "expected ARCH:MODULE" in r.stderr


def test_pack_parts_splits_rank0_first_and_puts_back_together(tmp_path):
    src = tmp_path / "traces" / "bench-x_logs"
    src.mkdir(parents=True)
    data = {n: os.urandom(700_000) for n in ("r1-eagle3.trace.json.gz", "r1-eagle3.TP-1.trace.json.gz",
                                             "r1-eagle3_fusion.trace.json.gz", "r1-eagle3_fusion.TP-1.trace.json.gz")}
    for n, b in data.items():
        (src / n).write_bytes(b)
    out = tmp_path / "out"
    out.mkdir()
    r = run("bash", str(LAB / "pack_parts.sh"), str(tmp_path / "traces"), str(out / "stepD-traces"), "8",
            env={"PART_MIB": "1"})
    assert r.returncode == 0 and "4 files" in r.stdout, r.stdout + r.stderr
    parts = sorted(out.glob("stepD-traces.tar.part*"))
    assert len(parts) == 3 and all(p.stat().st_size <= MIB for p in parts)
    whole = tmp_path / "whole.tar"
    whole.write_bytes(b"".join(p.read_bytes() for p in parts))
    with tarfile.open(whole) as t:
        names = [Path(m).name for m in t.getnames() if m.endswith(".gz")]
        assert names[:2] == ["r1-eagle3.trace.json.gz", "r1-eagle3_fusion.trace.json.gz"]  # rank 0 first
        assert {n: t.extractfile(m).read() for m in t.getmembers() if m.isfile()
                for n in [Path(m.name).name]} == data
    # too many parts: the first ones stay (rank 0's traces), the rest is named as left behind
    r = run("bash", str(LAB / "pack_parts.sh"), str(tmp_path / "traces"), str(out / "cut"), "2",
            env={"PART_MIB": "1"})
    assert r.returncode == 0 and "kept the first 2 of 3 parts" in r.stdout
    assert len(list(out.glob("cut.tar.part*"))) == 2
    r = run("bash", str(LAB / "pack_parts.sh"), str(tmp_path / "none"), str(out / "x"))
    assert r.returncode == 0 and "nothing to pack" in r.stdout and not list(out.glob("x.tar.part*"))
    r = run("bash", str(LAB / "pack_parts.sh"), str(tmp_path / "traces"), str(out / "x"), "0")
    assert r.returncode == 2 and "MAXPARTS=0" in r.stdout


def test_session_script_help_and_check(tmp_path):
    r = run("bash", str(LAB / "session_tp2.sh"))
    assert r.returncode == 2 and "nvidia-h200-x2" in r.stdout and "A  carry .whl/c1" in r.stdout
    chunks = fake_bundle(tmp_path / "bundle", {"c1": MIB, "c2": MIB, "c3": MIB})
    r = run("bash", str(LAB / "session_tp2.sh"), "check", env={"BUNDLE": str(chunks[0].parent),
                                                                 "PYTHONPATH": str(ROOT / "python")})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "lab-kimi61-tp2, TP=2, arms ['baseline', 'eagle3', 'eagle3+fusion']" in r.stdout
    r = run("bash", str(LAB / "session_tp2.sh"), "check", env={"BUNDLE": str(tmp_path / "no-bundle"),
                                                                 "PYTHONPATH": str(ROOT / "python")})
    assert r.returncode == 1


@pytest.mark.parametrize("script", SCRIPTS + GRID_SCRIPTS + LIB_USERS + ["lib.sh"])
def test_scripts_parse(script):
    assert run("bash", "-n", str(LAB / script)).returncode == 0


@pytest.mark.network
def test_session_scripts_are_shellcheck_clean():
    try:
        exe = pip_tool(*SHELLCHECK)
    except ToolUnavailable as e:
        pytest.skip(str(e))
    checked = [*SCRIPTS[:4], "lib.sh", *GRID_SCRIPTS, *LIB_USERS[:2]]
    r = run(str(exe), "--severity=style", *(str(LAB / s) for s in checked))
    assert (r.returncode, r.stdout + r.stderr) == (0, "")
