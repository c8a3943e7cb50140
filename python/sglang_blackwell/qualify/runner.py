"""Running one qualify step: its command in a session of its own, its output logged (and echoed), stopped on a
timeout or a signal, and whatever of its session outlives it killed and named."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from .. import procs
from ..box.nccl import MULTICAST_OFF_ENV
from ..paths import PACKAGE_DIR


@dataclass
class Outcome:
    rc: int | None
    wall_s: float
    timed_out: bool = False
    interrupted: str | None = None
    tail: list[str] = field(default_factory=list)  # last lines it printed
    left_killed: list[int] = field(default_factory=list)  # processes of its session still alive after it


def child_env(extra: dict[str, str] | None = None, *, gpu: bool = True) -> dict[str, str]:
    """This environment + our package first on PYTHONPATH (the steps run this very code); for GPU steps also
    multicast off (where the user set these variables, their value stays: bench allreduce then refuses, and
    says why). doctor gets the user's environment as it is: it reports it."""
    env = dict(os.environ)
    pkg_parent = str(PACKAGE_DIR.parent)
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != pkg_parent]
    env["PYTHONPATH"] = os.pathsep.join([pkg_parent, *parts])
    env["PYTHONUNBUFFERED"] = "1"
    if gpu:
        for k, v in MULTICAST_OFF_ENV.items():
            env.setdefault(k, v)
    env.update(extra or {})
    return env


def run_command(cmd: list[str], *, env: dict[str, str], cwd: Path | None, log_path: Path,
                timeout_s: float | None, grace_s: float, echo: bool, tail_n: int = 20) -> Outcome:
    """Run cmd in its own session, its stdout+stderr into log_path (and echoed, indented, to stderr). On a
    timeout or Ctrl-C/SIGTERM to us: SIGINT to its process group (it cleans up: bench eagle3 takes its servers
    down), SIGKILL after grace_s. Processes of its session still alive after it exited are killed and named."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    tail: list[str] = []
    t0 = time.monotonic()
    with open(log_path, "w", buffering=1, errors="replace") as log:
        log.write("$ " + shlex.join(cmd) + "\n")
        try:
            proc = procs.start(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, text=True, bufsize=1, errors="replace")
        except OSError as e:
            log.write(f"cannot start: {e}\n")
            return Outcome(rc=None, wall_s=0.0, tail=[f"cannot start {cmd[0]}: {e}"])

        def pump() -> None:
            assert proc.stdout is not None
            with contextlib.suppress(ValueError, OSError):  # the log closed under a pipe someone still holds
                for line in proc.stdout:
                    log.write(line)
                    tail.append(line.rstrip("\n"))
                    del tail[:-tail_n]
                    if echo:
                        print("    " + line.rstrip("\n"), file=sys.stderr, flush=True)

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        out = Outcome(rc=None, wall_s=0.0)
        try:
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                out.timed_out = True
                log.write(f"\n[qualify] timed out after {timeout_s:.0f} s: SIGINT, SIGKILL after {grace_s:.0f} s\n")
                procs.stop(proc, grace_s, first=signal.SIGINT)
        except KeyboardInterrupt as e:
            out.interrupted = str(e) or "Ctrl-C"
            print(f"qualify: interrupted ({out.interrupted}): stopping the step (up to {grace_s:.0f} s; "
                  "again to kill it now)", file=sys.stderr, flush=True)
            try:
                procs.stop(proc, grace_s, first=signal.SIGINT)
            except KeyboardInterrupt:
                procs.signal_group(proc.pid, signal.SIGKILL)
                proc.wait()
        out.rc = proc.returncode
        left = procs.kill_leftovers(proc.pid)
        out.left_killed = left
        reader.join(timeout=10)
        if left:
            log.write(f"\n[qualify] processes {left} of the step's session outlived it: killed\n")
        out.wall_s = round(time.monotonic() - t0, 2)
        out.tail = list(tail)
    return out
