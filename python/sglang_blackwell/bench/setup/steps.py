"""The README's set-up steps as data (`make`, `make test`, `make image-test`), what each needs on this machine, and
one step run for real: `make <target>` in the clone, in a session of its own, its output in a log, timed, with the
load average before and after and, for the pytest steps, the counts of pytest's summary line and (from a JUnit XML
written beside the log) the share of the per-patch probes."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ... import procs
from ...errors import UserError
from . import machine, pytest_output

PROBES = "test/unit/patches"  # the per-patch probes (docs/patches.md#patch-format-and-tests)
TAIL_LINES = 30


@dataclass(frozen=True)
class Step:
    name: str  # as --steps spells it
    target: str | None  # the make target (None: the default goal)
    pytest: bool = False  # runs pytest: PYTEST_ARGS gets --junitxml, the summary line is read
    probes: str | None = None  # the folder whose share of the pytest time is recorded

    def argv(self, junit: str | None) -> list[str]:
        target = [self.target] if self.target else []
        return ["make", *target, *([f"PYTEST_ARGS=--junitxml={junit}"] if junit else [])]

    def shown(self) -> str:
        return "make" + (f" {self.target}" if self.target else "")


STEPS = (Step("make", None), Step("test", "test", pytest=True, probes=PROBES),
         Step("image-test", "image-test", pytest=True))
DEFAULT = "make,test"


def parse_steps(text: str) -> list[Step]:
    """--steps make,test,image-test -> the steps, in the README's order (each step builds on the one before)."""
    known = {s.name: s for s in STEPS}
    names = [n.strip() for n in text.split(",")]
    for n in names:
        if n not in known:
            raise UserError(f"--steps {text}: unknown step {n!r} (known: {', '.join(known)})")
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise UserError(f"--steps {text}: {', '.join(dup)} given twice")
    return [s for s in STEPS if s.name in names]


def missing(step: Step) -> list[str]:
    """What this machine lacks for `step` (empty: nothing). `make image-test` needs root, buildah and debootstrap;
    without them its tests skip, and a run of skips is no measurement of the image build."""
    out = [] if shutil.which("make") else ["make"]
    if step.name == "image-test":
        out += [f"{t} (Debian: apt-get install -y buildah debootstrap)" for t in ("buildah", "debootstrap")
                if shutil.which(t) is None]
        if os.geteuid() != 0:
            out.append(f"root (uid {os.geteuid()}): debootstrap and buildah's vfs storage need it")
    return out


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat()


def run_step(step: Step, clone: Path, logs: Path, env: dict[str, str], timeout_s: float) -> dict[str, Any]:
    """Run `step` in `clone` (logs/<name>.log, logs/<name>.junit.xml); its record for the receipt."""
    log = logs / f"{step.name}.log"
    junit = logs / f"{step.name}.junit.xml" if step.pytest else None
    # relative to the clone, where make and pytest run: PYTEST_ARGS is split on blanks, a temp path may have some
    argv = step.argv(os.path.relpath(junit, clone) if junit else None)
    record: dict[str, Any] = {"name": step.name, "command": argv, "started": _now(), "load_before": machine.load()}
    t0 = time.monotonic()
    with open(log, "wb") as out:
        proc = procs.start(argv, env=env, cwd=clone, stdout=out)
        try:
            code: int | None = proc.wait(timeout=timeout_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            procs.stop(proc, 10.0)
            code, timed_out = None, True
        except BaseException:  # Ctrl-C, SIGTERM (procs.Interrupted): the step's whole session goes with us
            procs.stop(proc, 10.0)
            raise
        wall = round(time.monotonic() - t0, 2)
        leftovers = procs.kill_leftovers(proc.pid)  # a background child of a finished step measures nothing
    text = log.read_bytes().decode("utf-8", errors="replace")
    record.update(exit_code=code, timed_out=timed_out, wall_s=wall, load_after=machine.load(),
                  log=log.name, output_tail=[line[:300] for line in text.splitlines()[-TAIL_LINES:]])
    if leftovers:
        record["leftovers_killed"] = len(leftovers)
    if step.pytest:
        record["pytest"] = pytest_output.summary_counts(text)
        workers = pytest_output.xdist_workers(text)
        if record["pytest"] is not None and workers is not None:
            record["pytest"]["workers"] = workers
    if step.probes and junit is not None:
        record["probes"] = probe_share(junit, step.probes, record["pytest"], wall)
    return record


def probe_share(junit: Path, folder: str, pytest: dict[str, Any] | None, wall_s: float) -> dict[str, Any] | None:
    """The folder's test time and its share of all the tests' time (both summed over the test cases). Under
    pytest-xdist the test times of the workers add up, so the folder's seconds over pytest's own wall time (the
    summary line's "in N s") or over the step's would overstate it by up to the number of workers (a 2-worker run
    of 28346db said 86% where the probes took 44% of the tests' time): those are kept as `per_pytest_s` /
    `per_step_s` for what they are, test-seconds per wall-second."""
    t = pytest_output.folder_time(junit, folder)
    if t is None:
        return None
    py_s = pytest["seconds"] if pytest else None
    return {**t, "share_of_tests": pytest_output.share_of_tests(t),
            "per_pytest_s": round(t["seconds"] / py_s, 3) if py_s else None,
            "per_step_s": round(t["seconds"] / wall_s, 3) if wall_s > 0 else None}
