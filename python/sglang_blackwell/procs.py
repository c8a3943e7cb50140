"""Process sessions: start a command in a session of its own, signal its whole group, stop it for good, and say
which processes are still alive. Used by the benchmark's servers, qualify's steps, and the build and bundle
temp-directory sweeps (a temp directory whose owner is dead is stale).

A session's id is its leader's pid (`start_new_session=True`), and every process it starts inherits it, so the
session id finds stragglers that left the process group. Liveness is read from /proc where there is one (a zombie
is not alive); elsewhere `os.kill(pid, 0)` is all we have.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

Progress = Callable[[str], None]


def has_proc() -> bool:
    return Path("/proc/self/stat").exists()


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/<pid>/stat after the command name: state ppid pgrp session ... (comm may hold spaces and parens)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rfind(")") + 2:].split()


def alive(pid: int) -> bool:
    """Does process `pid` exist and run (a zombie does not)?"""
    if has_proc():
        f = _stat_fields(pid)
        return f is not None and f[0] not in ("Z", "X")
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def session_members(sid: int) -> list[int]:
    """Live (non-zombie) processes whose session id or process group id is `sid` (Linux /proc)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        f = _stat_fields(int(d.name))
        if f is not None and f[0] not in ("Z", "X") and sid in (int(f[2]), int(f[3])):
            out.append(int(d.name))
    return sorted(out)


def start(cmd: list[str], *, env: dict[str, str], cwd: Path | None = None, stdout: Any,
          **popen_kw: Any) -> subprocess.Popen:
    """`cmd` as the leader of a new session: stdin closed, stderr joined to stdout. OSError if it cannot start."""
    return subprocess.Popen(cmd, env=env, cwd=cwd, stdout=stdout, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True, **popen_kw)


def signal_group(pgid: int, sig: int) -> bool:
    """Send `sig` to process group `pgid`; False when it is gone (or not ours)."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def running(proc: subprocess.Popen) -> bool:
    """Is anything of proc's session still alive? Reaps the leader once it exited (no zombie left behind)."""
    sid = proc.pid
    if has_proc():
        proc.poll()
        return bool(session_members(sid))
    if proc.poll() is None:
        return True
    try:
        os.killpg(sid, 0)
    except ProcessLookupError:
        return False
    return True


def kill_leftovers(sid: int) -> list[int]:
    """SIGKILL what is left of session `sid` (after its leader exited); the pids it killed."""
    left = session_members(sid) if has_proc() else []
    for pid in left:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return left


def stop(proc: subprocess.Popen, grace_s: float, *, first: int = signal.SIGTERM,
         progress: Progress | None = None) -> dict[str, Any]:
    """Signal proc's whole session with `first`, SIGKILL what is left after `grace_s` (the group and members
    that left it), reap the leader. Returns what happened; `left` names processes that survived even SIGKILL."""
    sid = proc.pid
    t0 = time.monotonic()
    members_before = session_members(sid) if has_proc() else [sid]
    report: dict[str, Any] = {"members": len(members_before), "sigterm": False, "sigkill": False}
    report["sigterm"] = signal_group(sid, first)  # "sigterm": the first signal was delivered (SIGINT for qualify)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and running(proc):
        time.sleep(0.1)
    if running(proc):
        report["sigkill"] = True
        if progress:
            progress(f"session {sid} still alive {grace_s:.0f} s after {signal.Signals(first).name}: SIGKILL")
        signal_group(sid, signal.SIGKILL)
        kill_leftovers(sid)
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline and running(proc):
            time.sleep(0.1)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)
    left = session_members(sid) if has_proc() else ([sid] if proc.poll() is None else [])
    report["left"] = left
    report["group_gone"] = not left
    report["teardown_s"] = round(time.monotonic() - t0, 2)
    return report


class Interrupted(KeyboardInterrupt):
    """SIGTERM/SIGHUP to us: unwinds like Ctrl-C, so every `with` that owns a session takes it down."""


@contextlib.contextmanager
def signals_as_interrupt() -> Iterator[None]:
    """Turn SIGTERM and SIGHUP into `Interrupted` for the duration."""
    def handler(signum: int, _frame: Any) -> None:
        raise Interrupted(f"signal {signal.Signals(signum).name}")

    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold Ctrl-C/SIGTERM/SIGHUP while a bounded teardown runs, then act on them (a second Ctrl-C must not
    leave a session half-killed)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []
    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    old = {s: signal.signal(s, lambda signum, _f: got.append(signum)) for s in sigs}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    if got:
        raise Interrupted(f"signal {signal.Signals(got[0]).name} (held until the session was down)")
