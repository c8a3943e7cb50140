"""The torch-profiler window of an arm run: SGLang's /start_profile by stage over a few decode batches of one
request (its prefill batches in a trace of their own: at 32k+ tokens the prefill chunks would fill a window of
forward batches), every TP rank's decode trace waited for, read (trace.profile_traces: stage times, verify across
ranks, kernel classes) and kept next to the server log with the prefill traces."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from . import client, sglang_api, trace
from .config import BenchConfig
from .config_workload import Prompt
from .progress import Progress
from .run_error import BenchRunError
from .server import Server
from .window import fmt as _fmt


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
        sglang_api.start_profile(server.url, str(tmp), steps, prefix="bench", by_stage=True)
        client.send(ep or client.Endpoint(url=server.url, api="generate", stream=False),
                    prompt or cfg.workload.prompts[0], steps * per_step + 16)
        sglang_api.stop_profile(server.url)
        paths = _wait_traces(tmp, ranks, cfg.profile.timeout_s, stage=DECODE)
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
            prefill = _stage_traces(tmp, PREFILL)
            for r, path in prefill.items():  # what the request's prefill ran (not read here)
                gz = ".gz" if path.name.endswith(".gz") else ""
                shutil.copyfile(path, server.log_path.with_suffix((f".TP-{r}" if r else "") + ".prefill.trace.json"
                                                                  + gz))
            res["prefill_traces"] = len(prefill)
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


# the stage suffixes of SGLang's profile_by_stage traces (its ForwardMode names: <...>-TP-<r>-DECODE.trace.json.gz)
DECODE, PREFILL = "DECODE", "EXTEND"


def _rank_of(name: str) -> int | None:
    m = re.search(r"-TP-(\d+)(?=[-.])", name)
    return int(m.group(1)) if m and ".trace.json" in name else None


def _stage_of(name: str) -> str | None:
    m = re.search(r"-(DECODE|EXTEND)\.trace\.json", name)
    return m.group(1) if m else None


def _stage_traces(d: Path, stage: str | None) -> dict[int, Path]:
    """{rank: trace} of one stage in d (stage None: the traces of a window without stages)."""
    return {r: p for p in sorted(d.glob("*.trace.json*"))
            if (r := _rank_of(p.name)) is not None and _stage_of(p.name) == stage}


def _wait_traces(d: Path, ranks: int, timeout_s: float, stage: str | None = None) -> list[Path]:
    """Every rank's trace of `stage` (DECODE, PREFILL; None: a window without stages), rank 0 first, once each
    file's size has stayed the same over two polls. At the timeout, the ranks found so far in order (rank 0 is
    needed; a missing rank is the receipt's to say)."""
    deadline = time.monotonic() + timeout_s
    sizes: dict[int, int] = {}
    stable: dict[int, Path] = {}
    while True:
        found = _stage_traces(d, stage)
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
        what = f"rank-0 {stage} trace" if stage else "rank-0 trace"
        raise BenchRunError(f"no {what} in {d} after {timeout_s:.0f} s "
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
