"""The hostile-input suite, data-loss half: commands that deleted, overwrote or mislabelled what was not theirs, or
left a state no later run recovers from. Each case runs the real command (the CLI, or `make` on a copy of this
tree) in a fresh process and is judged by support/hostile.py (clean / traceback / wrong / damaged).

  sweep      `build` with a warm cache swept <cache>/.partial/ through a symbolic link (to a bigger disk) and
             deleted what no download of ours made there: files older than a day, fresh files named x.<digits>.ext
             (read as the pid of a dead download), links. Only our own dead download directories may go.
  pack       `qualify --pack`: a second run packing to the same file, a link planted at the temporary name, a
             directory or a link given as the pack; the run that says "send this file back" must have that file.
  crosscheck `bench eagle3 --deadline-s` did not bound the grid's sglang.bench_serving subprocess.
  make       a Ctrl-C during `make`'s pip upgrade left the venv's pip half-upgraded, and every later `make` failed
             with an ImportError."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
from bench_fakes import alive, write_grid_config

from support import hostile
from support.hostile import Case, assert_clean

from . import core_world as w
from .core_world import case, world

DEAD = 99999999  # above any pid_max (PID_MAX_LIMIT is 4194304): a pid no process can have
OURS = f"{w.WHEEL}.{DEAD}.abcd_123"  # named exactly as fetch names its download directories
PARTIAL = "cache/.partial"
BUILD = ["build", "--out", "{tmp}/dist"]
OLD = time.time() - 3 * 86400


def write(rel: str, data: str = "mine\n", *, old: bool = False):
    def step(tmp: Path) -> None:
        p = tmp / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(data)
        if old:
            os.utime(p, (OLD, OLD))
    return step


def old_dir(rel: str):
    def step(tmp: Path) -> None:
        os.utime(tmp / rel, (OLD, OLD))
    return step


def link(rel: str, to: str):
    def step(tmp: Path) -> None:
        p = tmp / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.symlink_to(tmp / to)
    return step


def a_dead_download(tmp: Path) -> None:
    """What a killed download of ours leaves: <file>.<pid>.<random>/ with request.txt and got/<half a wheel>."""
    d = tmp / PARTIAL / f"{w.WHEEL}.{DEAD}.x1y2z3"
    (d / "got").mkdir(parents=True)
    (d / "got" / w.WHEEL).write_bytes(b"half a wheel")
    (d / "request.txt").write_text("sglang==0.0.1 --hash=sha256:00\n")


def dead_download_swept(tmp: Path, r) -> str | None:
    left = tmp / PARTIAL / f"{w.WHEEL}.{DEAD}.x1y2z3"
    return f"the dead download {left} was left" if left.exists() else None


def uncache(tmp: Path) -> None:
    w.cached_wheel(tmp).unlink()


# ---- sweep: <cache>/.partial --------------------------------------------------------------------------------
BIGDISK = ("bigdisk/old.iso", f"bigdisk/notes.{DEAD}.txt", f"bigdisk/{OURS}/got/{w.WHEEL}")
on_bigdisk = (write(BIGDISK[0], "a disk image\n", old=True), write(BIGDISK[1]), write(BIGDISK[2], "not ours\n"),
              link(PARTIAL, "bigdisk"))
SWEEP = [
    case("partial-is-a-link-warm-build", "sweep", BUILD, rc=0, setup=world(*on_bigdisk),
         watch=("bigdisk", PARTIAL)),
    case("partial-is-a-link-cold-download-refused", "sweep", BUILD, setup=world(uncache, *on_bigdisk),
         env={"SGLANG_BLACKWELL_OFFLINE": "0"}, names=("{tmp}/cache/.partial", "symbolic link"),
         watch=("bigdisk", PARTIAL, "cache/artifacts")),
    case("partial-fresh-file-named-like-a-pid", "sweep", BUILD, rc=0,
         setup=world(write(f"{PARTIAL}/x.{DEAD}.ext"), a_dead_download),
         watch=(f"{PARTIAL}/x.{DEAD}.ext",), after=dead_download_swept),
    case("partial-old-files-and-folders-of-others", "sweep", BUILD, rc=0,
         setup=world(write(f"{PARTIAL}/notes.txt", old=True), write(f"{PARTIAL}/photos.{DEAD}.2024/a.jpg"),
                     old_dir(f"{PARTIAL}/photos.{DEAD}.2024"), write(f"{PARTIAL}/{OURS}/got/mine.bin"),
                     write(f"{PARTIAL}/{OURS}/diary.txt"), old_dir(f"{PARTIAL}/{OURS}")),
         watch=(f"{PARTIAL}/notes.txt", f"{PARTIAL}/photos.{DEAD}.2024", f"{PARTIAL}/{OURS}")),
    case("partial-link-named-like-a-download", "sweep", BUILD, rc=0,
         setup=world(write("outside/keep.txt"), link(f"{PARTIAL}/{OURS}", "outside"),
                     link(f"{PARTIAL}/y.{DEAD}.ext", "outside/keep.txt")),
         watch=("outside", f"{PARTIAL}/{OURS}", f"{PARTIAL}/y.{DEAD}.ext")),
    # the sweep still does its job: a dead download of ours goes, a live one (this pid... the pytest process) stays
    case("partial-dead-download-swept-live-kept", "sweep", BUILD, rc=0,
         setup=world(a_dead_download, write(f"{PARTIAL}/{w.WHEEL}.{os.getpid()}.live_1/request.txt")),
         watch=(f"{PARTIAL}/{w.WHEEL}.{os.getpid()}.live_1",), after=dead_download_swept),
]


@pytest.mark.parametrize("c", SWEEP, ids=lambda c: c.id)
def test_sweep(c: Case, tmp_path: Path) -> None:
    assert_clean(c, tmp_path)


# ---- pack: qualify --pack -----------------------------------------------------------------------------------
QUALIFY = ["qualify", "--skip", "gpu-tests,allreduce,eagle3", "--quiet", "--out", "{tmp}/q"]
PACK = "{tmp}/q.tar.gz"


def pack_holds(name: str):
    """after: the pack is a whole tarball of the run's folder `name` (every member read to its end)."""
    def after(tmp: Path, r) -> str | None:
        p = tmp / "q.tar.gz"
        if not p.is_file() or p.is_symlink():
            return f"{p} is not a file"
        try:
            with tarfile.open(p, "r:gz") as tf:
                names = []
                for ti in tf:
                    names.append(ti.name)
                    if ti.isfile():
                        tf.extractfile(ti).read()
        except (OSError, tarfile.TarError, EOFError) as e:
            return f"{p} is not a whole tarball: {e}"
        if f"{name}/qualify.json" not in names or any(n.split("/")[0] != name for n in names):
            return f"{p} does not hold the folder {name}/ alone: {sorted(names)[:6]}"
        return None
    return after


def nothing_run(tmp: Path, r) -> str | None:
    return "the steps ran (--out was made) although the pack was bad input" if (tmp / "q").exists() else None


TWO_RUNS = r'''
import json, os, signal, subprocess, sys, time
tmp = sys.argv[1]


def start(n):
    return subprocess.Popen([sys.executable, "-m", "sglang_blackwell.cli", "qualify", "--skip",
                             "gpu-tests,allreduce,eagle3", "--quiet", "--out", f"{tmp}/q{n}", "--pack",
                             f"{tmp}/q.tar.gz"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def begun(n, p):  # past its plan: its --out exists
    deadline = time.monotonic() + 60
    while not os.path.isdir(f"{tmp}/q{n}") and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)


a = start(1)
begun(1, a)
os.kill(a.pid, signal.SIGSTOP)  # the first run waits until the second has begun too: both run at once
b = start(2)
begun(2, b)
os.kill(a.pid, signal.SIGCONT)
res = {}
for n, p in (("q1", a), ("q2", b)):
    out, err = p.communicate(timeout=300)
    res[n] = {"rc": p.returncode, "out": out, "err": err}
with open(f"{tmp}/two.json", "w") as f:
    json.dump(res, f)
'''


def two_runs_judged(tmp: Path, r) -> str | None:
    """Exactly one run says "send this file back", and the pack is its folder, whole; the other says in one line
    that it did not write the pack (exit 2)."""
    res = json.loads((tmp / "two.json").read_text())
    for n, x in res.items():
        if "Traceback (most recent call last)" in x["err"] + x["out"] or hostile.NET_MARK in x["err"]:
            return f"run {n}: a traceback: {x['err'].strip()[-300:]}"
    said = [n for n, x in res.items() if "send this file back" in x["out"]]
    if len(said) != 1:
        return f"{len(said)} runs said 'send this file back' about one file: {said}"
    (other,) = set(res) - set(said)
    x = res[other]
    errors = [ln for ln in x["err"].splitlines() if ln.startswith("sglang-blackwell qualify: error: ")]
    if x["rc"] != 2 or len(errors) != 1 or f"--pack {tmp}/q.tar.gz" not in errors[0]:
        return f"run {other}: exit {x['rc']}, expected 2 and one error line naming --pack: {x['err'][-400:]}"
    return pack_holds(said[0])(tmp, r)


def two_runs_setup(tmp: Path) -> None:
    (tmp / "two.py").write_text(TWO_RUNS)


PACKS = [
    # rc 1: the one step run, doctor, fails on this CPU box (not ready: no GPU); the pack is still written
    case("pack-temp-name-is-a-planted-link", "pack", [*QUALIFY, "--pack", PACK], rc=1,
         setup=lambda tmp: (write("outside.txt", "precious\n")(tmp), link(".q.tar.gz.tmp", "outside.txt")(tmp)),
         watch=("outside.txt", ".q.tar.gz.tmp"), after=pack_holds("q")),
    case("pack-is-a-directory", "pack", [*QUALIFY, "--pack", PACK], setup=write("q.tar.gz/keep.txt"),
         names=("--pack", PACK), watch=("q.tar.gz",), after=nothing_run),
    case("pack-is-a-link", "pack", [*QUALIFY, "--pack", PACK],
         setup=lambda tmp: (write("outside.txt", "precious\n")(tmp), link("q.tar.gz", "outside.txt")(tmp)),
         names=("--pack", PACK, "symbolic link"), watch=("outside.txt", "q.tar.gz"), after=nothing_run),
    Case("two-runs-one-pack", "pack", ["{tmp}"], rc=0, cli=(sys.executable, "{tmp}/two.py"),
         setup=two_runs_setup, after=two_runs_judged, timeout=300),
]


@pytest.mark.parametrize("c", PACKS, ids=lambda c: c.id)
def test_pack(c: Case, tmp_path: Path) -> None:
    assert_clean(c, tmp_path)


# ---- crosscheck: bench eagle3 --deadline-s bounds sglang.bench_serving ----------------------------------------
# The run's --deadline-s, all of which this case waits out (the stand-in hangs until the deadline kills it). Before
# the cross-check starts, the arm run must be done well inside it: launching the fake server (healthy after ~0.5 s)
# and its one cell (~0.5 s) take ~1 s of the run on an idle 2-core box; 6 s leaves that part 5 s on a loaded one
# (12 s before: 6 s more of wall time for the same bound)
DEADLINE_S = 6
HANG = """#!/bin/sh
echo $$ > {tmp}/xc.pid
sleep 600 &
echo $! > {tmp}/xc-child.pid
wait
"""


def hanging_crosscheck(tmp: Path) -> None:
    (tmp / "hangpy").write_text(HANG.format(tmp=tmp))
    (tmp / "hangpy").chmod(0o755)
    write_grid_config(tmp, contexts="[16]", concurrency="[1]", min_ratio="{ 16 = { 1 = 1.2 } }",
                      extra=f'[crosscheck]\ncells = [[16, 1]]\nnum_prompts = 2\npython = "{tmp}/hangpy"\n'
                            "timeout_s = 900")


def crosscheck_bounded(tmp: Path, r) -> str | None:
    """The cross-check failed with the deadline as its one-line reason, the arm did not, nothing of it lives."""
    (receipt,) = (tmp / "out").glob("bench-eagle3_fakegrid_*Z.json")
    data = json.loads(receipt.read_text())
    (x,) = data["crosscheck"]
    if not x["error"] or "--deadline-s" not in x["error"] or "\n" in x["error"]:
        return f"the cross-check's record says {x['error']!r}, not the deadline in one line"
    runs = [ln for ln in next((tmp / "out").glob("*_runs.jsonl")).read_text().splitlines() if ln]
    if any(json.loads(ln)["run"].get("error") for ln in runs):
        return "the arm run failed: " + "; ".join(str(json.loads(ln)["run"]["error"]) for ln in runs)
    left = [int((tmp / f).read_text()) for f in ("xc.pid", "xc-child.pid") if (tmp / f).exists()]
    if len(left) != 2:
        return "the stand-in bench_serving never ran"
    living = [p for p in left if alive(p)]
    return f"processes of the cross-check still alive: {living}" if living else None


def kill_stand_in(tmp: Path) -> None:
    """What a run that overran its case left (the code before the bound): the stand-in's pids, and the processes
    whose command line names this case's directory (its fake server), each by its pid."""
    pids = [int((tmp / f).read_text()) for f in ("xc.pid", "xc-child.pid") if (tmp / f).exists()]
    for d in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if d.name.isdigit() and str(tmp).encode() in (d / "cmdline").read_bytes():
                pids.append(int(d.name))
    for pid in pids:
        if alive(pid):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


CROSSCHECK = [
    Case("crosscheck-bounded-by-deadline", "crosscheck",
         ["bench", "eagle3", "--config", "{tmp}/fakegrid.toml", "--out", "{tmp}/out", "--no-plots", "--arms",
          "baseline", "--deadline-s", str(DEADLINE_S)], rc=1, setup=hanging_crosscheck, after=crosscheck_bounded,
         timeout=DEADLINE_S + 60),
]


@pytest.mark.parametrize("c", CROSSCHECK, ids=lambda c: c.id)
def test_crosscheck(c: Case, tmp_path: Path) -> None:
    try:
        assert_clean(c, tmp_path)
    finally:
        kill_stand_in(tmp_path)


# ---- make: a Ctrl-C during the venv's pip upgrade --------------------------------------------------------------
# The interrupted upgrade, made exactly: the venv's own (ensurepip's) pip upgrades itself from the index, and a
# KeyboardInterrupt (what Ctrl-C raises) comes part way through writing the new files, as in 3 of 5 real Ctrl-Cs
# (pip rolls back on an error, not on an interrupt: its old files are gone, a few new ones written)
INTERRUPTED_UPGRADE = r'''
import runpy, shutil, sys
copy, n = shutil.copyfileobj, [0]


def interrupted(src, dst, *a, **k):
    if "site-packages" in str(getattr(dst, "name", "")):
        n[0] += 1
        if n[0] == 150:
            raise KeyboardInterrupt
    return copy(src, dst, *a, **k)


shutil.copyfileobj = interrupted
sys.argv = ["pip", "install", "-q", "--disable-pip-version-check", "--upgrade", "pip"]
runpy.run_module("pip", run_name="__main__", alter_sys=True)
'''
TREE = ("Makefile", "pyproject.toml", "README.md", "python", "patches")


def base_python() -> str:
    return getattr(sys, "_base_executable", None) or sys.executable


def broken_venv(tmp: Path) -> None:
    """This tree's make inputs in tmp/repo, the core world for its build, and repo/.venv as a Ctrl-C during
    `make`'s pip upgrade leaves it (checked: its pip fails after it)."""
    w.make(tmp)
    repo = tmp / "repo"
    for name in TREE:
        src = hostile.REPO / name
        if src.is_dir():
            shutil.copytree(src, repo / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            repo.mkdir(exist_ok=True)
            shutil.copy2(src, repo / name)
    env = hostile.clean_env(tmp, {})
    subprocess.run([base_python(), "-m", "venv", str(repo / ".venv")], check=True, env=env, timeout=300)
    py = str(repo / ".venv" / "bin" / "python")
    r = subprocess.run([py, "-c", INTERRUPTED_UPGRADE], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode != 0, f"the pip upgrade was not interrupted: {r.stdout}{r.stderr}"
    again = subprocess.run([py, "-m", "pip", "install", "-q", "--upgrade", "pip"], capture_output=True, text=True,
                           env=env, timeout=300)
    assert again.returncode != 0, "the interrupted upgrade left a working pip: nothing to recover from"


def made(tmp: Path, r) -> str | None:
    wheels = list((tmp / "repo" / "dist").glob("sglang-*.whl"))
    if not wheels:
        return "make built no wheel"
    if ".venv: its pip is broken" not in r.stdout + r.stderr:
        return "make did not say why it made .venv again"
    return None


MAKE = [
    Case("make-after-ctrl-c-in-pip-upgrade", "make", [], rc=0, cli=("make", "-C", "{tmp}/repo", f"PY={base_python()}"),
         env=dict(w.ENV), setup=broken_venv, after=made, timeout=900),
]


@pytest.mark.network  # the venv's pip comes from the index (PyPI or the machine's mirror), as in `make`
@pytest.mark.slow
@pytest.mark.skipif(shutil.which("make") is None, reason="no make here")
@pytest.mark.parametrize("c", MAKE, ids=lambda c: c.id)
def test_make(c: Case, tmp_path: Path) -> None:
    assert_clean(c, tmp_path)
