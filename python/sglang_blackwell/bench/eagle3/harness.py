"""`sglang-blackwell bench eagle3`: does EAGLE-3 beat the non-speculative baseline, and by how much?

For every repeat, every arm in turn (A B C A B C ...: launch-to-launch variance is larger than the effects we
measure, so arms interleave): start the server in its own session (or use an attached one: any
OpenAI-compatible server), check it is the server the arm describes (/server_info; a vLLM server's /metrics),
warm up, then per concurrency: flush the radix cache, reset the spec counters, snapshot the step times, run the
closed-loop workload over [workload] api (streamed /v1/completions or /v1/chat/completions, or /generate, with a
streamed TTFT probe first when /generate is not streamed), snapshot. SGLang-only steps are skipped, in one line,
on a server without /server_info. Optionally a torch-profiler window for draft/verify/decode GPU times. Then
take the server down completely.
Grid mode ([workload] contexts, bench/eagle3/grid.py): no warm-up; every (context, concurrency) cell measured on
generated prompts, first burst then warm window, with the Triton compiles of each, per-context profiler windows and
upstream's bench_serving as a cross-check.
Every arm run is appended to <stem>_runs.jsonl as soon as it ends; the receipt, the verdict and the plots come
from those runs (also later, from several such files: --from-runs).
Here: the CLI and the loop over the arm runs. One arm run: arm_run.py (its profiler window: profiling.py); the
runs file: runs_file.py; the receipt: receipt.py; the text report: report.py.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ... import procs, receipts
from ...box import nvidia_smi as nvidia
from ...errors import UserError
from ...limits import MAX_SECONDS
from ...paths import output_problem, repo_root
from . import launcher, preflight, prompts, transport
from .arm_run import run_arm, server_env
from .config import BenchConfig, load_config, select_arms, with_tp
from .progress import Progress, printer
from .receipt import KIND, build_receipt, write_outputs
from .report import report_text
from .runs_file import append_run, claim_stem, runs_from_files
from .server import TeardownError, openai_health


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", required=True, help="benchmark/<name>.toml")
    p.add_argument("--out", help="where the receipt, runs, plots and server logs go "
                                 "(default: benchmark/results/)")
    p.add_argument("--attach", nargs="+", metavar="[ARM=]URL",
                   help="measure servers someone else started instead of launching them: ARM=URL each, or "
                        "URLs in the order of the (selected) arms")
    p.add_argument("--repeats", type=int, help="launches per arm (default: workload.repeats)")
    p.add_argument("--tp", type=int, help="tensor-parallel size (default: the config's [server] tp)")
    p.add_argument("--arms", help="comma-separated subset of the config's arms (default: all)")
    p.add_argument("--deadline-s", type=float,
                   help="start no arm run that would likely end after this many seconds (bounded lab calls), and end "
                        "any request still running then (that arm run fails)")
    p.add_argument("--request-timeouts", metavar="FIRST,IDLE,TOTAL",
                   help="per-request deadlines in seconds: the first byte of data, the longest wait between two "
                        "events of a stream, the whole request (default "
                        f"{_limits_text(transport.Limits())}; benchmark/README.md says why)")
    p.add_argument("--from-runs", nargs="+", metavar="RUNS.jsonl",
                   help="run nothing: build the receipt, verdict and plots from earlier *_runs.jsonl files")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")


def run(a: argparse.Namespace) -> int:
    cfg = load_config(a.config)
    if getattr(a, "tp", None) is not None:
        cfg = with_tp(cfg, a.tp)
    arms = select_arms(cfg, a.arms)
    if a.repeats is not None and a.repeats < 1:
        raise UserError(f"--repeats: expected >= 1, got {a.repeats}")
    if a.deadline_s is not None and not 0 < a.deadline_s <= MAX_SECONDS:
        raise UserError(f"--deadline-s: expected a number of seconds > 0 and <= {MAX_SECONDS} (a week), got "
                        f"{a.deadline_s}")
    limits = parse_limits(getattr(a, "request_timeouts", None))
    repeats = a.repeats or cfg.workload.repeats
    out_dir = Path(a.out) if a.out else _default_out()
    problem = output_problem(out_dir, directory=True)  # before anything is launched
    if problem:
        raise UserError(f"{'--out' if a.out else 'the results directory'} {out_dir}: {problem}")
    base = out_dir / f"{KIND}_{cfg.name}_{dt.datetime.now(dt.timezone.utc).strftime('%Y%m%dT%H%M%SZ')}"
    progress = printer()
    interrupted = fatal = None
    if a.from_runs:
        if a.attach:
            raise UserError("--from-runs and --attach exclude each other")
        runs, mode = runs_from_files(cfg, arms, [Path(p) for p in a.from_runs], warn=progress)
        stem = claim_stem(base, runs_file=False)
    else:
        attach = parse_attach(a.attach, arms) if a.attach else None
        chosen = None
        if attach:
            transport.set_run_deadline(a.deadline_s)  # the health checks too end by --deadline-s
            try:
                check_attached(attach)  # a dead URL is bad input: exit 2 before anything is written
            finally:
                transport.set_run_deadline(None)  # run_all sets it again, from its own start
        else:  # the interpreter, the port, the models, the launcher: exit 2 before anything is launched or written
            envs = [server_env(cfg, cfg.arms[x]) for x in arms]
            chosen = launcher.resolve(cfg, envs)
            cfg = launcher.with_launcher(cfg, chosen)
            preflight.check_launch(cfg, arms, envs)
            progress(f"launcher: {' '.join(chosen.command)} ({chosen.chosen})")
        mode = "attach" if attach else "launch"
        if not attach:
            check_target_layers(cfg)
        if cfg.grid:
            prompts.allowed_ids(cfg)  # what the grid's prompts are drawn from: exit 2 before anything is written
        out_dir.mkdir(parents=True, exist_ok=True)
        stem = claim_stem(base, runs_file=True)  # this run's own names: another run of this second has others
        runs = []
        transport.set_limits(limits)
        try:
            run_all(cfg, arms, repeats, stem, attach=attach, deadline_s=a.deadline_s, progress=progress,
                    on_run=runs.append, chosen=chosen)
        except KeyboardInterrupt as e:
            interrupted = str(e) or "Ctrl-C"
            progress(f"interrupted ({interrupted}): writing what was measured")
        except TeardownError as e:
            fatal = e
            progress(f"ABORT: {e}")
        finally:
            transport.set_run_deadline(None)
            transport.set_limits(transport.Limits())
    receipt = build_receipt(cfg, arms, runs, repeats=repeats, mode=mode, interrupted=interrupted,
                            fatal=str(fatal) if fatal else None)
    path = write_outputs(receipt, stem, plots_wanted=not a.no_plots, progress=progress)
    print(report_text(receipt))
    print(f"receipt: {path}")
    if fatal:
        raise fatal
    if interrupted:
        return 130
    return 0 if receipt["summary"]["passed"] else 1


def _limits_text(lim: transport.Limits) -> str:
    return f"{lim.first_byte_s:g},{lim.idle_s:g},{lim.total_s:g}"


def parse_limits(text: str | None) -> transport.Limits:
    """--request-timeouts FIRST,IDLE,TOTAL (seconds, each > 0 and <= limits.MAX_SECONDS, FIRST and IDLE <= TOTAL)."""
    if text is None:
        return transport.Limits()
    parts = text.split(",")
    try:
        vals = [float(x) for x in parts]
    except ValueError:
        vals = []
    if len(vals) != 3 or not all(math.isfinite(v) and 0 < v <= MAX_SECONDS for v in vals):
        raise UserError(f"--request-timeouts {text}: expected FIRST,IDLE,TOTAL, three numbers of seconds > 0 and "
                        f"<= {MAX_SECONDS} (a week) (default {_limits_text(transport.Limits())})")
    if max(vals[0], vals[1]) > vals[2]:
        raise UserError(f"--request-timeouts {text}: the first-byte and idle deadlines must not exceed the total")
    return transport.Limits(first_byte_s=vals[0], idle_s=vals[1], total_s=vals[2])


def _default_out() -> Path:
    root = repo_root()
    return (root if root else Path.cwd()) / "benchmark" / "results"


def parse_attach(items: list[str], arms: list[str]) -> dict[str, str]:
    named = [i for i in items if "=" in i.split("://", 1)[0]]
    if named and len(named) != len(items):
        raise UserError("--attach: give either ARM=URL for every server or plain URLs, not a mix")
    if named:
        out = {}
        for item in items:
            arm, url = item.split("=", 1)
            if arm not in arms:
                raise UserError(f"--attach {item}: arm {arm!r} is not among the selected arms "
                                f"({', '.join(arms)})")
            out[arm] = url.rstrip("/")
        missing = [x for x in arms if x not in out]
        if missing:
            raise UserError(f"--attach: no URL for arm(s) {', '.join(missing)} (or select fewer with --arms)")
        return out
    if len(items) != len(arms):
        raise UserError(f"--attach: {len(items)} URL(s) for {len(arms)} arm(s) ({', '.join(arms)}); "
                        "give one per arm, in that order, or use ARM=URL")
    return {arm: url.rstrip("/") for arm, url in zip(arms, items, strict=True)}


def check_attached(attach: dict[str, str]) -> None:
    for arm, url in attach.items():
        if not url.startswith(("http://", "https://")):
            raise UserError(f"--attach {arm}={url}: expected an http:// or https:// URL")
        up, seen = openai_health(url)
        if not up:
            raise UserError(f"--attach {arm}={url}: no healthy server there ({seen})")


def interleaved(arms: list[str], repeats: int) -> list[tuple[int, str]]:
    """A B C A B C ...: (repeat, arm) in the order the arms run."""
    return [(r, arm) for r in range(1, repeats + 1) for arm in arms]


def check_target_layers(cfg: BenchConfig) -> None:
    """[model] target_layers against the local target's config.json (bad input: exit 2, before any launch)."""
    want = cfg.model.target_layers
    conf = Path(cfg.model.target) / "config.json"
    if want is None or not conf.is_file():
        return
    try:
        have = json.loads(conf.read_text()).get("num_hidden_layers")
    except (OSError, ValueError) as e:
        raise UserError(f"{conf}: cannot read num_hidden_layers ({e})") from None
    if have != want:
        raise UserError(f"{cfg.path}: [model] target_layers = {want}, but {conf} says num_hidden_layers = {have}")


def run_all(cfg: BenchConfig, arms: list[str], repeats: int, stem: Path, *, attach: dict[str, str] | None,
            deadline_s: float | None, progress: Progress, on_run: Callable[[dict[str, Any]], None],
            chosen: launcher.Launcher | None = None) -> None:
    plan = interleaved(arms, repeats)
    host = {"versions": receipts.collect_versions(), "machine": nvidia.machine()}
    runs_path = stem.with_name(stem.name + "_runs.jsonl")
    t0 = time.monotonic()
    transport.set_run_deadline(deadline_s, t0)  # ends a request still running at the deadline
    longest = 0.0
    progress(f"{cfg.name}: {len(plan)} arm runs ({repeats} x {', '.join(arms)}), "
             f"{'attached servers' if attach else 'launching servers'}; runs -> {runs_path}")
    with procs.signals_as_interrupt():
        for i, (rep, arm) in enumerate(plan, 1):
            elapsed = time.monotonic() - t0
            if deadline_s is not None and elapsed + longest > deadline_s:
                progress(f"deadline: {elapsed:.0f} s gone, an arm run takes up to {longest:.0f} s, "
                         f"{deadline_s:.0f} s allowed: skipping the last {len(plan) - i + 1} arm run(s)")
                break
            progress(f"[{i}/{len(plan)}] repeat {rep}/{repeats}, arm {arm}")
            t = time.monotonic()
            rec = run_arm(cfg, cfg.arms[arm], rep, stem, url=attach.get(arm) if attach else None,
                          progress=progress, chosen=chosen)
            procs.raise_if_interrupted()  # a Ctrl-C Python dropped mid-arm: no next arm (procs: _interrupts)
            rec["host"] = host
            longest = max(longest, time.monotonic() - t)
            append_run(runs_path, cfg, rec)
            on_run(rec)
            if rec.get("fatal"):
                raise TeardownError(rec["error"])
