"""Process sessions: start a command in a session of its own, signal its whole group, stop it for good, and say
which processes are still alive. Every process sglang-blackwell starts goes through here (`start` for the long
ones this code steers, `run` in place of subprocess.run), so that none outlives us, SIGKILL included (the
watcher, below). Used too by the temp-directory sweeps (leftovers.py: a temp name whose owner is dead is stale).

A session's id is its leader's pid (`start_new_session=True`), and every process it starts inherits it, so the
session id finds stragglers that left the process group. Liveness is read from /proc where there is one (a zombie
is not alive); elsewhere `os.kill(pid, 0)` is all we have.

The watcher. A session we start is told to a small process of ours (one per sglang-blackwell process, started
with the first session, in a session of its own so a signal to our group does not take it too) through a pipe
whose write end only we hold. When we end, however we end, the kernel closes that end; the watcher reads EOF,
freezes (SIGSTOP) every process of the sessions still told to it and every process they started (by parent pid,
so a grandchild that made a session of its own, pip's build backends, a step's pytest's servers, goes too), then
SIGKILLs them all. Why not PR_SET_PDEATHSIG (prctl in the child's preexec_fn): it fires when the *thread* that
forked the child exits, not the process (a session started from a worker thread would be killed when that thread
ends, though we run on), it reaches only the direct child (pip's own child and a session's other members would
live on), it is cleared when the child execs a set-user-ID program, and preexec_fn is not safe in a process with
threads. The watcher forgets a session once nothing of it is alive (told `-sid`, or seen so in /proc every
second): a pid is reused (pid_max may be 32768), and a session id we no longer own must never be signalled.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
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


# The watcher's program (python -I -S -c: no module of ours, nor of the environment's path, is imported; nothing
# but the standard library's os, select, signal, sys and time). argv: the pipe's read end, our pid.
WATCHER = r"""# sglang-blackwell's watcher (procs.py): when pid argv[2] ends, SIGKILL the sessions it started
import os, select, signal, sys, time
rfd, parent = int(sys.argv[1]), int(sys.argv[2])
for s in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
    signal.signal(s, signal.SIG_IGN)


def table():
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open("/proc/" + name + "/stat", "rb") as f:
                    st = f.read()
            except OSError:
                continue
            f = st[st.rfind(b")") + 2:].split()
            out[int(name)] = (f[0] not in (b"Z", b"X"), int(f[1]), int(f[2]), int(f[3]))
    return out


def members(tab, sids):
    found = {p for p, (live, _, pg, se) in tab.items() if live and (pg in sids or se in sids)}
    kids = {}
    for p, (live, pp, _, _) in tab.items():
        if live:
            kids.setdefault(pp, []).append(p)
    todo = list(found)
    while todo:
        for c in kids.get(todo.pop(), ()):
            if c not in found:
                found.add(c)
                todo.append(c)
    found.discard(os.getpid())
    return found


def end(sids):
    stopped = set()
    for _ in range(100):
        new = members(table(), sids) - stopped
        if not new:
            break
        for p in new:
            try:
                os.kill(p, signal.SIGSTOP)
            except OSError:
                pass
        stopped |= new
    for p in stopped:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
    for s in sids:
        try:
            os.killpg(s, signal.SIGKILL)
        except OSError:
            pass


watched, buf, gone, pruned = set(), b"", False, time.monotonic()
while not gone:
    ready = select.select([rfd], [], [], 1.0)[0]
    if ready:
        data = os.read(rfd, 65536)
        gone = not data
        buf += data
        *lines, buf = buf.split(b"\n")
        for ln in lines:
            if ln[:1] == b"+":
                watched.add(int(ln[1:]))
            elif ln[:1] == b"-":
                watched.discard(int(ln[1:]))
    gone = gone or os.getppid() != parent
    if watched and not gone and time.monotonic() - pruned >= 1.0:
        live = {x for live, _, pg, se in table().values() if live for x in (pg, se)}
        watched &= live
        pruned = time.monotonic()
if watched:
    end(watched)
"""

_lock = threading.Lock()
_pipe: dict[str, Any] = {}  # "fd": the write end, "pid": the process holding it (a fork child needs its own), "proc"
_told: set[int] = set()  # the sessions told to the watcher and not yet taken back


def _tell(line: str) -> None:
    """One line to the watcher, started first if this process has none (or its watcher is gone); silently nothing
    where no watcher can run (no /proc, no interpreter to start it with)."""
    with _lock:
        for _ in range(2):
            if _pipe.get("pid") != os.getpid():
                if "pid" in _pipe:  # a fork of ours: the sessions told are its parent's, and so is the pipe
                    _told.intersection_update({int(line[1:])} if line.startswith("+") else set())
                    with contextlib.suppress(OSError):
                        os.close(_pipe["fd"])
                    _pipe.clear()
                if not _spawn_watcher():
                    return
                line = "".join(f"+{sid}\n" for sid in sorted(_told))  # a new watcher hears all we own
            try:
                os.write(_pipe["fd"], line.encode())
                return
            except OSError:  # the watcher died (killed by hand): start another
                _pipe.clear()


def _spawn_watcher() -> bool:
    if not has_proc() or not sys.executable:
        return False
    rfd, wfd = os.pipe()  # both close on exec: only the watcher gets rfd (pass_fds), only we keep wfd
    try:
        proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", WATCHER, str(rfd), str(os.getpid())],
                                pass_fds=(rfd,), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, cwd="/", start_new_session=True)
    except OSError:
        os.close(wfd)
        return False
    finally:
        os.close(rfd)
    _pipe.update(fd=wfd, pid=os.getpid(), proc=proc)  # held: a collected Popen of a live child warns
    return True


def watch(sid: int) -> None:
    """Session `sid` ends when we end (the watcher SIGKILLs what is left of it and everything it started)."""
    with _lock:
        _told.add(sid)
    _tell(f"+{sid}\n")


def unwatch(sid: int) -> None:
    """Session `sid` is over (nothing of it alive): its id may be reused and must not be signalled for us."""
    with _lock:
        if sid not in _told:
            return
        _told.discard(sid)
    _tell(f"-{sid}\n")


def start(cmd: list[str], *, env: dict[str, str], cwd: Path | None = None, stdout: Any,
          **popen_kw: Any) -> subprocess.Popen:
    """`cmd` as the leader of a new session, watched (it ends when we end): stdin closed, stderr joined to stdout.
    OSError if it cannot start."""
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=stdout, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True, **popen_kw)
    watch(proc.pid)
    return proc


def run(cmd: list[str], *, timeout: float | None = None, input: str | bytes | None = None,
        capture_output: bool = False, grace_s: float = 5.0, **popen_kw: Any) -> subprocess.CompletedProcess:
    """subprocess.run (same arguments, same TimeoutExpired and OSError), but `cmd` leads a session of its own that
    ends with us (watched), and nothing of it outlives the call when it does not end well: past `timeout` its whole
    session is SIGKILLed (subprocess.run kills the one child, and then waits for any grandchild holding its pipes);
    on Ctrl-C or SIGTERM (procs.Interrupted) the session is sent SIGINT or SIGTERM (it is not in the terminal's
    group any more, so it would not get Ctrl-C's itself), SIGKILLed after `grace_s`, and the exception goes on."""
    if capture_output:
        popen_kw["stdout"] = popen_kw["stderr"] = subprocess.PIPE
    if input is not None:
        popen_kw["stdin"] = subprocess.PIPE
    proc = subprocess.Popen(cmd, start_new_session=True, **popen_kw)
    watch(proc.pid)
    try:
        out, err = proc.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired:
        signal_group(proc.pid, signal.SIGKILL)
        kill_leftovers(proc.pid)
        out, err = _drain(proc)
        raise subprocess.TimeoutExpired(proc.args, timeout or 0.0, output=out, stderr=err) from None
    except BaseException as e:
        stop(proc, grace_s, first=signal.SIGTERM if isinstance(e, Interrupted) else signal.SIGINT)
        raise
    finally:
        if not running(proc):
            unwatch(proc.pid)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _drain(proc: subprocess.Popen) -> tuple[Any, Any]:
    """What a killed process wrote, bounded: a process outside its session may still hold its pipes."""
    try:
        return proc.communicate(timeout=5)
    except subprocess.TimeoutExpired:
        for f in (proc.stdout, proc.stderr):
            if f is not None:
                f.close()
        proc.wait()
        return None, None


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
    if not left:
        unwatch(sid)
    report["left"] = left
    report["group_gone"] = not left
    report["teardown_s"] = round(time.monotonic() - t0, 2)
    return report


class Interrupted(KeyboardInterrupt):
    """SIGTERM/SIGHUP to us: unwinds like Ctrl-C, so every `with` that owns a session takes it down."""


# Ctrl-C, SIGTERM and SIGHUP received inside signals_as_interrupt (depth: how many of those scopes are open). The
# exception a handler raises can be lost: Python raises it at whatever bytecode runs when the signal is handled,
# and when that is a finalizer (the HTTPError of every 503 a health poll gets is closed by one:
# tempfile._TemporaryFileCloser.__del__) it prints "Exception ignored" and drops it; inside
# threading.Condition.wait (every request's threading.Timer starts with one) it turns into "RuntimeError: release
# unlocked lock". So the signal is written down too, and raise_if_interrupted() raises it again where a loop can
# ask (a health poll, the next arm): once interrupted, the scope stays interrupted.
_interrupts: dict[str, Any] = {"depth": 0, "got": []}


def _as_exception(signum: int) -> KeyboardInterrupt:
    """Ctrl-C is a plain KeyboardInterrupt (what Python raises for it); SIGTERM/SIGHUP are `Interrupted`."""
    return KeyboardInterrupt() if signum == signal.SIGINT else Interrupted(f"signal {signal.Signals(signum).name}")


def _record(signum: int) -> None:
    if _interrupts["depth"]:
        _interrupts["got"].append(signum)


def interrupted() -> int | None:
    """The first interrupt signal received in the open signals_as_interrupt scope, or None."""
    return _interrupts["got"][0] if _interrupts["got"] else None


def raise_if_interrupted() -> None:
    """Raise again the interrupt this scope received, if any (its first raise may have been lost, see above)."""
    signum = interrupted()
    if signum is not None:
        raise _as_exception(signum)


def _install(handlers: dict[int, Any], old: dict[int, Any]) -> None:
    """Set each signal's handler, the old one noted in `old` first: a signal that lands halfway leaves there
    exactly the ones the caller's `finally` must put back (a handler of ours left behind would hold Ctrl-C for
    good)."""
    for s, h in handlers.items():
        old[s] = signal.getsignal(s)
        signal.signal(s, h)


def _restore(old: dict[int, Any]) -> None:
    for s, h in old.items():
        signal.signal(s, h)


def _taken_over(sigs: tuple[int, ...]) -> tuple[int, ...]:
    """The signals of `sigs` not ignored: a SIGINT a background job or nohup inherited as SIG_IGN stays ignored."""
    return tuple(s for s in sigs if signal.getsignal(s) is not signal.SIG_IGN)


@contextlib.contextmanager
def signals_as_interrupt() -> Iterator[None]:
    """Turn SIGTERM and SIGHUP into `Interrupted`, and Ctrl-C into KeyboardInterrupt, for the duration; each is
    also written down for raise_if_interrupted (Python can drop the exception, not the record)."""
    def handler(signum: int, _frame: Any) -> None:
        _record(signum)
        raise _as_exception(signum)

    old: dict[int, Any] = {}
    _interrupts["depth"] += 1
    try:
        sigs = _taken_over((signal.SIGINT, signal.SIGTERM, signal.SIGHUP))
        _install(dict.fromkeys(sigs, handler), old)
        yield
    finally:
        _restore(old)
        _interrupts["depth"] -= 1
        if not _interrupts["depth"]:
            _interrupts["got"].clear()


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold Ctrl-C/SIGTERM/SIGHUP while a bounded step runs (a teardown, a start), then act on them (a second
    Ctrl-C must not leave a session half-killed, one during a start must not leave a session no one owns)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []

    def hold(signum: int, _frame: Any) -> None:
        _record(signum)
        got.append(signum)

    old: dict[int, Any] = {}
    try:
        _install(dict.fromkeys(_taken_over((signal.SIGINT, signal.SIGTERM, signal.SIGHUP)), hold), old)
        yield
    finally:
        _restore(old)
    if got:
        raise Interrupted(f"signal {signal.Signals(got[0]).name} (held until the session was down)")
