"""`sglang-blackwell bench allreduce`: in-graph all-reduce latency of every backend the installed stack
offers, checked against NCCL, and (--tune) the per-topology dispatch table the runtime knobs come from.

One process per GPU (torch.multiprocessing, spawn). NCCL reads its environment when a communicator is
created, so every --nccl-profile is measured in its own fresh set of processes. Multicast stays off: the
command refuses to start unless NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
are set, and the one multicast backend (symm_multimem) runs only with --allow-multicast.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from ...box.allreduce_catalog import CATALOG, NCCL_BACKENDS, default_backends
from ...errors import UserError
from ...paths import output_problem
from .nccl_env import isolated_env, multicast_env_problems, nccl_settings, profile_env

DEFAULT_TOKENS = "1,2,3,4,8,16,32,64,128,256,512"
WORKER_ENV_DEFAULTS = {"TORCH_SYMMMEM": "CUDA"}  # torch symm-mem's CUDA backend (no NVSHMEM)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (__doc__ or "").strip()
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("--tp", type=int, help="GPUs (one process each; default: all visible)")
    p.add_argument("--tokens", default=DEFAULT_TOKENS,
                   help=f"token counts, comma-separated (default {DEFAULT_TOKENS})")
    p.add_argument("--hidden", type=int, default=7168, help="hidden size (default 7168, DeepSeek-V3)")
    p.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
    p.add_argument("--backends", default="all",
                   help="comma-separated backend names, or 'all' (default); see --list-backends")
    p.add_argument("--layers", type=int, default=61, help="layers per forward; totals use 2 all-reduces each")
    p.add_argument("--out", help="JSON receipt (default: allreduce-tp<N>.json; with --from-receipt: none)")
    p.add_argument("--plot", help="PNG plot (default: the receipt path with .png)")
    p.add_argument("--no-plot", action="store_true")
    p.add_argument("--nccl-profile", default="",
                   help="also measure NCCL under each named tuning profile, e.g. none,pcie-ll")
    p.add_argument("--tune", action="store_true", help="write the dispatch table entry for this topology")
    p.add_argument("--table", help="dispatch table to update with --tune (default: "
                                   "$SGLANG_BLACKWELL_ALLREDUCE_TABLE or ~/.config/sglang-blackwell/"
                                   "allreduce_table.json)")
    p.add_argument("--calls", type=int, default=50, help="calls per captured graph (default 50)")
    p.add_argument("--reps", type=int, default=25, help="timed replays per rank (median; default 25)")
    p.add_argument("--warmup", type=int, default=3, help="untimed replays first (default 3)")
    p.add_argument("--fi-max-tokens", type=int, default=2048,
                   help="FlashInfer workspace max_token_num (sglang's default 2048)")
    p.add_argument("--timeout", type=int, default=900,
                   help="seconds per set of processes before they are killed (default 900)")
    p.add_argument("--allow-multicast", action="store_true",
                   help="lift the multicast-off requirement and measure multimem too")
    p.add_argument("--from-receipt", help="re-render (report, plot, --tune) from an earlier receipt, no GPUs")
    p.add_argument("--list-backends", action="store_true", help="print the backends and exit")


# ------------------------------------------------------------------------------------- validation

def parse_tokens(text: str) -> list[int]:
    out = set()
    for part in (p.strip() for p in text.split(",")):
        if not part.isdigit() or int(part) <= 0:
            raise UserError(f"--tokens: {part!r} is not a positive integer (expected e.g. {DEFAULT_TOKENS})")
        out.add(int(part))
    return sorted(out)


def parse_backends(text: str, allow_multicast: bool) -> list[str]:
    if text.strip() in ("", "all"):
        return default_backends(allow_multicast)
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in CATALOG]
    if unknown:
        raise UserError(f"--backends: unknown {', '.join(map(repr, unknown))}; known: {', '.join(CATALOG)}")
    mc = [n for n in names if CATALOG[n].multicast and not allow_multicast]
    if mc:
        raise UserError(f"--backends: {', '.join(mc)} use NVLink multicast: "
                        "add --allow-multicast to run them")
    return [n for n in CATALOG if n in names]


def parse_profiles(text: str) -> dict[str, dict[str, str]]:
    return {n: profile_env(n) for n in (p.strip() for p in text.split(",")) if n}


def check_env(environ: Mapping[str, str], allow_multicast: bool) -> None:
    problems = [] if allow_multicast else multicast_env_problems(environ)
    if problems:
        raise UserError("refusing to start with NVLink multicast possible: " + "; ".join(problems)
                        + ". Export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1"
                          " NVSHMEM_DISABLE_NVLS=1, or pass --allow-multicast to measure multicast paths")


def check_numbers(a: argparse.Namespace) -> None:
    for opt, val, lo in (("--hidden", a.hidden, 8), ("--layers", a.layers, 1), ("--calls", a.calls, 1),
                         ("--reps", a.reps, 1), ("--warmup", a.warmup, 0),
                         ("--fi-max-tokens", a.fi_max_tokens, 1), ("--timeout", a.timeout, 10)):
        if val < lo:
            raise UserError(f"{opt} must be >= {lo}, got {val}")
    if a.hidden % 8:
        raise UserError(f"--hidden must be a multiple of 8 (16-byte packs), got {a.hidden}")


def resolve_tp(requested: int | None, visible: int) -> int:
    tp = visible if requested is None else requested
    if tp < 2:
        raise UserError(f"--tp must be >= 2 (an all-reduce needs two GPUs), got {tp}"
                        + ("" if requested is not None else f": {visible} GPU(s) visible"))
    if tp > visible:
        raise UserError(f"--tp {tp} needs {tp} CUDA GPUs; {visible} visible")
    return tp


# ---------------------------------------------------------------------------------------- launching

@contextlib.contextmanager
def _environ(env: Mapping[str, str]) -> Iterator[None]:
    """os.environ replaced by `env` while child processes are started (they inherit it), then restored."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker_main() -> Callable[[int, Any], None]:
    """What each rank runs (imported when a run starts: the worker loads torch)."""
    from .worker import main

    return main


def spawn(cfg: Any, env: Mapping[str, str], timeout_s: int) -> dict[str, Any]:
    """Run worker.main on cfg.tp fresh processes; return rank 0's results (partial if cut short)."""
    import torch.multiprocessing as mp

    target = worker_main()
    failure = None
    with _environ(env):
        ctx = mp.start_processes(target, args=(cfg,), nprocs=cfg.tp, join=False, start_method="spawn")
    deadline = time.monotonic() + timeout_s
    try:
        while not ctx.join(timeout=2):
            if time.monotonic() > deadline:
                failure = f"{cfg.label}: timed out after {timeout_s} s; processes killed"
                break
    except Exception as e:  # a rank raised or died: join() has already terminated the others
        last = str(e).strip().splitlines()[-1] if str(e).strip() else ""
        failure = f"{cfg.label}: {type(e).__name__}: {last}"
    finally:
        for p in ctx.processes:  # only the processes this call started
            if p.is_alive():
                p.terminate()
                p.join(5)
                if p.is_alive():
                    p.kill()
                    p.join(5)
    path = Path(cfg.result_path)
    if not path.is_file():
        raise UserError(f"{cfg.label}: no results ({failure or 'workers exited without writing any'})")
    results = json.loads(path.read_text())
    if failure:
        results["failure"] = failure
    return results


def measure(a: argparse.Namespace, tokens: list[int], backends: list[str],
            profiles: dict[str, dict[str, str]], tp: int) -> dict[str, Any]:
    from .timing import TimingPlan
    from .worker import WorkerConfig

    plan = TimingPlan(calls=a.calls, reps=a.reps, warmup=a.warmup)
    env = {**WORKER_ENV_DEFAULTS, **os.environ}
    with tempfile.TemporaryDirectory(prefix="sglang-blackwell-ar-") as tmp:
        def cfg(label: str, names: list[str]) -> WorkerConfig:
            return WorkerConfig(tp=tp, port=_free_port(), tokens=tokens, hidden=a.hidden, dtype=a.dtype,
                                backends=names, result_path=str(Path(tmp) / f"{label}.json"), label=label,
                                plan=plan, fi_max_tokens=a.fi_max_tokens, allow_multicast=a.allow_multicast)

        print(f"bench allreduce: TP={tp}, T={tokens}, hidden {a.hidden} {a.dtype}, "
              f"backends: {', '.join(backends)}", file=sys.stderr, flush=True)
        results = spawn(cfg("main", backends), env, a.timeout)
        results["nccl_profiles"] = {}
        for name, prof in profiles.items():
            penv = isolated_env(prof, env)
            if nccl_settings(penv) == nccl_settings(env):  # same NCCL settings as the main run: reuse it
                results["nccl_profiles"][name] = {
                    "env": prof, "reused_main_run": True,
                    **{k: {n: v for n, v in results.get(k, {}).items() if n in NCCL_BACKENDS}
                       for k in ("latency_us", "checks", "errors")}}
                continue
            pres = spawn(cfg(f"nccl-{name}", list(NCCL_BACKENDS)), penv, a.timeout)
            keep = ("latency_us", "checks", "errors", "producer_us")
            results["nccl_profiles"][name] = {"env": prof, "reused_main_run": False,
                                              **{k: pres.get(k, {}) for k in keep}}
            if pres.get("failure"):
                results["nccl_profiles"][name]["failure"] = pres["failure"]
    return results


# --------------------------------------------------------------------------------------- the command

def _tune(results: dict[str, Any], table_path: Path) -> dict[str, Any]:
    from ...box import allreduce_table as tbl

    topo = results.get("meta", {}).get("topology") or {}
    key = tbl.facts_key(topo, results["config"]["tp"])
    table = tbl.load_table(table_path) if table_path.is_file() else tbl.new_table()
    entry = tbl.build_entry(results, key, source={"versions": results.get("meta", {}).get("versions"),
                                                  "facts": results.get("meta", {}).get("facts")})
    tbl.save_table(tbl.merge_entry(table, entry), table_path)
    knobs = tbl.knobs_from_table({"entries": {key.key(): entry}}, key)
    print(f"\n== dispatch table: {table_path} [{key.key()}]")
    for op, o in entry["ops"].items():
        spans = ", ".join(f"T {r['tokens'][0]}-{r['tokens'][1]}: {r['backend']}" for r in o["ranges"])
        print(f"  {op}: {spans or 'nothing measured correct'}")
        for n, why in o["excluded"].items():
            print(f"    excluded {n}: {why}")
    print("knobs:")
    for k, v in knobs["env"].items():
        print(f"  {k}={v}")
    for line, flags in knobs["server_args"].items():
        print(f"  sglang {line}: {' '.join(flags) or '(no flags)'}")
    for w in knobs["why"]:
        print(f"  why: {w}")
    return {"table": str(table_path), "key": key.key(), "entry": entry, "knobs": knobs}


def read_receipt_results(path: Path) -> dict[str, Any]:
    """The measured results of an earlier receipt (--from-receipt); UserError naming the file otherwise."""
    try:
        r = json.loads(path.read_bytes().decode("utf-8"))
    except OSError as e:
        raise UserError(f"--from-receipt {path}: cannot read ({e.strerror or e})") from None
    except UnicodeDecodeError as e:
        raise UserError(f"--from-receipt {path}: not UTF-8 text (byte {e.start}: {e.reason})") from None
    except json.JSONDecodeError as e:
        raise UserError(f"--from-receipt {path}: not JSON ({e})") from None
    results = r.get("results") if isinstance(r, dict) else None
    if not isinstance(results, dict) or not isinstance(results.get("config"), dict):
        raise UserError(f"{path}: not a bench-allreduce receipt (no 'results')")
    return results


def run(a: argparse.Namespace) -> int:
    from ...receipts import write_receipt
    from . import report as ar_report

    if a.list_backends:
        for b in CATALOG.values():
            print(f"{b.name:18s} {b.op:10s} {b.what}" + ("  [--allow-multicast]" if b.multicast else ""))
        return 0
    check_numbers(a)
    for opt in ("out", "table", "plot"):  # before any GPU time is spent on a result that cannot be written
        value = getattr(a, opt)
        problem = output_problem(Path(value)) if value else None
        if problem:
            raise UserError(f"--{opt} {value}: {problem}")
    if a.from_receipt:
        results = read_receipt_results(Path(a.from_receipt))
        out = Path(a.out) if a.out else None
    else:
        tokens = parse_tokens(a.tokens)
        backends = parse_backends(a.backends, a.allow_multicast)
        profiles = parse_profiles(a.nccl_profile)
        check_env(os.environ, a.allow_multicast)
        import torch

        tp = resolve_tp(a.tp, torch.cuda.device_count())
        results = measure(a, tokens, backends, profiles, tp)
        out = Path(a.out or f"allreduce-tp{tp}.json")

    try:
        print(ar_report.format_report(results, a.layers))
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
        if not a.from_receipt:
            raise
        raise UserError(f"{a.from_receipt}: 'results' is not what bench allreduce writes "
                        f"({type(e).__name__}: {e})") from None
    extra: dict[str, Any] = {}
    if a.tune:
        from ...box import allreduce_table as tbl

        extra["tune"] = _tune(results, Path(a.table) if a.table else tbl.default_table_path())
    plot_path = Path(a.plot) if a.plot else (out.with_suffix(".png") if out else None)
    if plot_path and not a.no_plot:
        try:
            extra["plot"] = str(ar_report.plot(results, plot_path).name)
            print(f"plot: {plot_path}")
        except ImportError:
            print("plot skipped: matplotlib is not installed (pip install 'sglang-blackwell[plot]'; "
                  "or re-render later with --from-receipt)", file=sys.stderr)
    if out:
        receipt = ar_report.build_receipt(results, a.layers, **extra)
        write_receipt(receipt, out)
        print(f"receipt: {out}")
    fails = ar_report.failed_checks(results)
    if fails:
        print(f"NUMERICS FAILED: {', '.join(fails)} (excluded from the choice; exit 1)", file=sys.stderr)
    if results.get("failure"):
        print(f"INCOMPLETE: {results['failure']} (exit 1)", file=sys.stderr)
    return 1 if fails or results.get("failure") else 0
