"""The receipt of `bench eagle3`: built from the arm runs (the aggregate and the verdict, per concurrency or per
grid cell) with what each measured value means (MEASUREMENT); the plots drawn, then the receipt written as
<stem>.json, never over another run's."""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from ... import receipts
from ...box import nvidia_smi as nvidia
from ...errors import UserError
from ...paths import os_reason
from . import grid, grid_verdict, launcher, outputs, plots
from .config import BenchConfig
from .config_verdict import VerdictSpec
from .progress import Progress
from .runs_file import claim_stem, run_problem
from .verdict import aggregate, evaluate, summary

KIND = "bench-eagle3"
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


def build_receipt(cfg: BenchConfig, arms: list[str], runs: list[dict[str, Any]], *, repeats: int, mode: str,
                  interrupted: str | None = None, fatal: str | None = None) -> dict[str, Any]:
    runs = [_measurement_checked(r, cfg) for r in runs]
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
                                accept_len_arms=None if v.accept_len_arms is None else tuple(
                                    a for a in v.accept_len_arms if a in arms),  # of the arms run (--arms)
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
        measurement={**MEASUREMENT, **(grid.MEASUREMENT if cfg.grid else {}),
                     **(grid.LEFT_OUT_MEASUREMENT if cfg.workload.left_out else {})},
        launchers=launcher.receipt_launchers(runs), runs=runs,
        complete=not short and not interrupted and not fatal, **extra)


def _measurement_checked(run: dict[str, Any], cfg: BenchConfig) -> dict[str, Any]:
    """A run whose record is not what the verdict may read (a measurement that is not finite and plausible: a
    server's NaN accept length, ...) is a failed run, saying why: the verdict never passes on it. --from-runs
    refused such a record already (exit 2)."""
    if run.get("error") or (why := run_problem(run, cfg)) is None:
        return run
    return {**run, "error": f"bad measurement: {why}"}


def judged(cfg: BenchConfig, runs: list[dict[str, Any]], arms: list[str], v: VerdictSpec,
           problems: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The aggregate and the verdict: per concurrency, or per cell in grid mode (grid_verdict)."""
    conc, spec_arms = cfg.workload.concurrency, [a for a in arms if cfg.arms[a].speculative]
    if cfg.grid:
        agg = grid_verdict.grid_aggregate(runs, arms, cfg.workload.contexts, conc)
        left_out = [(x.context, x.concurrency) for x in cfg.workload.left_out]
        compared = outputs.outputs_checks(runs, v.baseline, spec_arms, cfg.workload.contexts, conc,
                                          left_out) if v.outputs_match and v.baseline in arms else None
        return agg, grid_verdict.evaluate_grid(agg, v, cfg.workload.contexts, conc, problems=problems,
                                               spec_arms=spec_arms, left_out=left_out, output_checks=compared)
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
