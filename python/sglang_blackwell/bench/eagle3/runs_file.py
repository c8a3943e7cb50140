"""<stem>_runs.jsonl: every arm run, appended as soon as it ends, and read back (--from-runs, the receipt) with
each run checked against the shape run_arm writes.

claim_stem picks a run's names (the receipt <stem>.json and the runs file) so that no two runs share them;
append_run writes one whole record or none; read_runs / runs_from_files read one or several such files.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

from ...errors import UserError
from ...paths import os_reason
from . import grid_verdict
from .config import BenchConfig
from .progress import Progress, printer
from .verdict import is_number, metrics_problem

RUN_SCHEMA = "sglang-blackwell/bench-eagle3-run/1"


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


def append_run(path: Path, cfg: BenchConfig, rec: dict[str, Any]) -> None:
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
            except RecursionError:
                raise UserError(f"{p}:{n}: nested too deeply to be a run (not what the harness writes)") from None
            except ValueError as e:  # not JSON, or an integer of more digits than Python converts
                if not isinstance(e, json.JSONDecodeError):
                    raise UserError(f"{p}:{n}: not a run the harness writes ({e})") from None
                if n == len(lines) and not text.endswith("\n"):
                    whole = sum(1 for r in runs if r["source"].startswith(f"{p.name}:"))
                    (warn or printer())(
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
                arm = obj["run"].get("arm") if isinstance(obj.get("run"), dict) else None
                raise UserError(f"{p}:{n}: run" + (f" of arm {arm}" if isinstance(arm, str) and arm in cfg.arms
                                                   else "") + f": {problem}")
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
