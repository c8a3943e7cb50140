"""The hostile-input suite, issue 32 class 7: children outlive us. A command of ours that is SIGKILLed (no
`finally`, no signal handler of ours runs) must take every process it started with it, grandchildren included,
and the next run of the same job must sweep what the killed one left on disk, by the ownership rules of
leftovers.py: only a name of ours, of this user, not a link, whose pid is dead.

  setup   `bench setup`: its step (`make` in the clone, a session of its own) and a grandchild that made a
          session of its own (setsid) lived on, and so did the clone in the temp folder.
  lock    `lock`: both pip processes (pip --python runs a second pip) lived on, waiting on the index; the work
          folder (the built wheels) stayed in the temp folder.
  pack    `qualify --pack`: the half-written pack stayed next to the pack's file, under a name nothing swept.

Each case really starts the CLI (a session of its own, so that its session id finds what stayed in it), waits
until the stand-in for the slow part has begun (a step that sleeps, an index that never answers, a pack of 32 MB
of noise), SIGKILLs it, and polls: within GONE_S nothing it started may be alive. Then it plants what is not
ours to sweep (a live run's folder, another user's, a link, a name of another kind) and runs the job again."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from support import hostile
from support.wheel_world import ORIGINAL, make_wheel

from . import core_world as w
from . import index_world as iw
from .index_world import Index, index  # noqa: F401 - the fixture

DEAD = 99999999  # above any pid_max (PID_MAX_LIMIT is 4194304): a pid no process can have
# The bound on "nothing of it is alive": our end closes the watcher's pipe at once and the watcher then reads /proc
# a few times and SIGKILLs (milliseconds); its backstop (our pid's parent changed) ticks every second. 15 s is
# that tick and a loaded 2-core CI box's scheduling many times over; the poll returns as soon as all are gone.
GONE_S = 15.0
BEGUN_S = 120.0  # the stand-in's slow part has begun (the CLI's start, a build, pip's start on a busy box)
PY = f"{sys.version_info.major}.{sys.version_info.minor}"
NOBODY = 65534


# ---- processes -------------------------------------------------------------------------------------------------

def _stat(pid: int) -> tuple[str, int, int, int] | None:
    """(state, ppid, pgrp, session) of a process, None when it is gone."""
    try:
        s = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    f = s[s.rfind(")") + 2:].split()
    return f[0], int(f[1]), int(f[2]), int(f[3])


def _table() -> dict[int, tuple[str, int, int, int]]:
    out = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            st = _stat(int(d.name))
            if st is not None and st[0] not in ("Z", "X"):
                out[int(d.name)] = st
    return out


def descendants(pid: int) -> dict[int, tuple[str, int, int, int]]:
    """The live processes `pid` started, and those they started, now (by parent pid)."""
    tab = _table()
    found: dict[int, tuple[str, int, int, int]] = {}
    todo = [pid]
    while todo:
        p = todo.pop()
        for c, st in tab.items():
            if st[1] == p and c not in found:
                found[c] = st
                todo.append(c)
    return found


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def living(pids: set[int], sids: set[int]) -> list[str]:
    """What is still alive of `pids`, or of any session or process group in `sids`."""
    return [f"{p} ({cmdline(p)[:80]})" for p, st in _table().items() if p in pids or st[2] in sids or st[3] in sids]


def poll(what, bound_s: float, step_s: float = 0.05):
    """what() until it is truthy or bound_s passed; its last value."""
    deadline = time.monotonic() + bound_s
    while True:
        got = what()
        if got or time.monotonic() > deadline:
            return got
        time.sleep(step_s)


@contextlib.contextmanager
def cli(argv: list[str], tmp: Path, env: dict[str, str], name: str) -> Iterator[subprocess.Popen]:
    """The real CLI in a fresh process, the leader of a session of its own (its id names what stays in it); on the
    way out, whatever of it is still alive is SIGKILLed by pid (a failing run must not leave the box busy)."""
    log = open(tmp / f"{name}.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([sys.executable, "-m", "sglang_blackwell.cli", *argv], cwd=tmp, stdout=log,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=hostile.clean_env(tmp, env),
                            start_new_session=True)
    proc.seen = set()  # type: ignore[attr-defined] - what kill_and_judge saw it start
    try:
        yield proc
    finally:
        seen = proc.seen | set(descendants(proc.pid))  # type: ignore[attr-defined]
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        sids = {proc.pid} | {x for p in seen if (st := _stat(p)) for x in (st[2], st[3])}
        for p in seen | {p for p, st in _table().items() if st[2] in sids or st[3] in sids}:
            with contextlib.suppress(OSError):
                os.kill(p, signal.SIGKILL)
        log.close()


def kill_and_judge(proc: subprocess.Popen, started: dict[int, tuple[str, int, int, int]]) -> str | None:
    """SIGKILL the CLI; None once nothing it started (and no process of their sessions and groups, nor of its own
    session) is alive, within GONE_S; else what lives."""
    sids = {proc.pid} | {x for st in started.values() for x in (st[2], st[3])}
    proc.seen |= set(started)  # type: ignore[attr-defined]
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    left = poll(lambda: not living(set(started), sids), GONE_S) or living(set(started), sids)
    return None if left is True else f"alive {GONE_S:g} s after the SIGKILL: {left}"


def the_log(tmp: Path, name: str) -> str:
    return (tmp / f"{name}.log").read_text(errors="replace")[-3000:]


# ---- what is not ours to sweep -----------------------------------------------------------------------------------

def plant_not_ours(folder: Path, prefix: str, suffix: str, kind: str) -> dict[str, str]:
    """Beside a killed run's leftover: a live run's (this pytest's pid), another user's (root only: chown), a
    link to a folder of someone's, an entry of the other kind; each named exactly like ours. Their digests."""
    folder.mkdir(parents=True, exist_ok=True)
    outside = folder.parent / "outside"
    outside.mkdir(exist_ok=True)
    (outside / "keep.txt").write_text("precious\n")
    planted = []

    def make(name: str, as_kind: str) -> Path:
        p = folder / f"{prefix}{name}{suffix}"
        if as_kind == "dir":
            p.mkdir()
            (p / "work.txt").write_text("a run's work\n")
        else:
            p.write_text("a run's work\n")
        planted.append(p)
        return p

    make(f"{os.getpid()}-live", kind)
    if os.geteuid() == 0:
        os.chown(make(f"{DEAD}-other", kind), NOBODY, NOBODY)
    link = folder / f"{prefix}{DEAD}-link{suffix}"
    link.symlink_to(outside)
    planted += [link, outside]
    make(f"{DEAD}-kind", "file" if kind == "dir" else "dir")
    return {str(p): hostile._digest(p) for p in planted}


def unchanged(planted: dict[str, str]) -> list[str]:
    return [p for p, d in planted.items() if hostile._digest(Path(p)) != d]


# ---- setup: bench setup's step and its setsid grandchild ---------------------------------------------------------

MAKEFILE = """all:
\t@if [ -e {tmp}/hang ]; then setsid sleep 600 & echo $$! > {tmp}/pids/setsid; \\
\t  sleep 600 & echo $$! > {tmp}/pids/child; echo $$$$ > {tmp}/pids/shell; wait; fi
"""


def tiny_repo(tmp: Path) -> Path:
    """A git checkout whose `make` sleeps (and starts a grandchild in a session of its own) while {tmp}/hang
    exists, and is done at once otherwise."""
    repo = tmp / "repo"
    repo.mkdir()
    (repo / "Makefile").write_text(MAKEFILE.format(tmp=tmp))
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo)]
    for args in (["init", "-q"], ["add", "Makefile"], ["commit", "-q", "-m", "tiny"]):
        subprocess.run([*git, *args], check=True, capture_output=True, timeout=60)
    (tmp / "pids").mkdir()
    (tmp / "work").mkdir()
    return repo


SETUP = ["bench", "setup", "--repo", "{tmp}/repo", "--steps", "make", "--workdir", "{tmp}/work", "--out", "{tmp}/out"]
CLONE = "sglang-blackwell-setup-"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_setup_killed_takes_its_step_and_the_next_run_sweeps_the_clone(tmp_path: Path) -> None:
    tiny_repo(tmp_path)
    (tmp_path / "hang").write_text("")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in SETUP]
    with cli(argv, tmp_path, {}, "first") as proc:
        begun = poll(lambda: (tmp_path / "pids" / "shell").exists() and (tmp_path / "pids" / "setsid").exists()
                     or proc.poll() is not None, BEGUN_S)
        assert begun and proc.poll() is None, f"the step never began: {the_log(tmp_path, 'first')}"
        started = descendants(proc.pid)
        grandchild = int((tmp_path / "pids" / "setsid").read_text())
        assert grandchild in started and started[grandchild][3] == grandchild, "the stand-in made no session"
        why = kill_and_judge(proc, started)
    assert why is None, why
    left = sorted((tmp_path / "work").glob(f"{CLONE}*"))
    assert left, "the killed run left no clone: nothing to sweep (the case proves nothing)"
    planted = plant_not_ours(tmp_path / "work", CLONE, "", "dir")
    (tmp_path / "hang").unlink()
    r = subprocess.run([sys.executable, "-m", "sglang_blackwell.cli", *argv], cwd=tmp_path, capture_output=True,
                       text=True, env=hostile.clean_env(tmp_path, {}), timeout=300)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert not [p for p in left if p.exists()], f"the killed run's clone was not swept: {left}"
    assert not unchanged(planted), f"swept or changed what is not ours: {unchanged(planted)}"


# ---- lock: pip --python, and its second pip, waiting on an index that never answers --------------------------------

def hanging_dependency(asked: threading.Event):
    """The pinned sglang wheel requires depa (cache entry, pin and label rewritten to it); the index's page for
    depa is asked for (`asked` set) and never answered, until the index closes."""
    def step(idx: Index, tmp: Path) -> None:
        old = w.cached_wheel(tmp)
        data = old.read_bytes()
        make_wheel(old, "sglang", "0.0.1", {"sglang/__init__.py": b"", "sglang/gate.py": ORIGINAL},
                   requires=["depa"])
        new = old.read_bytes()
        w.edit_toml(tmp, iw.sha256(data), iw.sha256(new))
        w.edit_toml(tmp, f"size = {len(data)}", f"size = {len(new)}")
        w.relock(tmp)

        def hang(h, idx: Index) -> None:
            asked.set()
            iw.silent(h, idx)
        idx.routes["/simple/depa/"] = hang
    return step


LOCK_DIR = "sglang-blackwell-lock-"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_lock_killed_takes_both_pips_and_the_next_run_sweeps_its_folder(index: Index, tmp_path: Path) -> None:  # noqa: F811
    asked = threading.Event()
    iw.world(index, hanging_dependency(asked))(tmp_path)
    temp = tmp_path / "tmpdir"
    temp.mkdir()
    env = iw.env(index, TMPDIR=str(temp), PIP_DEFAULT_TIMEOUT="600")
    argv = ["lock", "--base", w.BASE, "--python-version", PY, "--python", sys.executable, "--index-url",
            f"{index.url}/simple/"]
    with cli(argv, tmp_path, env, "first") as proc:
        assert poll(lambda: asked.is_set() or proc.poll() is not None, BEGUN_S) and proc.poll() is None, \
            f"pip never asked the index: {the_log(tmp_path, 'first')}"
        started = descendants(proc.pid)
        pips = [p for p in started if " pip " in f" {cmdline(p)} " or "/pip" in cmdline(p)]
        assert pips, f"no pip among what lock started: {[cmdline(p) for p in started]}"
        why = kill_and_judge(proc, started)
    assert why is None, why
    left = sorted(temp.glob(f"{LOCK_DIR}*"))
    assert left, "the killed run left no work folder: nothing to sweep (the case proves nothing)"
    planted = plant_not_ours(temp, LOCK_DIR, "", "dir")
    index.routes["/simple/depa/"] = iw.body("not here", "text/plain")  # the next run fails fast, its sweep done
    r = subprocess.run([sys.executable, "-m", "sglang_blackwell.cli", *argv], cwd=tmp_path, capture_output=True,
                       text=True, env=hostile.clean_env(tmp_path, env), timeout=300)
    assert "Traceback" not in r.stderr, r.stderr[-2000:]
    assert not [p for p in left if p.exists()], f"the killed run's work folder was not swept: {left}"
    assert not unchanged(planted), f"swept or changed what is not ours: {unchanged(planted)}"
    assert not sorted(set(temp.glob(f"{LOCK_DIR}*")) - {Path(p) for p in planted}), "the second run left its own"


# ---- pack: qualify --pack killed while it writes the pack ------------------------------------------------------------

QUALIFY = ["qualify", "--skip", "gpu-tests,allreduce,eagle3", "--quiet", "--pack", "{tmp}/packs/q.tar.gz"]
PACK = ".sglang-blackwell-pack-"  # the name a pack is written under: <prefix><pid>-<random>.tmp
NOISE = 32 << 20  # incompressible: gzip takes a second or more over it, the window the SIGKILL comes in


def pack_temps(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob(".*.tmp") if p.is_file() and not p.is_symlink())


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_pack_killed_and_the_next_run_sweeps_its_half_pack(tmp_path: Path) -> None:
    packs = tmp_path / "packs"
    packs.mkdir()
    argv = [a.replace("{tmp}", str(tmp_path)) for a in QUALIFY]
    with cli([*argv, "--out", str(tmp_path / "q1")], tmp_path, {}, "first") as proc:
        out = tmp_path / "q1"
        assert poll(lambda: (out / "logs").is_dir() or proc.poll() is not None, BEGUN_S) and proc.poll() is None, \
            f"qualify never began: {the_log(tmp_path, 'first')}"
        os.kill(proc.pid, signal.SIGSTOP)  # its folder is claimed: the noise goes in, then it runs on
        (out / "noise.bin").write_bytes(os.urandom(NOISE))
        os.kill(proc.pid, signal.SIGCONT)
        assert poll(lambda: pack_temps(packs) or proc.poll() is not None, BEGUN_S, 0.005) and proc.poll() is None, \
            f"the pack was never begun (or was done at once): {the_log(tmp_path, 'first')}"
        started = descendants(proc.pid)
        why = kill_and_judge(proc, started)
    assert why is None, why
    left = pack_temps(packs)
    assert left, "the killed run left no half pack: nothing to sweep (the case proves nothing)"
    planted = plant_not_ours(packs, PACK, ".tmp", "file")
    r = subprocess.run([sys.executable, "-m", "sglang_blackwell.cli", *argv, "--out", str(tmp_path / "q2")],
                       cwd=tmp_path, capture_output=True, text=True, env=hostile.clean_env(tmp_path, {}), timeout=300)
    assert "Traceback" not in r.stderr and (packs / "q.tar.gz").is_file(), r.stderr[-2000:]
    assert not [p for p in left if p.exists()], f"the killed run's half pack was not swept: {left}"
    assert not unchanged(planted), f"swept or changed what is not ours: {unchanged(planted)}"
