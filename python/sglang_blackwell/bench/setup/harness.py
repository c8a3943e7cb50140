"""Time the README's set-up steps in a fresh clone.

`git clone` the checkout at HEAD into a temporary folder, run `make`, `make test` and (with --steps ...
image-test) `make image-test` there, each timed in a session of its own, and write a `bench-setup` receipt: the
commit, the machine (CPU, cores, memory, load before and after each step), python3 / pip / git / make versions,
whether pip's cache and ~/.cache/sglang-blackwell held anything (measured), and per step the command, exit code,
wall time, pytest's counts and the per-patch probes' share. The README's set-up figures come from it
(`sglang-blackwell bench table --update README.md`). A failing step is recorded, the steps after it are not run,
exit 1; bad input (not a git checkout, a dirty tree, an unknown step, a missing tool) exits 2 with nothing run or
written.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from ... import leftovers, procs
from ...errors import UserError
from ...paths import output_problem, path_arg, repo_root
from . import caches, machine, pytest_output, readme_block, receipt, source
from .steps import DEFAULT, STEPS, Step, missing, parse_steps, run_step

WORK_PREFIX = "sglang-blackwell-setup-"  # the clone's folder: <prefix><pid>-<random> (leftovers.py)
MAKE_VARS = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")  # a make above us must not steer the steps' make


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--repo", type=path_arg,
                   help="the checkout to clone (default: the one this sglang-blackwell runs from); its HEAD is "
                        "measured")
    p.add_argument("--steps", default=DEFAULT,
                   help=f"comma-separated, run in the README's order: {', '.join(s.name for s in STEPS)} "
                        f"(default: {DEFAULT}; image-test needs root, buildah and debootstrap)")
    p.add_argument("--out", type=path_arg,
                   help="directory for the receipt (default: benchmark/results/ of this checkout)")
    p.add_argument("--allow-dirty", action="store_true",
                   help="measure HEAD although tracked files have uncommitted changes (the clone lacks them)")
    p.add_argument("--step-timeout-s", type=float, default=3600.0,
                   help="a step running longer is stopped and recorded as timed out (default: 3600)")
    p.add_argument("--workdir", type=path_arg, help="where the temporary clone goes (default: the system's temp "
                                                    "folder; the clone's .venv with the test stack takes a few GB)")
    p.add_argument("--keep", action="store_true", help="keep the clone and the steps' logs (the path is printed)")


def step_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in MAKE_VARS}


def _default_out() -> Path:
    root = repo_root()
    return (root if root else Path.cwd()) / "benchmark" / "results"


def _checked(a: argparse.Namespace) -> tuple[list[Step], source.Source, Path, Path | None]:
    """Every input checked before anything runs or is written."""
    steps = parse_steps(a.steps)
    for step in steps:
        lacks = missing(step)
        if lacks:
            raise UserError(f"--steps {a.steps}: `{step.shown()}` needs {', '.join(lacks)}")
    if not a.step_timeout_s > 0:
        raise UserError(f"--step-timeout-s {a.step_timeout_s:g}: must be > 0")
    src = source.inspect(a.repo)
    if not a.allow_dirty:
        source.refuse_dirty(src)
    out = Path(a.out) if a.out else _default_out()
    problem = output_problem(out, directory=True)
    if problem:
        raise UserError(f"--out {out}: {problem}")
    workdir = Path(a.workdir) if a.workdir else None
    if workdir is not None and not workdir.is_dir():
        raise UserError(f"--workdir {workdir}: not a directory")
    return steps, src, out, workdir


def _said(rec: dict[str, Any]) -> str:
    what = "timed out" if rec["timed_out"] else f"exit {rec['exit_code']}"
    text = f"{what}, {readme_block.duration(rec['wall_s'])}"
    if rec.get("pytest"):
        text += f" ({rec['pytest']['line']})"
    share = pytest_output.share_of_tests(rec.get("probes"))
    if share is not None:
        text += f", per-patch probes {share:.0%} of the tests' time"
    return text


def run_steps(steps: list[Step], clone: Path, logs: Path, env: dict[str, str],
              timeout_s: float) -> list[dict[str, Any]]:
    """Each step in turn; after a failing one, the rest are recorded as not run."""
    records: list[dict[str, Any]] = []
    failed: str | None = None
    for step in steps:
        if failed:
            records.append({"name": step.name, "command": step.argv(None), "not_run": f"`{failed}` failed"})
            continue
        print(f"bench setup: {step.shown()} ... (log: {logs / step.name}.log)", flush=True)
        rec = run_step(step, clone, logs, env, timeout_s)
        records.append(rec)
        print(f"bench setup: {step.shown()}: {_said(rec)}", flush=True)
        if rec["exit_code"] != 0:
            failed = step.shown()
            print(f"bench setup: the last lines of `{step.shown()}`:", *rec["output_tail"][-15:], sep="\n  ",
                  file=sys.stderr)
    return records


def run(a: argparse.Namespace) -> int:
    steps, src, out, workdir = _checked(a)
    env = step_env()
    python = env.get("PY") or "python3"  # the Makefile's PY
    facts = machine.facts()
    versions = machine.tool_versions(python, env)
    before = caches.cache_state(python, env)
    print(f"bench setup: {src.repo} at {src.commit[:12]}, steps {', '.join(s.shown() for s in steps)}; caches "
          f"{before['state']}; {facts['nproc']} cores, load {facts['load']}", flush=True)
    work = leftovers.make_dir(WORK_PREFIX, workdir)  # sweeps the clones of killed runs first
    try:
        with procs.signals_as_interrupt():
            clone, logs = work / "sglang-blackwell", work / "logs"
            logs.mkdir()
            t0 = time.monotonic()
            source.clone(src, clone)
            clone_s = time.monotonic() - t0
            records = run_steps(steps, clone, logs, env, a.step_timeout_s)
            after = caches.cache_state(python, env, again=before)
            r = receipt.build(src, facts, versions, before, after, clone_s, records)
            path = receipt.write(r, out)
    finally:
        if a.keep:
            print(f"bench setup: kept the clone and its logs in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print()
    print(readme_block.markdown(path, r, Path.cwd()))
    print(f"\nreceipt: {path}\nREADME block: sglang-blackwell bench table --update README.md")
    return 0 if r["summary"]["passed"] else 1
