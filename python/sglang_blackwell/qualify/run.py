"""`sglang-blackwell qualify`: one command that qualifies a GPU box and writes ONE receipt to send back.

Steps, in this order, each a real subprocess of this interpreter with its own log and its own receipt:
  doctor     `sglang-blackwell doctor`: what works on this box and why not
  gpu-tests  pytest -m gpu over the GPU correctness tests of a checkout (test/gpu: the lab-line suite, the
             all-reduce numerics, the NCCL profile check; the AOT check where flashinfer carries AOT modules)
  allreduce  `sglang-blackwell bench allreduce --tune` at --tp (default: every GPU), table kept in the output
  eagle3     `sglang-blackwell bench eagle3` with --config, or the target box's config with --target/--draft
A step that cannot run here (no GPU, one GPU for an all-reduce, no model paths, no checkout, no pytest) is
recorded as `skipped` with the reason, never as passed. A failing step does not stop the later ones unless
--fail-fast. Exit status: 0 no step failed, 1 a step failed, 2 bad input (nothing is written), 130
interrupted (the receipt is still written, saying so).

Output directory (default $XDG_STATE_HOME/sglang-blackwell/qualify/qualify-<UTC time>/, ~/.local/state by default):
  qualify.json          the receipt (receipts.py envelope, kind "qualify"): summary.steps gives each step's
                        verdict, reason, and where its own receipt and log are (paths relative to the folder)
  doctor/               doctor.json
  gpu-tests/            gpu-tests.json, junit.xml, labline/ (+ lab-line-gpu-suite-<date>.json if it ran)
  allreduce/            allreduce-tp<N>.json (+ .png), allreduce_table.json (the tuned dispatch table)
  eagle3/               bench-eagle3_*.json, its runs, plots and server logs (+ the config, if rewritten)
  logs/<step>.log       everything each step printed
  issue/                what upstream's issue templates ask for: check_env.txt (`python -m sglang.check_env`),
                        nvidia-smi-topo.txt (`nvidia-smi topo -m`); NCCL's topology dump (NCCL_TOPO_DUMP_FILE)
                        of the allreduce step is allreduce/nccl-topo.xml. qualify.json lists each under
                        `attachments`, or says why it could not be had (no sglang, no nvidia-smi, no GPU)
--pack FILE.tar.gz bundles the directory (rank > 0 profiler traces left out): written under a temporary name of its
own, read back whole, and renamed over FILE only if FILE is still what was there when the run began (a second run
that packed to the same file meanwhile keeps its pack; this one says so, exit 2). Two runs never share an --out.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from ..errors import UserError
from ..paths import os_reason
from .attachments import before_steps, nccl_topo_dump
from .plan import DEFAULT_TEMPLATE, STEPS, Plan, make_plan
from .receipt import PACK_PREFIX, RECEIPT_NAME, _step_versions, build_receipt, format_attachments, format_table, pack
from .steps import GPU_TEST_TARGETS, StepResult, run_steps


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (__doc__ or "").strip()
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("--out", help="output directory, must not exist or be empty "
                                 "(default: $XDG_STATE_HOME/sglang-blackwell/qualify/qualify-<UTC time>/, outside any "
                                 "checkout)")
    p.add_argument("--pack", metavar="FILE.tar.gz", help="also bundle the output directory into this tarball")
    p.add_argument("--skip", default="", metavar="STEPS", help=f"comma-separated steps not to run: {','.join(STEPS)}")
    p.add_argument("--fail-fast", action="store_true", help="run no further step after one fails")
    p.add_argument("--tp", type=int, help="GPUs for bench allreduce (default: all) and for bench eagle3 "
                                          "(default: the config's tp; with --target/--draft alone: all GPUs)")
    p.add_argument("--target", metavar="PATH", help="target model directory for bench eagle3")
    p.add_argument("--draft", metavar="PATH", help="EAGLE-3 draft model directory for bench eagle3")
    p.add_argument("--config", metavar="FILE", help="bench eagle3 config (benchmark/<name>.toml); --target/--draft "
                                                    f"override its model paths (without it: {DEFAULT_TEMPLATE})")
    p.add_argument("--repeats", type=int, help="bench eagle3 launches per arm (default: the config's)")
    p.add_argument("--lab-pair", metavar="DIR", help="gpu-tests: the generated lab pair (DIR/target, DIR/draft; "
                                                     "benchmark/models/gen_lab_pair.py) for the lab-line suite")
    p.add_argument("--gpu-tests", metavar="PATHS", help="gpu-tests: pytest targets, comma-separated, relative to "
                                                        "the checkout (default: " + ",".join(GPU_TEST_TARGETS) + ")")
    p.add_argument("--pytest-args", default="", metavar="ARGS",
                   help="gpu-tests: extra pytest arguments (one string, given with '='): --pytest-args='-k dist'")
    p.add_argument("--allreduce-args", default="", metavar="ARGS",
                   help="extra bench allreduce arguments (one string, given with '='), e.g. "
                        "--allreduce-args='--tokens 1,3,64 --reps 10'")
    p.add_argument("--eagle3-args", default="", metavar="ARGS",
                   help="extra bench eagle3 arguments (one string, given with '=': --eagle3-args='--no-plots')")
    p.add_argument("--quiet", action="store_true", help="only step headers and verdicts, not each step's output")


def run(a: argparse.Namespace) -> int:
    t0 = time.monotonic()

    def progress(msg: str) -> None:
        print(f"qualify [{time.monotonic() - t0:6.0f}s] {msg}", file=sys.stderr, flush=True)

    plan = make_plan(a)  # every input checked: nothing written before this returns
    plan.progress = progress
    claim = claim_out(plan.out)
    try:
        return _run(plan, progress)
    finally:
        os.close(claim)


def claim_out(out: Path) -> int:
    """The output folder, made if missing and locked for this run (an flock on it, held until the run ends): a
    second qualify given the same --out (or the same default, in the same second) is refused before it writes
    anything there, and so is one that finds it no longer empty. Returns the open folder (close it to release)."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as e:
        raise UserError(f"--out {out}: cannot make it ({os_reason(e)})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise UserError(f"--out {out}: another qualify is writing there; give this one its own --out") from None
    except OSError:
        pass  # a file system without locks: the emptiness check alone
    if any(out.iterdir()):
        os.close(fd)
        raise UserError(f"--out {out}: another run wrote there since this one started; give this one its own --out")
    return fd


def _run(plan: Plan, progress: Callable[[str], None]) -> int:
    from ..leftovers import sweep
    from ..procs import signals_as_interrupt
    from ..receipts import collect_versions, write_receipt

    topo = plan.topology
    progress(f"{topo.summary()}; steps: "
             + ", ".join(s + (" (--skip)" if s in plan.skip else "") for s in STEPS) + f"; out {plan.out}")
    for w in plan.warnings:
        progress(f"warning: {w}")
    if plan.pack:  # a pack a killed run was writing there goes now, not hours from now when this one packs
        sweep(plan.pack.parent, PACK_PREFIX, ".tmp", kind="file")
    with signals_as_interrupt():
        attachments = before_steps(plan)
        interrupted = next((a.reason for a in attachments if a.status == "failed"
                            and (a.reason or "").startswith("interrupted")), None)
        if interrupted:
            results = [StepResult(s, "skipped", "not run: interrupted") for s in STEPS]
        else:
            results, interrupted = run_steps(plan, progress)
        allreduce = next((asdict(r) for r in results if r.step == "allreduce"), None)
        attachments.append(nccl_topo_dump(plan, allreduce, dict(os.environ)))
        versions = _step_versions(plan, results) or collect_versions()
        receipt = build_receipt(plan, results, interrupted=interrupted, versions=versions,
                                attachments=attachments)
        path = write_receipt(receipt, plan.out / RECEIPT_NAME)
        packed = pack_error = None
        if plan.pack:
            try:
                packed = pack(plan.out, plan.pack, plan.pack_found)
            except UserError as e:
                pack_error = str(e)
    print(f"qualify: {receipt['summary']['machine']}: {receipt['summary']['status'].upper()}")
    print(format_table(results))
    print(format_attachments(attachments))
    print(f"receipt: {path}")
    if packed:
        print(f"pack: {packed} ({packed.stat().st_size / 2**20:.2f} MiB): send this file back")
    if pack_error:
        print(f"sglang-blackwell qualify: error: {pack_error}", file=sys.stderr)
    if interrupted:
        return 130
    if pack_error:
        return 2
    return 1 if receipt["summary"]["failed"] else 0
