"""Start an SGLang server in its own session (process group), wait for it, and take it down completely.

`launched_server(...)` is a context manager: whatever happens inside (an exception, Ctrl-C, SIGTERM to us),
the server's whole session gets SIGTERM, then SIGKILL after a grace period; then we check that no process of
that session is alive and, where nvidia-smi exists, that none of its processes still holds a GPU. A server
that cannot be taken down is an error (the next arm would measure a machine that is still busy).

The server measured must be the one we started: nothing may listen on its port before the launch, the socket
that answers must belong to a process of our session (where /proc tells; listeners.py), and the process we
started must still run when it answers and when the measurement ends. Otherwise the arm fails: a server that
is already there (another user's, one a killed harness left behind) must not become the "baseline" while ours
dies with "Address already in use".
"""

from __future__ import annotations

import contextlib
import os
import random
import socket
import subprocess
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ... import procs
from ...box import nvidia_smi as nvidia
from ...errors import UserError
from . import listeners, transport
from .transport import http_json, status

__all__ = ["Server", "ServerError", "TeardownError", "attached_server", "busy_port", "ensure_ours", "free_port",
           "health_status", "http_json", "launched_server", "log_tail", "openai_health", "port_of",
           "terminate_session"]

Progress = Callable[[str], None]
PIDFILE_ENV = "SGLANG_BLACKWELL_BENCH_PIDFILE"  # holds the live server's session id while it runs


class ServerError(UserError):
    """The server did not come up, died, or could not be taken down."""

    exit_code = 5


class TeardownError(ServerError):
    """A server process or its GPU context survived SIGTERM and SIGKILL: later measurements are suspect."""

    exit_code = 6


@dataclass
class Server:
    url: str
    pid: int | None = None  # session leader (None: attached, not ours)
    log_path: Path | None = None
    startup_s: float | None = None
    teardown: dict[str, Any] = field(default_factory=dict)


# sglang derives more ports from --port (0.5.14: SGLANG_GRPC_PORT = port + 10000, which must stay <= 65535), so
# the kernel's ephemeral ports (up to 60999) are no choice: pick one below PORT_RANGE[1] whose companion is free.
PORT_RANGE = (20000, 45000)
PORT_COMPANION_OFFSET = 10000


def _bindable(host: str, port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def port_of(url: str) -> int:
    return urllib.parse.urlsplit(url).port or 80


def busy_port(host: str, port: int) -> str | None:
    """Why no server of ours can listen on host:port now ("port P on H is in use (pid N: cmd)", or an address
    problem); None when it can."""
    problem = listeners.bind_problem(host, port)
    if problem is None:
        return None
    kind, what = problem
    if kind == "in use":
        holders = listeners.listener_pids(port) or []
        what += (f" ({', '.join(listeners.describe(p) for p in holders[:3])})" if holders
                 else " (by a process of another user or a container)")
    return what


def free_port(host: str = "127.0.0.1", rng: random.Random | None = None) -> int:
    """A free port for a server (and its port + 10000), in PORT_RANGE."""
    rng = rng or random.Random()
    for _ in range(200):
        port = rng.randrange(*PORT_RANGE)
        if _bindable(host, port) and _bindable(host, port + PORT_COMPANION_OFFSET):
            return port
    raise ServerError(f"no free port pair (p, p + {PORT_COMPANION_OFFSET}) found in {PORT_RANGE} on {host}")


def health_status(url: str, timeout: float = 5.0) -> int | str:
    return status(url + "/health", timeout=timeout)


def openai_health(url: str, timeout: float = 5.0) -> tuple[bool, str]:
    """Is a server up? GET /health must answer 200; a server without /health (404, 405) counts as up when
    GET /v1/models answers 200 (any OpenAI-compatible server). Returns (up, what was seen)."""
    st = health_status(url, timeout)
    if st == 200 or st not in (404, 405):
        return st == 200, f"/health: {st}"
    models = status(url + "/v1/models", timeout=timeout)
    return models == 200, f"/health: {st}, /v1/models: {models}"


def log_tail(path: Path | None, n: int = 30) -> str:
    if path is None or not path.exists():
        return "(no log)"
    lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    return "\n".join("    " + ln[:400] for ln in lines[-n:])


# ---- process sessions -------------------------------------------------------------------------------

def terminate_session(proc: subprocess.Popen, grace_s: float, *, gpu_release_s: float = 30.0,
                      progress: Progress | None = None) -> dict[str, Any]:
    """SIGTERM the whole session, SIGKILL what is left after `grace_s`, verify nothing (and no GPU process) is
    left. Returns what happened; raises ServerError if a process or a GPU context of the session survives."""
    sid = proc.pid
    gpu_pids_before = set(procs.session_members(sid) if procs.has_proc() else [sid])
    report = procs.stop(proc, grace_s, progress=progress)
    if report["left"]:
        raise TeardownError(f"server session {sid}: processes {report['left']} survived SIGTERM and SIGKILL")
    report["gpu"] = _wait_gpu_released(gpu_pids_before, gpu_release_s)
    if report["gpu"].get("ours_left"):
        raise TeardownError(f"server session {sid}: GPU compute processes {report['gpu']['ours_left']} "
                            f"still listed by nvidia-smi {gpu_release_s:.0f} s after the session died")
    return report


def _wait_gpu_released(pids: set[int], timeout_s: float) -> dict[str, Any]:
    if not nvidia.available():
        return {"checked": False, "why": "no nvidia-smi"}
    deadline = time.monotonic() + timeout_s
    while True:
        apps = nvidia.compute_apps()
        ours = sorted(a["pid"] for a in apps if a["pid"] in pids)
        if not ours or time.monotonic() > deadline:
            return {"checked": True, "ours_left": ours, "compute_apps_left": len(apps),
                    "memory_used_mib": nvidia.memory_used_mib()}
        time.sleep(1.0)


# ---- launch / attach --------------------------------------------------------------------------------

def wait_healthy(server: Server, proc: subprocess.Popen | None, timeout_s: float,
                 progress: Progress | None = None) -> float:
    t0 = time.monotonic()
    next_note = 30.0
    while True:
        # a Ctrl-C whose KeyboardInterrupt a poll's finalizer dropped would otherwise leave us polling until
        # timeout_s, and the harness would go on to the next arm (procs: _interrupts)
        procs.raise_if_interrupted()
        elapsed = time.monotonic() - t0
        if proc is not None and proc.poll() is not None:
            raise ServerError(f"server exited with code {proc.returncode} after {elapsed:.0f} s before it "
                              f"was healthy; log {server.log_path}:\n{log_tail(server.log_path)}")
        up, last = openai_health(server.url)
        if up:
            return elapsed
        over = transport.run_deadline_passed()
        if over:
            raise ServerError(f"server at {server.url} not healthy after {elapsed:.0f} s when {over.split(':')[0]}; "
                              f"log {server.log_path}")
        if elapsed > timeout_s:
            raise ServerError(f"server at {server.url} not healthy after {timeout_s:.0f} s "
                              f"(last {last}); log {server.log_path}:\n{log_tail(server.log_path)}")
        if progress and elapsed > next_note:
            progress(f"  waiting for {server.url}/health: {elapsed:.0f} s (last: {last})")
            next_note += 30.0
        time.sleep(0.5)


@contextlib.contextmanager
def launched_server(server: Server, cmd: list[str], env: dict[str, str], *, startup_timeout_s: float,
                    grace_s: float, gpu_release_s: float = 30.0, progress: Progress | None = None,
                    own_listener: bool = True) -> Iterator[Server]:
    """Start `cmd` in a new session, stdout+stderr to server.log_path; yield once /health answers 200.
    On the way out (normally, on error, on Ctrl-C) the session is taken down; server.teardown says how.
    own_listener: the server's socket must belong to the session (False for a launcher whose server runs
    elsewhere, such as `docker run`: a container's port is held by its runtime's processes)."""
    assert server.log_path is not None
    pidfile = os.environ.get(PIDFILE_ENV)
    proc: subprocess.Popen | None = None
    try:
        # a Ctrl-C during the start is held until the session is ours on record (started, told to the watcher,
        # its id in the pid file) and raised here, inside the `try`: before, it could leave a server that no
        # teardown, or not even the watcher, knew of
        with procs.signals_deferred():
            proc = _start(server, cmd, env)
            if pidfile:  # lets a later lab call end a session a hard-killed harness left behind, by its id
                Path(pidfile).write_text(f"{proc.pid}\n")
        server.startup_s = wait_healthy(server, proc, startup_timeout_s, progress)
        ensure_ours(server, proc, "answered /health", own_listener=own_listener)
        yield server
        # what answered all along was ours, and it is still up
        ensure_ours(server, proc, "was measured", own_listener=own_listener)
    finally:
        if proc is not None:
            with procs.signals_deferred():  # a second Ctrl-C must not leave the server half-killed
                server.teardown = terminate_session(proc, grace_s, gpu_release_s=gpu_release_s, progress=progress)
        if pidfile and proc is not None:  # ours only: a start that failed leaves an earlier run's record
            Path(pidfile).unlink(missing_ok=True)


def _start(server: Server, cmd: list[str], env: dict[str, str]) -> subprocess.Popen:
    """Start `cmd` in a session of its own, stdout+stderr to server.log_path (headed by the command)."""
    assert server.log_path is not None
    server.log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(server.log_path, "wb") as log:
        log.write(("$ " + " ".join(cmd) + "\n").encode())
        log.flush()
        try:
            proc = procs.start(cmd, env=env, stdout=log)
        except OSError as e:
            raise ServerError(f"cannot start server ({cmd[0]}): {e}") from None
    server.pid = proc.pid
    return proc


def ensure_ours(server: Server, proc: subprocess.Popen, when: str, *, own_listener: bool = True) -> None:
    """The server at server.url is the one we started: our process still runs, and (own_listener) the socket
    listening on the port belongs to a process of its session, checked where /proc shows the holder (one this
    user cannot see leaves the launch arguments /server_info reports as the check)."""
    port = port_of(server.url)
    code = proc.poll()
    if code is not None:
        raise ServerError(f"our server (pid {proc.pid}) exited with code {code}, yet {server.url} {when}: "
                          f"that was not our server; log {server.log_path}:\n{log_tail(server.log_path)}")
    if not own_listener or not procs.has_proc() or listeners.listening(port) is None:
        return
    if listeners.listener_pids(port, procs.session_members(proc.pid)):
        return
    others = listeners.listener_pids(port) or []
    if others:
        raise ServerError(f"{server.url} {when}, but the process listening on port {port} is not of our server's "
                          f"session {proc.pid} ({', '.join(listeners.describe(p) for p in others[:3])}): not "
                          f"measuring someone else's server; log {server.log_path}:\n{log_tail(server.log_path)}")


def attached_server(url: str) -> Server:
    url = url.rstrip("/")
    up, seen = openai_health(url)
    if not up:
        raise ServerError(f"--attach {url}: not healthy ({seen})")
    return Server(url=url)
