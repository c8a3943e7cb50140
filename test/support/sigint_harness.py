"""`sglang-blackwell ARGS...` (what `python -m sglang_blackwell.cli` runs) that sends itself one real SIGINT at a
chosen moment, for tests of a Ctrl-C that lands where Python mishandles it. Nothing of sglang_blackwell is changed:
the hooks are on the standard library's time.sleep and subprocess.Popen, which the harness calls.

SIGINT_HOOK says where the SIGINT lands:
  finalizer  the first time.sleep once SIGINT_HOOK_AFTER exists (the fake server wrote its pid file: it runs, so the
             harness polls /health): handled inside an object's __del__, where Python prints "Exception ignored" and
             drops the KeyboardInterrupt. A health poll's finalizer does that for real: the HTTPError of every 503 is
             closed by tempfile._TemporaryFileCloser.__del__.
  replaced   the same moment: the KeyboardInterrupt becomes RuntimeError("release unlocked lock"), as it does when
             it lands in threading.Condition.wait before the lock is taken back (every request's threading.Timer
             start waits in one).
  start      right after subprocess.Popen started the fake server (before procs.start has told the watcher of it);
             that pid is written to SIGINT_HOOK_PID.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HOOK = os.environ["SIGINT_HOOK"]
_sleep = time.sleep
_fired: list[bool] = []


def sigint_here() -> None:
    """A real SIGINT to us, handled before this returns (Python runs the handler at the next check, here). Once:
    a second one would not be lost, and the test would pass for the wrong reason."""
    _fired.append(True)
    os.kill(os.getpid(), signal.SIGINT)


class SigintInFinalizer:
    def __del__(self) -> None:
        sigint_here()  # the KeyboardInterrupt leaves __del__: Python reports and drops it


def sigint_replaced() -> None:
    try:
        sigint_here()
    except KeyboardInterrupt:
        raise RuntimeError("release unlocked lock") from None


def hooked_sleep(seconds: float) -> None:
    if not _fired and Path(os.environ["SIGINT_HOOK_AFTER"]).exists():
        if HOOK == "finalizer":
            SigintInFinalizer()  # dropped at once: its __del__ runs here
        else:
            sigint_replaced()
    _sleep(seconds)


class HookedPopen(subprocess.Popen):
    def __init__(self, args: Any, *a: Any, **kw: Any) -> None:
        super().__init__(args, *a, **kw)
        if not _fired and "fake_sglang_server" in " ".join(map(str, args)):
            Path(os.environ["SIGINT_HOOK_PID"]).write_text(f"{self.pid}\n")
            sigint_here()


if HOOK == "start":
    subprocess.Popen = HookedPopen  # type: ignore[misc]
else:
    time.sleep = hooked_sleep

from sglang_blackwell.cli import main  # noqa: E402

sys.exit(main(sys.argv[1:]))
