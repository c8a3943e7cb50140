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
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import errno
import hashlib
import json
import math
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ... import procs, receipts
from ...box import nvidia_smi as nvidia
from ...errors import UserError
from ...paths import os_reason, output_problem, repo_root
from . import (
    client,
    grid,
    grid_verdict,
    launcher,
    plots,
    preflight,
    prompts,
    sglang_api,
    trace,
    transport,
    triton_cache,
    vllm_api,
    window,
)
from .config import ArmSpec, BenchConfig, Prompt, VerdictSpec, load_config, select_arms, with_tp
from .server import (
    Server,
    ServerError,
    TeardownError,
    attached_server,
    busy_port,
    free_port,
    launched_server,
    openai_health,
    port_of,
)
from .verdict import aggregate, evaluate, is_number, metrics_problem, summary
from .window import fmt as _fmt

KIND = "bench-eagle3"
RUN_SCHEMA = "sglang-blackwell/bench-eagle3-run/1"
SERVER_FACTS = (  # what /server_info says about the server that was measured
    "version", "model_path", "tp_size", "speculative_algorithm", "speculative_draft_model_path",
    "speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens", "attention_backend",
    "disable_custom_all_reduce", "enforce_disable_flashinfer_allreduce_fusion",
    "flashinfer_allreduce_fusion_backend", "enable_flashinfer_allreduce_fusion", "cuda_graph_max_bs",
    "cuda_graph_max_bs_decode", "disable_radix_cache", "decode_log_interval", "skip_tokenizer_init")
MEASUREMENT = {
    "api": "workload.api: completions (streamed POST /v1/completions), chat (streamed POST "
           "/v1/chat/completions, one user message per prompt) or generate (SGLang's POST /generate); every "
           "request greedy (temperature 0), ignore_eos, max_tokens = output_len, and a run whose server produced "
           "fewer tokens (usage.completion_tokens, stream_options.include_usage; meta_info for /generate) fails",
    "tok_s": "client: output tokens of all requests at one concurrency / wall time from the first request "
             "sent to the last answer (closed loop: c clients, each `rounds` requests back to back)",
    "ttft_ms": "p50 over requests of the time to the first output-carrying chunk (streamed requests); "
               "non-streamed /generate: an idle streamed probe (3 requests, 8 tokens) after warm-up; "
               "ttft_ms_p99 alongside",
    "tpot_ms": "p50 over requests of (e2e - ttft) / (completion_tokens - 1); tpot_ms_p99 alongside",
    "itl_ms": "p50 of the gaps between consecutive output-carrying chunks, pooled over the requests of a "
              "level; itl_ms_p99 alongside. Per chunk, not per token: a speculative server streams the tokens "
              "of one verify step in one chunk (tokens_per_chunk = output tokens / chunks)",
    "e2e_ms": "p50 over requests of send to end of stream; e2e_ms_p99 alongside",
    "percentiles": "linear interpolation between closest ranks (numpy's default); across repeats the "
                   "aggregate keeps median/min/max/values of each per-run value",
    "accept_len": "sum(completion_tokens) / sum(spec_verify_ct) over the measured requests' meta_info "
                  "(/generate; accepted drafts + bonus token per verify); over the OpenAI API (no per-request "
                  "counts) SGLang's /server_info avg_spec_accept_length after the reset (accept_len_source "
                  "server_info), or vLLM's /metrics 1 + accepted / drafts over the window (source metrics); "
                  "accept_len_server: /server_info avg_spec_accept_length after a reset (POST "
                  "/set_internal_state), rolled up every decode_log_interval steps, so approximate",
    "step_ms": "SGLANG_RECORD_STEP_TIME=1 step_time_dict: seconds per decode iteration (one draft+verify "
               "round on speculative servers), one entry per decode log interval; 20th percentile of the "
               "entries added during the window at batch size = concurrency (an interval that spans the "
               "gap between two requests only reads high; sglang's bench_speculative takes the same "
               "percentile); step_ms_median alongside",
    "profile_ms": "optional torch profiler window (/start_profile): GPU time of SGLang's spans step[DECODE], "
                  "step[TARGET_VERIFY], draft, draft_extend (0.5.14+), one window over all streams per step; "
                  "inside it, GPU time of the all-reduce kernels (FlashInfer fused AR+residual+RMSNorm or "
                  "NCCL; includes waiting for the peer rank) and of the separate residual-add+RMSNorm",
    "verify_ranks": "the same window's traces of every TP rank (SGLang writes one per rank): per verify step, "
                    "max over ranks of (GPU window - time waiting for another rank), where a rank's wait at "
                    "each all-reduce or other collective is its approach (kernel duration + the device's idle "
                    "time just before it) minus the shortest approach of any rank to the same call; median over "
                    "every step of every run (summary verify_ms_fusion_on/off when both fusion arms have it). "
                    "Per call: the fused kernel's and NCCL all-reduce's duration at the last rank to arrive "
                    "(min over ranks), the add+RMSNorm kernel's duration; medians (bench/eagle3/trace.py)",
}

Progress = Callable[[str], None]


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


def _progress_printer() -> Progress:
    t0 = time.monotonic()

    def progress(msg: str) -> None:
        print(f"[{time.monotonic() - t0:6.0f}s] {msg}", file=sys.stderr, flush=True)

    return progress


def run(a: argparse.Namespace) -> int:
    cfg = load_config(a.config)
    if getattr(a, "tp", None) is not None:
        cfg = with_tp(cfg, a.tp)
    arms = select_arms(cfg, a.arms)
    if a.repeats is not None and a.repeats < 1:
        raise UserError(f"--repeats: expected >= 1, got {a.repeats}")
    if a.deadline_s is not None and not a.deadline_s > 0:
        raise UserError(f"--deadline-s: expected a number of seconds > 0, got {a.deadline_s}")
    limits = parse_limits(getattr(a, "request_timeouts", None))
    repeats = a.repeats or cfg.workload.repeats
    out_dir = Path(a.out) if a.out else _default_out()
    problem = output_problem(out_dir, directory=True)  # before anything is launched
    if problem:
        raise UserError(f"{'--out' if a.out else 'the results directory'} {out_dir}: {problem}")
    base = out_dir / f"{KIND}_{cfg.name}_{dt.datetime.now(dt.timezone.utc).strftime('%Y%m%dT%H%M%SZ')}"
    progress = _progress_printer()
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
            check_attached(attach)  # a dead URL is bad input: exit 2 before anything is written
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
    """--request-timeouts FIRST,IDLE,TOTAL (seconds, each > 0, FIRST and IDLE <= TOTAL)."""
    if text is None:
        return transport.Limits()
    parts = text.split(",")
    try:
        vals = [float(x) for x in parts]
    except ValueError:
        vals = []
    if len(vals) != 3 or not all(math.isfinite(v) and v > 0 for v in vals):
        raise UserError(f"--request-timeouts {text}: expected FIRST,IDLE,TOTAL, three numbers of seconds > 0 "
                        f"(default {_limits_text(transport.Limits())})")
    if max(vals[0], vals[1]) > vals[2]:
        raise UserError(f"--request-timeouts {text}: the first-byte and idle deadlines must not exceed the total")
    return transport.Limits(first_byte_s=vals[0], idle_s=vals[1], total_s=vals[2])


def claim_stem(base: Path, *, runs_file: bool) -> Path:
    """`base`, or `base-2`, `base-3`, ...: the first whose receipt and runs file are nobody's. With runs_file, the
    runs file is created here (exclusively): two runs with one --out in the same second never share one, and
    neither overwrites the other's receipt."""
    for n in range(1, 1000):
        stem = base if n == 1 else base.with_name(f"{base.name}-{n}")
        runs, receipt = stem.with_name(stem.name + "_runs.jsonl"), stem.with_name(stem.name + ".json")
        if not runs_file:
            if not runs.exists() and not receipt.exists():
                return stem
            continue
        try:
            os.close(os.open(runs, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        except FileExistsError:
            continue
        except OSError as e:
            raise UserError(f"{runs}: cannot create it ({os_reason(e)}); nothing was run") from None
        if receipt.exists():  # a --from-runs receipt of this second
            runs.unlink()
            continue
        return stem
    raise UserError(f"{base}: 999 runs of this config in this second already have results in {base.parent}")


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


def server_command(cfg: BenchConfig, arm: ArmSpec, port: int) -> list[str]:
    cmd = [*cfg.server.launcher, "--model-path", cfg.model.target, "--tp-size", str(cfg.server.tp),
           "--host", cfg.server.host, "--port", str(port)]
    if cfg.model.tokenizer == "none":
        cmd.append("--skip-tokenizer-init")
    elif cfg.model.tokenizer != "target":
        cmd += ["--tokenizer-path", cfg.model.tokenizer]
    cmd += cfg.server.args
    if arm.speculative:
        cmd += [*cfg.speculative_args, "--speculative-draft-model-path", str(cfg.model.draft)]
    cmd += arm.args
    return cmd


def server_env(cfg: BenchConfig, arm: ArmSpec) -> dict[str, str]:
    env = dict(os.environ)
    env.update(cfg.server.env)
    env.update(arm.env)
    if cfg.server.record_step_time:
        env["SGLANG_RECORD_STEP_TIME"] = "1"
    return env


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
            rec["host"] = host
            longest = max(longest, time.monotonic() - t)
            _append_run(runs_path, cfg, rec)
            on_run(rec)
            if rec.get("fatal"):
                raise TeardownError(rec["error"])


def _append_run(path: Path, cfg: BenchConfig, rec: dict[str, Any]) -> None:
    """One whole record or none: a write that fails part way (a full disk) is cut back to the records before it,
    and the run stops there (exit 2), saying how to build the receipt from what the file holds."""
    line = {"schema": RUN_SCHEMA, "config": cfg.name, "config_sha256": cfg.sha256, "run": rec}
    data = memoryview((json.dumps(line, default=str) + "\n").encode())
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        size = os.fstat(fd).st_size
        try:
            while data:
                data = data[os.write(fd, data):]
            os.fsync(fd)
        except OSError as e:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, size)
            raise UserError(f"{path}: cannot append the run of arm {rec.get('arm')} repeat {rec.get('repeat')} "
                            f"({os_reason(e)}); the file keeps the whole runs before it: make room, then build "
                            f"the receipt with --from-runs {path}") from None
    finally:
        os.close(fd)


# runs recorded before the profiler's per-stream GPU annotations were merged into one window per step (their
# source says exactly this) counted every stream's span as a step: their stage times are not GPU step times
PER_STREAM_PROFILE_SOURCE = "GPU (gpu_user_annotation)"


def _valid_profile(profile: dict[str, Any] | None) -> dict[str, Any] | None:
    if profile and profile.get("source") == PER_STREAM_PROFILE_SOURCE and profile.get("stages"):
        return {**profile, "stages": {}, "discarded_stages": profile["stages"],
                "discarded": "recorded per CUDA stream, not per step (bench/trace.py before 2026-11-30): "
                             "not GPU step times"}
    return profile


def read_runs(cfg: BenchConfig, paths: list[Path], warn: Progress | None = None) -> list[dict[str, Any]]:
    """Every run of the files, in order. A last line without its newline that is not JSON is a write that did not
    finish (a full disk, a killed harness): ignored, with a warning; anything else malformed is bad input."""
    runs = []
    for p in paths:
        if not p.is_file():
            raise UserError(f"--from-runs {p}: not found")
        try:
            text = p.read_bytes().decode("utf-8")
        except UnicodeDecodeError as e:
            raise UserError(f"--from-runs {p}: not UTF-8 text (byte {e.start}: {e.reason})") from None
        except OSError as e:
            raise UserError(f"--from-runs {p}: cannot read ({e.strerror or e})") from None
        lines = text.splitlines()
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                if n == len(lines) and not text.endswith("\n"):
                    whole = sum(1 for r in runs if r["source"].startswith(f"{p.name}:"))
                    (warn or _progress_printer())(
                        f"warning: {p}:{n}: the last line is cut off (no newline, not JSON: a write that did not "
                        f"finish): ignored; using the {whole} whole run(s) before it")
                    break
                raise UserError(f"{p}:{n}: not JSON: {e}") from None
            if not isinstance(obj, dict):
                raise UserError(f"{p}:{n}: expected a JSON object, got {type(obj).__name__}")
            if obj.get("schema") != RUN_SCHEMA:
                raise UserError(f"{p}:{n}: schema {obj.get('schema')!r}, expected {RUN_SCHEMA!r}")
            if obj.get("config_sha256") != cfg.sha256:
                theirs = str(obj.get("config_sha256"))[:12]
                raise UserError(f"{p}:{n}: measured with a different config than {cfg.path} "
                                f"(config {obj.get('config')!r}, sha256 {theirs}... vs {cfg.sha256[:12]}...)")
            problem = run_problem(obj.get("run"), cfg)
            if problem:
                raise UserError(f"{p}:{n}: run {problem}")
            run = dict(obj["run"], source=f"{p.name}:{n}")
            run["profile"] = _valid_profile(run.get("profile"))
            run["repeat"] = sum(1 for r in runs if r["arm"] == run["arm"]) + 1  # 1..N over all files
            runs.append(run)
    return runs


def runs_from_files(cfg: BenchConfig, arms: list[str], paths: list[Path],
                    warn: Progress | None = None) -> tuple[list[dict[str, Any]], str]:
    """--from-runs: the runs of `arms` in the files (read_runs), and the mode the receipt states ("launch",
    "attach", "attach+launch"; "none" without runs)."""
    runs = [r for r in read_runs(cfg, paths, warn=warn) if r["arm"] in arms]
    return runs, "+".join(sorted({r["mode"] for r in runs})) or "none"


def run_problem(run: Any, cfg: BenchConfig) -> str | None:
    """What is wrong with a recorded arm run (the shape run_arm writes and the receipt reads); None: nothing."""
    if not isinstance(run, dict):
        return f"is {type(run).__name__}, expected an object"
    if run.get("arm") not in cfg.arms:
        return f"arm {run.get('arm')!r} is not an arm of {cfg.path}"
    if not isinstance(run.get("mode"), str):
        return f"mode {run.get('mode')!r} is not a string"
    for key, kinds in (("error", (str, type(None))), ("server", (dict, type(None))), ("profile", (dict, type(None))),
                       ("host", (dict, type(None))), ("levels", (dict,))):
        if not isinstance(run.get(key), kinds):
            return f"{key} {run.get(key)!r:.60} has the wrong type"
    for c, lv in run["levels"].items():
        if (problem := metrics_problem(f"levels.{c}", lv)) is not None:
            return problem
    host = run.get("host")
    if host is not None and not (isinstance(host.get("machine"), dict) and isinstance(host.get("versions"), dict)):
        return "host lacks machine and versions objects"
    stages = (run.get("profile") or {}).get("stages", {})
    if not isinstance(stages, dict):
        return "profile.stages is not an object"
    for name, st in stages.items():
        if not (isinstance(st, dict) and is_number(st.get("median_ms"))
                and all(is_number(st[k]) for k in ("allreduce_ms", "add_rmsnorm_ms") if k in st)):
            return f"profile.stages.{name} lacks numeric median_ms (and allreduce_ms, add_rmsnorm_ms)"
    if cfg.grid and (problem := grid_verdict.grid_run_problem(run)):
        return problem
    return _verify_ranks_problem((run.get("profile") or {}).get("verify_ranks"))


def _verify_ranks_problem(v: Any) -> str | None:
    """What verdict.profile_verify would trip over in a recorded profile.verify_ranks; None: nothing."""
    if v is None:
        return None
    if not isinstance(v, dict):
        return "profile.verify_ranks is not an object"
    for k in ("verify_ms", "fused_per_verify", "nccl_ar_per_verify", "add_rmsnorm_per_verify"):
        if v.get(k) is not None and not is_number(v[k]):
            return f"profile.verify_ranks.{k} = {v[k]!r:.60} is not a number"
    for k in ("fused_call_us", "nccl_call_us", "add_rmsnorm_us", "rank0_fused_call_us", "rank0_nccl_call_us"):
        if v.get(k) is not None and not (isinstance(v[k], dict) and is_number(v[k].get("p50"))):
            return f"profile.verify_ranks.{k} lacks a numeric p50"
    for k in ("window_ms", "wait_ms", "busy_ms", "idle_ms", "idle_at_calls_ms", "wait_share"):
        if v.get(k) is not None and not (isinstance(v[k], list)
                                         and all(x is None or is_number(x) for x in v[k])):
            return f"profile.verify_ranks.{k} is not a list of numbers (one per rank)"
    rows = v.get("per_step")
    if rows is not None and not (isinstance(rows, list) and all(isinstance(r, list) and r and is_number(r[0])
                                                                 for r in rows)):
        return "profile.verify_ranks.per_step rows must start with a step's cost (us)"
    return None


# ---- one arm run ------------------------------------------------------------------------------------------

def run_arm(cfg: BenchConfig, arm: ArmSpec, repeat: int, stem: Path, *, url: str | None,
            progress: Progress, chosen: launcher.Launcher | None = None) -> dict[str, Any]:
    """One arm run, recorded. `chosen`: how the launcher's interpreter was chosen (launcher.resolve; None: cfg's
    launcher as written)."""
    rec: dict[str, Any] = {"arm": arm.name, "repeat": repeat, "mode": "attach" if url else "launch",
                           "started": dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat(),
                           "url": url, "startup_s": None, "server": {}, "levels": {}, "profile": None,
                           "teardown": None, "log": None, "error": None}
    try:
        if url:
            measure(cfg, arm, attached_server(url), rec, progress, launched=False)
            return rec
        port = cfg.server.port or free_port(cfg.server.host)
        busy = busy_port(cfg.server.host, port)
        if busy:  # someone took the port since the last arm: never measure their server as ours
            raise ServerError(f"{busy}: not launching there ([server] port = 0 picks a free port per launch)")
        url = f"http://{cfg.server.host}:{port}"
        log = stem.with_name(stem.name + "_logs") / f"r{repeat}-{_safe(arm.name)}.log"
        rec.update(url=url, log=str(log),
                   launcher=(chosen or launcher.Launcher(cfg.server.launcher, launcher.AS_WRITTEN)).record())
        cmd = server_command(cfg, arm, port)
        progress(f"  launching: {' '.join(cmd)}")
        server = Server(url=url, log_path=log)
        try:
            with launched_server(server, cmd, server_env(cfg, arm), progress=progress,
                                 startup_timeout_s=cfg.server.startup_timeout_s,
                                 grace_s=cfg.server.teardown_grace_s,
                                 own_listener=preflight.runs_the_server(cfg.server.launcher)):
                rec["startup_s"] = round(server.startup_s or 0.0, 2)
                progress(f"  healthy after {rec['startup_s']:.1f} s")
                measure(cfg, arm, server, rec, progress)
        finally:
            if server.teardown:
                rec["teardown"] = server.teardown
                gpu = server.teardown.get("gpu", {})
                progress(f"  torn down in {server.teardown['teardown_s']:.1f} s: session gone"
                         + (", no GPU process of ours left" if gpu.get("checked") else " (no nvidia-smi)")
                         + (" (needed SIGKILL)" if server.teardown.get("sigkill") else ""))
    except TeardownError as e:  # recorded with what was measured; run_all then stops the benchmark
        rec.update(error=str(e), fatal=True)
        progress(f"  TEARDOWN FAILED: {e}")
    except (ServerError, client.RequestError, BenchRunError) as e:
        rec["error"] = str(e)
        progress(f"  FAILED: {str(e).splitlines()[0]}")
    except Exception as e:  # anything else costs this arm run, not the runs already measured
        rec["error"] = f"{type(e).__name__}: {e}"
        progress(f"  FAILED: {rec['error'].splitlines()[0]}")
    return rec


class BenchRunError(RuntimeError):
    pass


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)


def check_identity(info: dict[str, Any], cfg: BenchConfig, arm: ArmSpec, url: str) -> None:
    """The server must be what the arm says: speculative or not, and the configured TP size."""
    alg = info.get("speculative_algorithm")
    if arm.speculative and not alg:
        raise BenchRunError(f"arm {arm.name!r} is speculative but {url} reports "
                            f"speculative_algorithm={alg!r}")
    if not arm.speculative and alg:
        raise BenchRunError(f"arm {arm.name!r} is the non-speculative baseline but {url} reports "
                            f"speculative_algorithm={alg!r}")
    tp = info.get("tp_size")
    if tp is not None and tp != cfg.server.tp:
        raise BenchRunError(f"arm {arm.name!r}: {url} runs tp_size={tp}, "
                            f"config {cfg.path} says tp={cfg.server.tp}")


def check_launched(info: dict[str, Any], cfg: BenchConfig, port: int, url: str) -> None:
    """A server we launched reports our launch arguments in /server_info: the port we gave it and, for a local
    model path (sglang rewrites a hub id it downloads through ModelScope), the model we passed."""
    want: dict[str, Any] = {"port": port}
    if os.path.exists(cfg.model.target):
        want["model_path"] = cfg.model.target
    for key, value in want.items():
        if key in info and info[key] != value:
            raise BenchRunError(f"{url} reports {key}={info[key]!r}, but we launched it with {key}={value!r}: "
                                "not our server")


def endpoint(cfg: BenchConfig, url: str) -> client.Endpoint:
    """Where and how this config's requests go; the OpenAI APIs name the model GET /v1/models lists."""
    w = cfg.workload
    if w.api == "generate":
        return client.Endpoint(url=url, api="generate", stream=w.stream)
    return client.Endpoint(url=url, api=w.api, model=client.model_id(url, cfg.model.target))


def check_peer_identity(metrics: vllm_api.Metrics, arm: ArmSpec, url: str) -> None:
    """A vLLM server registers its spec-decode counters only with a speculative config."""
    spec = metrics.drafts is not None
    if arm.speculative and not spec:
        raise BenchRunError(f"arm {arm.name!r} is speculative but {url} (vLLM) exposes no "
                            f"{vllm_api.DRAFTS} counter at /metrics (no --speculative-config?)")
    if not arm.speculative and spec:
        raise BenchRunError(f"arm {arm.name!r} is the non-speculative baseline but {url} (vLLM) exposes "
                            f"{vllm_api.DRAFTS} at /metrics (started with --speculative-config)")


def measure(cfg: BenchConfig, arm: ArmSpec, server: Server, rec: dict[str, Any], progress: Progress, *,
            launched: bool = True) -> None:
    """Warm up, then every concurrency level. SGLang's extras (server facts, identity check, step times, spec
    counters, cache flush, profiler window) need /server_info: a server we launched must answer it; an attached
    one that does not (vLLM, any OpenAI-compatible server) is measured without them, said in one line."""
    url, w = server.url, cfg.workload
    info = sglang_api.server_info(url) if launched else sglang_api.server_info_or_none(url)
    ep = endpoint(cfg, url)
    peer: vllm_api.Metrics | None = None
    if info is not None:
        if launched:
            check_launched(info, cfg, port_of(url), url)
        check_identity(info, cfg, arm, url)
        rec["server"] = {k: info.get(k) for k in SERVER_FACTS}
        rec["server"]["records_step_time"] = sglang_api.step_times(info) is not None
        rec["server"]["engine"] = "sglang"
        bad_steps = sglang_api.step_times_problem(info)
        if bad_steps:  # an optional source: the measurement goes on without step times
            progress(f"  warning: {url}/server_info: {bad_steps}: ignored, no step times for this arm run")
    else:
        peer = vllm_api.metrics(url)
        junk = vllm_api.junk_warning(url, peer)
        if junk:
            progress("  " + junk)
        engine = "vllm" if peer is not None and peer.vllm else "openai-compatible"
        version = vllm_api.version(url) if engine == "vllm" else None
        rec["server"] = {"engine": engine, "engine_version": version}
        if engine == "vllm":
            check_peer_identity(peer, arm, url)
        else:
            peer = None
        progress(f"  {url}: no SGLang /server_info ({engine}{' ' + version if version else ''}): skipping "
                 "the identity check, server facts, step times, spec-counter reset, cache flush and profiler "
                 "window" + ("; accept length from vLLM's /metrics spec-decode counters"
                             if peer is not None and arm.speculative else ""))
    rec["server"].update(api=w.api, model_id=ep.model)
    srv = window.Server(ep=ep, sglang=info is not None, speculative=arm.speculative, peer_metrics=peer is not None)
    warm_ep = dataclasses.replace(ep, stream=False) if ep.api == "generate" else ep  # /generate: unstreamed
    if cfg.grid:
        def profile(prompt: Prompt, info: dict[str, Any] = info or {}) -> dict[str, Any]:
            return profile_window(cfg, server, info, progress, ep=warm_ep, prompt=prompt, kernel_classes=True)

        grid.measure_grid(cfg, arm, srv, rec, progress, ids=prompts.allowed_ids(cfg),
                          triton_dir=triton_cache.cache_dir(server_env(cfg, arm)) if launched else None,
                          profile=profile if info is not None else None)
        return
    for c in w.concurrency:  # warm-up: every batch size the window uses (JIT kernels compile on first use)
        client.run_level(warm_ep, w.prompts, concurrency=c, rounds=1, output_len=w.warmup_output_len,
                         prompt_offset=len(w.prompts) - c)
    ttft_probe = None if w.stream else client.ttft_probe(ep, w.prompts[0], n=3)
    offset = 0
    for c in w.concurrency:
        m = window.measure(srv, w.prompts, concurrency=c, rounds=w.rounds, output_len=w.output_len,
                           prompt_offset=offset, ttft_probe=ttft_probe)
        offset += c * w.rounds
        rec["levels"][str(c)] = m
        progress(f"  c={c}: " + window.line(m))
    if cfg.profile.steps and arm.name in cfg.profile.arms and info is not None:
        rec["profile"] = profile_window(cfg, server, info, progress, ep=warm_ep)


def profile_window(cfg: BenchConfig, server: Server, info: dict[str, Any], progress: Progress, *,
                   ep: client.Endpoint | None = None, prompt: Prompt | None = None,
                   kernel_classes: bool = False) -> dict[str, Any]:
    """Torch profiler over cfg.profile.steps forward batches of one request. SGLang writes one trace per TP rank:
    rank 0's gives the stage times (trace.stage_times), all of them the verify time with the waits for the other
    rank taken out and the per-call kernel medians (trace.verify_across_ranks, "verify_ranks"). Every rank's
    trace is kept next to the server log (<log stem>.trace.json.gz for rank 0, <log stem>.TP-<r>.trace.json.gz
    for rank r; gzipped as sglang writes them), or deleted when there is no log (--attach). The server writes
    the traces, so this works for servers on this machine only. `prompt`: the request's (default the first of the
    prompt file); `kernel_classes`: also rank 0's GPU time per kernel class per step (trace.kernel_classes)."""
    steps = cfg.profile.steps
    per_step = int(info.get("speculative_num_draft_tokens") or 1)
    ranks = int(info.get("tp_size") or cfg.server.tp or 1)
    tmp = Path(tempfile.mkdtemp(prefix="sgl-bench-profile-"))
    os.chmod(tmp, 0o777)
    try:
        sglang_api.start_profile(server.url, str(tmp), steps, prefix="bench")
        client.send(ep or client.Endpoint(url=server.url, api="generate", stream=False),
                    prompt or cfg.workload.prompts[0], steps * per_step + 16)
        sglang_api.stop_profile(server.url)
        paths = _wait_traces(tmp, ranks, cfg.profile.timeout_s)
        res = _read_traces(paths, time.monotonic() + cfg.profile.timeout_s, kernel_classes)
        res.update(steps=steps, trace_bytes=paths[0].stat().st_size)
        missing = [r for r in range(ranks) if r >= len(paths)]
        if missing:
            res["verify_ranks"]["missing_ranks"] = missing
        if server.log_path is not None:
            kept = []
            for r, path in enumerate(paths):
                gz = ".gz" if path.name.endswith(".gz") else ""
                dest = server.log_path.with_suffix((f".TP-{r}" if r else "") + ".trace.json" + gz)
                shutil.copyfile(path, dest)
                kept.append(dest.name)
            res["trace"], res["traces"] = kept[0], kept
        progress("  profile: " + ", ".join(
            f"{s} {v['median_ms']:.3f} ms" + (f" (all-reduce {v['allreduce_ms']:.3f} ms in {v['allreduce_calls']:g}"
                                             f" calls, add+RMSNorm {v['add_rmsnorm_ms']:.3f} ms)"
                                             if "allreduce_ms" in v else "")
            for s, v in res["stages"].items())
                 + f" [{res['source']}]")
        progress("  " + verify_ranks_line(res["verify_ranks"]))
        return res
    except Exception as e:  # a profiler problem must not cost the measurement
        progress(f"  profile window failed: {type(e).__name__}: {e}")
        return {"error": f"{type(e).__name__}: {e}"[:500]}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def verify_ranks_line(v: dict[str, Any]) -> str:
    """One progress line about profile.verify_ranks (every value may be missing: a progress line must not cost
    the profile)."""
    if v.get("verify_ms") is None:
        return f"verify across {v.get('ranks')} rank(s): {v.get('why', 'no steps')}"

    def ms(key: str) -> str:
        return ", ".join(_fmt(x) for x in v.get(key) or []) or "-"

    calls = [f"{label} {_fmt((v.get(key) or {}).get('p50'))} us" for label, key in (
        ("fused", "fused_call_us"), ("NCCL all-reduce", "nccl_call_us"), ("add+RMSNorm", "add_rmsnorm_us"))
        if v.get(key)]
    return (f"verify across {v.get('ranks')} rank(s), {v.get('steps')} steps: {_fmt(v['verify_ms'])} ms with the "
            f"waits for the other rank removed (windows {ms('window_ms')} ms, waits {ms('wait_ms')} ms per rank); "
            f"{_count(v.get('fused_per_verify'))} fused all-reduces per verify; per call " + (", ".join(calls) or "-"))


def _count(v: float | None) -> str:
    return "-" if v is None else f"{v:g}"


def _rank_of(name: str) -> int | None:
    m = re.search(r"-TP-(\d+)(?=[-.])", name)
    return int(m.group(1)) if m and ".trace.json" in name else None


def _wait_traces(d: Path, ranks: int, timeout_s: float) -> list[Path]:
    """Every rank's trace, rank 0 first, once each file's size has stayed the same over two polls. At the
    timeout, the ranks found so far in order (rank 0 is needed; a missing rank is the receipt's to say)."""
    deadline = time.monotonic() + timeout_s
    sizes: dict[int, int] = {}
    stable: dict[int, Path] = {}
    while True:
        found = {r: p for p in sorted(d.glob("*.trace.json*")) if (r := _rank_of(p.name)) is not None}
        for r, p in found.items():
            size = p.stat().st_size
            if size > 0 and sizes.get(r) == size:
                stable[r] = p
            else:
                stable.pop(r, None)
            sizes[r] = size
        if all(r in stable for r in range(ranks)) or time.monotonic() >= deadline:
            break
        time.sleep(1.0)
    if 0 not in stable:
        raise BenchRunError(f"no rank-0 trace in {d} after {timeout_s:.0f} s "
                            "(a server on another machine writes it there)")
    out = []
    for r in range(ranks):
        if r not in stable:
            break
        out.append(stable[r])
    return out


def _read_traces(paths: list[Path], deadline: float, kernel_classes: bool = False) -> dict[str, Any]:
    """trace.profile_traces, again after a pause while a file is still being written (a gzip stream cut short)."""
    while True:
        try:
            return trace.profile_traces(paths, classes=kernel_classes)
        except (EOFError, ValueError, OSError):
            if time.monotonic() >= deadline:
                raise
            time.sleep(2.0)


# ---- receipt, report, plots ---------------------------------------------------------------------------

def build_receipt(cfg: BenchConfig, arms: list[str], runs: list[dict[str, Any]], *, repeats: int, mode: str,
                  interrupted: str | None = None, fatal: str | None = None) -> dict[str, Any]:
    problems = [f"arm {r['arm']} repeat {r['repeat']}: {r['error'].splitlines()[0]}"
                for r in runs if r.get("error")]
    per_arm = {a: sum(1 for r in runs if r["arm"] == a) for a in arms}
    short = {a: n for a, n in per_arm.items() if n < repeats}
    if short:
        problems.append("incomplete: " + ", ".join(f"{a} ran {n} of {repeats}" for a, n in short.items()))
    if interrupted:
        problems.append(f"interrupted: {interrupted}")
    if fatal:
        problems.append(f"aborted: {fatal}")
    v = cfg.verdict
    spec = tuple(a for a in v.speculative if a in arms)
    if v.baseline not in arms:
        problems.append(f"the verdict's baseline arm {v.baseline!r} was not run (--arms)")
    notes = []
    if not spec:
        others = tuple(a for a in arms if cfg.arms[a].speculative)
        if others:  # e.g. a peer's baseline + EAGLE-3 pair: --arms baseline,eagle3 --attach ...
            notes.append(f"the verdict's speculative arm(s) {', '.join(v.speculative)} not run (--arms): "
                         f"judging {', '.join(others)} instead")
            spec = others
        else:
            problems.append(f"none of the verdict's speculative arms ({', '.join(v.speculative)}) "
                            "was run (--arms)")
    fusion_ok = bool(v.fusion_on and v.fusion_on in arms and v.fusion_off in arms)
    v_run = dataclasses.replace(v, speculative=spec or v.speculative,
                                fusion_on=v.fusion_on if fusion_ok else None,
                                fusion_off=v.fusion_off if fusion_ok else None,
                                min_fusion_gain=v.min_fusion_gain if fusion_ok else None)
    agg, verdict = judged(cfg, runs, arms, v_run, problems)
    verdict["notes"] = notes
    host = next((r["host"] for r in runs if r.get("host")), None)  # the machine that measured
    m = host["machine"] if host else nvidia.machine()
    versions = dict(host["versions"]) if host else receipts.collect_versions()
    served = sorted({str(r["server"].get("version")) for r in runs if r.get("server", {}).get("version")
                     and r["server"].get("engine", "sglang") == "sglang"})  # runs before engine: all SGLang
    if served:
        versions["sglang"] = served[0] if len(served) == 1 else served
    peers = sorted({str(r["server"]["engine_version"]) for r in runs
                    if (r.get("server") or {}).get("engine") == "vllm" and r["server"].get("engine_version")})
    if peers:
        versions["vllm"] = peers[0] if len(peers) == 1 else peers
    c1_verdict = grid_verdict.smallest_context(verdict, cfg.workload.contexts[0]) if cfg.grid else verdict
    summ = summary(agg, c1_verdict, v_run, machine=nvidia.machine_label(m), tp=cfg.server.tp,
                   config=cfg.name, api=cfg.workload.api_family, engine=engine_label(runs, v_run.speculative[0]),
                   target_layers=cfg.model.target_layers)
    if cfg.grid:
        summ.update(grid_verdict.grid_summary(verdict, v_run, cfg.workload.contexts))
    extra = {"crosscheck": [{"arm": r["arm"], "repeat": r["repeat"], **x} for r in runs
                            for x in r.get("crosscheck") or []]} if cfg.grid else {}
    return receipts.make_receipt(
        KIND, summ, tp=cfg.server.tp, machine=m, versions=versions,
        config={"name": cfg.name, "path": str(cfg.path), "sha256": cfg.sha256, "content": cfg.raw},
        mode=mode,
        arms={a: {"speculative": cfg.arms[a].speculative, "args": list(cfg.arms[a].args),
                  "env": cfg.arms[a].env} for a in arms},
        workload=workload_facts(cfg, runs, repeats), aggregate=agg, verdict=verdict,
        measurement={**MEASUREMENT, **(grid.MEASUREMENT if cfg.grid else {})},
        launchers=launcher.receipt_launchers(runs), runs=runs,
        complete=not short and not interrupted and not fatal, **extra)


def judged(cfg: BenchConfig, runs: list[dict[str, Any]], arms: list[str], v: VerdictSpec,
           problems: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The aggregate and the verdict: per concurrency, or per cell in grid mode (grid_verdict)."""
    conc, spec_arms = cfg.workload.concurrency, [a for a in arms if cfg.arms[a].speculative]
    if cfg.grid:
        agg = grid_verdict.grid_aggregate(runs, arms, cfg.workload.contexts, conc)
        return agg, grid_verdict.evaluate_grid(agg, v, cfg.workload.contexts, conc, problems=problems,
                                               spec_arms=spec_arms)
    agg = aggregate(runs, arms, conc)
    return agg, evaluate(agg, v, conc, problems=problems, spec_arms=spec_arms)


def workload_facts(cfg: BenchConfig, runs: list[dict[str, Any]], repeats: int) -> dict[str, Any]:
    w = cfg.workload
    out = {"output_len": w.output_len, "concurrency": list(w.concurrency), "rounds": w.rounds, "repeats": repeats,
           "stream": w.stream, "api": w.api}
    if w.grid:
        return {**grid.workload_facts(cfg, runs), **out}
    assert w.prompts_path is not None
    sha = hashlib.sha256(w.prompts_path.read_bytes()).hexdigest()
    return {"prompts": str(w.prompts_path), "prompts_sha256": sha, "num_prompts": len(w.prompts), **out}


def engine_label(runs: list[dict[str, Any]], arm: str) -> str | None:
    """What served `arm`: "sglang 0.5.9", "vllm 0.18.0", "openai-compatible" (runs recorded before the
    harness told engines apart were all SGLang)."""
    for r in runs:
        srv = r.get("server") or {}
        if r["arm"] != arm or not srv:
            continue
        engine = srv.get("engine", "sglang")
        version = srv.get("version") if engine == "sglang" else srv.get("engine_version")
        return f"{engine} {version}" if version else engine
    return None


def write_outputs(receipt: dict[str, Any], stem: Path, *, plots_wanted: bool, progress: Progress) -> Path:
    stem.parent.mkdir(parents=True, exist_ok=True)
    files: list[str] = []
    if plots_wanted:
        if plots.available():
            try:
                files = [p.name for p in plots.plot_receipt(receipt, stem)]
            except Exception as e:  # a plotting problem must not cost the receipt
                progress(f"plots failed: {type(e).__name__}: {e}")
        else:
            progress("matplotlib not installed: no plots (pip install 'sglang-blackwell[plot]'; "
                     "then rerun with --from-runs to draw them)")
    receipt["plots"] = files
    return _write_new_receipt(receipt, stem, progress)


def _write_new_receipt(receipt: dict[str, Any], stem: Path, progress: Progress) -> Path:
    """The receipt as <stem>.json, never over another run's: written to a temporary sibling and linked into place
    (which fails if the name is taken: then the next free stem's name)."""
    probs = receipts.validate_receipt(receipt)
    if probs:
        raise ValueError(f"refusing to write an invalid receipt for {stem}: {probs}")
    text = json.dumps(receipt, indent=1, sort_keys=False, default=str) + "\n"
    path = stem.with_name(stem.name + ".json")
    tmp = stem.with_name(f".{stem.name}.json.tmp")
    try:
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        while True:
            try:
                os.link(tmp, path)
                return path
            except FileExistsError:
                other = claim_stem(stem, runs_file=False)
                progress(f"{path.name} was written by another run meanwhile: this receipt is {other.name}.json")
                path = other.with_name(other.name + ".json")
            except OSError as e:  # a file system without hard links: the name was free a moment ago
                if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK) or path.exists():
                    raise
                os.replace(tmp, path)
                return path
    except OSError as e:
        raise UserError(f"{path}: cannot write the receipt ({os_reason(e)}); nothing was written") from None
    finally:
        tmp.unlink(missing_ok=True)


def report_text(receipt: dict[str, Any]) -> str:
    s = receipt["summary"]
    lines = [f"bench eagle3 {s['config']} on {s['machine']}, TP={s['tp']} ({receipt['mode']}, "
             f"api {receipt['workload'].get('api', 'generate')})"]
    if receipt["workload"].get("contexts"):
        lines.append(f"(grid: this table is context {receipt['workload']['contexts'][0]}, the smallest; "
                     "every cell below)")
    lines.append(f"{'arm':<16} {'c':>3} {'tok/s median [min-max]':>28} {'accept':>7} {'step ms':>8} "
                 f"{'TTFT ms':>8} {'TPOT ms':>8} {'ITL p99':>8} {'runs':>4}")
    for arm, a in receipt["aggregate"].items():
        for c, lv in a["levels"].items():
            t = lv["tok_s"]
            tok = f"{t['median']:.1f} [{t['min']:.1f}-{t['max']:.1f}]" if t else "-"

            def med(k: str, lv: dict[str, Any] = lv) -> str:
                return f"{lv[k]['median']:.2f}" if lv.get(k) else "-"

            lines.append(f"{arm:<16} {c:>3} {tok:>28} {med('accept_len'):>7} {med('step_ms'):>8} "
                         f"{med('ttft_ms'):>8} {med('tpot_ms'):>8} {med('itl_ms_p99'):>8} "
                         f"{t['n'] if t else 0:>4}")
    v = receipt["verdict"]
    for k in v["checks"]:
        at = (f"ctx={k['context']} " if "context" in k else "") + f"c={k['concurrency']} {k['arm']}"
        if k.get("kind") == "accept_len":
            lines.append(f"{at}: accept length {_fmt(k['accept_len'])} "
                         f"(expected {k['expect_accept_len']} +- {k['tolerance']}): "
                         + ("pass" if k["passed"] else f"FAIL ({k['why']})"))
        elif k.get("kind") == "first_burst":
            lines.append(f"{at}: first burst / warm {_fmt(k.get('first_over_warm'))} (need >= {k['min_ratio']}): "
                         + ("pass" if k["passed"] else f"FAIL ({k['why']})"))
        elif "worst_over_best" in k:
            lines.append(f"{at} vs {k['baseline']}: "
                         f"worst/best {k['worst_over_best']:.3f} "
                         f"(need >= {k['min_ratio']}), median ratio {k['median_ratio']:.3f}, accept "
                         f"{_fmt(k['accept_len'])}, break-even {_fmt(k['break_even_accept_len'])}: "
                         + ("pass" if k["passed"] else "FAIL"))
        else:
            lines.append(f"{at}: FAIL ({k['why']})")
        for n in (k.get("diagnosis") or {}).get("notes", []):
            lines.append(f"    {n}")
        if k.get("diagnosis"):
            lines.append(f"    regressed: {', '.join(k['diagnosis']['regressed'])}")
    for t in v.get("table", []):
        ctx = f"ctx={t['context']} " if "context" in t else ""
        lines.append(f"  {ctx}c={t['concurrency']} {t['arm']}: median ratio {t['median_ratio']:.3f}, accept "
                     f"{_fmt(t['accept_len'])}, break-even {_fmt(t['break_even_accept_len'])} "
                     f"(round {_fmt(t['round_ms'])} ms / decode {_fmt(t['decode_ms'])} ms)")
    if "grid" in receipt["summary"]:
        lines += grid_verdict.report_lines(receipt)
    f = v.get("fusion")
    if f:
        lines.append(f"fusion {f['on']} vs {f['off']} at c={f['concurrency']}: "
                     f"verify ms {_fmt(f['verify_ms_on'])} vs {_fmt(f['verify_ms_off'])}, "
                     f"round ms {_fmt(f['round_ms_on'])} vs {_fmt(f['round_ms_off'])}, "
                     f"all-reduce+norm kernels in verify ms {_fmt(f.get('verify_allreduce_norm_ms_on'))} vs "
                     f"{_fmt(f.get('verify_allreduce_norm_ms_off'))}, "
                     f"gain {_fmt(f['gain'])} ({f['gain_basis']})")
        if f.get("verify_ms_robust_on") is not None or f.get("verify_ms_robust_off") is not None:
            lines.append(f"  every rank, waits for the other rank removed: verify ms "
                         f"{_fmt(f.get('verify_ms_robust_on'))} vs {_fmt(f.get('verify_ms_robust_off'))} "
                         f"({f.get('verify_steps_on')} vs {f.get('verify_steps_off')} steps); per all-reduce "
                         f"boundary: fused {_fmt(f.get('fused_call_us_p50'))} us vs NCCL + add/RMSNorm "
                         f"{_fmt(f.get('unfused_call_us_p50'))} us, {_fmt(f.get('fused_ar_per_verify'))} fused "
                         f"per verify: saving predicted {_fmt(f.get('saving_predicted_ms'))} ms, measured "
                         f"{_fmt(f.get('saving_measured_ms'))} ms (ratio {_fmt(f.get('saving_ratio'))})")
    for n in v.get("notes", []):
        lines.append(f"note: {n}")
    for r in v["reasons"]:
        lines.append(f"reason: {r}")
    lines.append("VERDICT: " + ("PASS" if v["passed"] else "FAIL") + f"  ({v['rule']})")
    return "\n".join(lines)
