"""One rank of `bench allreduce`: set up every requested backend, then for each token count check its numerics
(eager and in a CUDA graph) and time it in-graph (ar_timing). Rank 0 collects everything and rewrites the
results file after every token count, so a run cut short still leaves what it measured.

Every rank executes the same sequence of collectives; availability, setup failures and skips are agreed on
over a gloo group before anyone acts on them.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from ...paths import write_atomic
from . import backends as ar_backends
from . import correctness as ar_correctness
from . import p2p_probe
from . import results as ar_results
from . import timing as ar_timing
from .backends import Backend, RankContext
from .nccl_env import multicast_env_problems
from .timing import TimingPlan

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
RECORDED_ENV_PREFIXES = ("NCCL_", "TORCH_SYMM", "NVSHMEM_", "FLASHINFER_", "CUDA_VISIBLE_DEVICES",
                         "SGLANG_BLACKWELL_")


@dataclass
class WorkerConfig:
    tp: int
    port: int
    tokens: list[int]
    hidden: int
    dtype: str
    backends: list[str]
    result_path: str
    label: str = "main"
    plan: TimingPlan = field(default_factory=TimingPlan)
    fi_max_tokens: int = 2048
    allow_multicast: bool = False
    collective_timeout_s: int = 300
    device_type: str = "cuda"  # "cpu" + dist_backend "gloo" only in the CPU simulation test
    dist_backend: str = "nccl"


def _err(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"[:1500]


class Worker:
    def __init__(self, rank: int, cfg: WorkerConfig) -> None:
        self.cfg, self.rank, self.t0 = cfg, rank, time.time()
        cuda = cfg.device_type == "cuda"
        device = torch.device("cuda", rank) if cuda else torch.device(cfg.device_type)
        if cuda:
            torch.cuda.set_device(device)
        dist.init_process_group(cfg.dist_backend, init_method=f"tcp://127.0.0.1:{cfg.port}", rank=rank,
                                world_size=cfg.tp, timeout=_dt.timedelta(seconds=cfg.collective_timeout_s),
                                **({"device_id": device} if cuda else {}))
        self.gloo = dist.new_group(backend="gloo")
        self.ctx = RankContext(rank=rank, world_size=cfg.tp, device=device, group=dist.group.WORLD,
                               hidden=cfg.hidden, dtype=DTYPES[cfg.dtype], tokens=sorted(cfg.tokens),
                               fi_max_tokens=cfg.fi_max_tokens, allow_multicast=cfg.allow_multicast)
        self.align = ar_timing.Aligner(self.ctx.group, device, cfg.plan.spin_cycles)
        elem_size = torch.empty((), dtype=self.ctx.dtype).element_size()
        self.results = ar_results.new_results({**asdict(cfg), "elem_size": elem_size}, cfg.label)
        self.active: list[Backend] = []

    # ------------------------------------------------------------------------------------- plumbing
    def gather(self, obj: Any) -> list[Any]:
        out: list[Any] = [None] * self.cfg.tp
        dist.all_gather_object(out, obj, group=self.gloo)
        return out

    def log(self, msg: str) -> None:
        if self.rank == 0:
            print(f"[{self.cfg.label} {time.time() - self.t0:6.1f}s] {msg}", flush=True)

    def save(self) -> None:
        if self.rank != 0:
            return
        path = Path(self.cfg.result_path)
        write_atomic(path, json.dumps(self.results, indent=1, default=str))

    # ---------------------------------------------------------------------------------------- setup
    def describe(self) -> None:
        from ...receipts import collect_versions

        topo = None
        if self.rank == 0:
            devices = list(range(self.cfg.tp))
            try:
                topo = p2p_probe.detect_group(devices)
            except Exception as e:  # never leave the other ranks waiting in the broadcast below
                topo = p2p_probe.fallback(devices, _err(e))
        box = [topo]
        dist.broadcast_object_list(box, src=0, group=self.gloo)
        self.ctx.p2p_atomics = box[0]["p2p_atomics"]
        names = self.gather(torch.cuda.get_device_name(self.ctx.device))
        self.results["meta"].update({
            "topology": box[0], "device_names": names,
            "versions": collect_versions() if self.rank == 0 else {},
            "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith(RECORDED_ENV_PREFIXES)},
            "symm_mem_gate": ("enabled: every peer pair has native P2P atomics" if box[0]["p2p_atomics"]
                              else f"disabled: native P2P atomics = {box[0]['p2p_atomics']}"),
        })
        self.log(f"{self.cfg.tp}x {names[0]}, link {box[0]['link']}, P2P atomics {box[0]['p2p_atomics']}")

    def setup(self) -> None:
        failed_resources: set[str] = set()
        for b in ar_backends.make(self.cfg.backends):
            ok, why = b.available(self.ctx)
            if ok and b.resource in failed_resources:
                ok, why = False, f"shared resource {b.resource!r} failed to set up earlier"
            votes = self.gather((ok, why))
            ok = all(v[0] for v in votes)
            why = next((v[1] for v in votes if not v[0]), "")
            setup_s = None
            if ok:
                t = time.time()
                try:
                    b.setup(self.ctx)
                    err = None
                except Exception as e:
                    err = _err(e)
                    if self.rank == 0:
                        traceback.print_exc()
                bad = [f"rank {r}: {m}" for r, m in enumerate(self.gather(err)) if m]
                setup_s = time.time() - t
                if bad:
                    ok, why = False, "setup failed: " + "; ".join(bad)
                    if b.resource:
                        failed_resources.add(b.resource)
                else:
                    self.active.append(b)
            ar_results.add_backend(self.results, b.name, op=b.op, reference=b.reference, available=ok,
                                   reason=why, setup_s=setup_s)
            self.log(f"backend {b.name:18s} {'ready' if ok else 'OFF: ' + why}")
        self.results["meta"]["facts"] = dict(self.ctx.facts)
        self.save()

    # ---------------------------------------------------------------------------------- measuring
    def measure(self) -> None:
        for i, t in enumerate(self.ctx.tokens, 1):
            self.measure_tokens(t, f"{i}/{len(self.ctx.tokens)}")
            self.save()

    def measure_tokens(self, t: int, progress: str) -> None:
        ctx, plan = self.ctx, self.cfg.plan
        x0, res0, gamma = ar_correctness.make_inputs(ctx, t, seed=1000 + t)
        ref = ar_correctness.reference(ctx, x0, res0, gamma)
        inp, residual = ctx.empty(t), res0.clone()

        def producer() -> None:
            inp.copy_(x0)

        def reset() -> None:
            residual.copy_(res0)

        g = ar_timing.capture(producer, plan.calls)
        prod = ar_timing.slowest_rank(self.gather(ar_timing.rank_summary(
            ar_timing.time_graph(g, reset=reset, align=self.align, plan=plan))))
        del g
        ar_results.add_producer(self.results, t, prod["us"])
        kb = t * ctx.hidden * self.results["config"]["elem_size"] / 1024
        self.log(f"T={t} ({progress}, {kb:.{0 if kb >= 10 else 1}f} KB) producer {prod['us']:.2f} us")
        for b in self.active:
            self.measure_backend(b, t, inp, residual, gamma, reset, producer, ref, prod["us"])
        torch.cuda.synchronize()
        dist.barrier(group=self.gloo)

    def measure_backend(self, b: Backend, t: int, inp: torch.Tensor, residual: torch.Tensor,
                        gamma: torch.Tensor, reset, producer, ref: ar_correctness.Reference,
                        producer_us: float) -> None:
        whys = [w for w in self.gather(b.supports(t)) if w]
        if whys:
            ar_results.add_error(self.results, b.name, t, f"skipped: {whys[0]}")
            return
        local: dict[str, Any] = {"error": None}
        try:
            reset()
            producer()
            outs = b.run(inp, residual, gamma)
            torch.cuda.synchronize()
            local["eager"] = ar_correctness.check(b.op, outs, ref, self.ctx)

            captured: list[tuple[torch.Tensor, ...]] = []
            g1 = ar_timing.capture(lambda: (producer(), captured.append(b.run(inp, residual, gamma))), 1)
            reset()
            inp.fill_(float("nan"))  # a replay that does nothing must not pass on the eager call's output
            for o in captured[0]:
                if o.data_ptr() != residual.data_ptr():
                    o.fill_(float("nan"))
            self.align()
            g1.replay()
            torch.cuda.synchronize()
            local["graph"] = ar_correctness.check(b.op, captured[0], ref, self.ctx)
            del g1

            gn = ar_timing.capture(lambda: (producer(), b.run(inp, residual, gamma)), self.cfg.plan.calls)
            local["timing"] = ar_timing.rank_summary(
                ar_timing.time_graph(gn, reset=reset, align=self.align, plan=self.cfg.plan))
            del gn
        except Exception as e:
            local["error"] = _err(e)
            if self.rank == 0:
                traceback.print_exc()
        per_rank = self.gather(local)
        errs = [f"rank {r}: {p['error']}" for r, p in enumerate(per_rank) if p["error"]]
        if errs:
            ar_results.add_error(self.results, b.name, t, "; ".join(errs))
            self.log(f"  {b.name:18s} ERROR {errs[0][:200]}")
            return
        eager = ar_correctness.worst([p["eager"] for p in per_rank])
        graph = ar_correctness.worst([p["graph"] for p in per_rank])
        ok = eager["ok"] and graph["ok"]
        lat = ar_timing.slowest_rank([p["timing"] for p in per_rank])
        ar_results.add_measurement(self.results, b.name, t, gross_us=lat["us"], producer_us=producer_us,
                                   per_rank=lat["per_rank"], lo=lat["min"], hi=lat["max"], ok=ok,
                                   rule=eager["rule"], eager=eager["parts"], graph=graph["parts"])
        verdict = "ok" if ok else "NUMERICS FAILED: " + json.dumps(eager["parts"] if not eager["ok"]
                                                                   else graph["parts"])
        self.log(f"  {b.name:18s} {lat['us'] - producer_us:8.2f} us net  (gross {lat['us']:.2f})  {verdict}")

    def close(self) -> None:
        for b in self.active:
            try:
                b.close()
            except Exception as e:
                ar_results.add_error(self.results, b.name, "close", _err(e))
        ar_backends.close_shared(self.ctx)
        self.results["meta"]["wall_s"] = round(time.time() - self.t0, 1)
        self.save()
        dist.barrier(group=self.gloo)
        dist.destroy_process_group()


def main(rank: int, cfg: WorkerConfig) -> None:
    """Entry point of one spawned rank (torch.multiprocessing)."""
    problems = [] if cfg.allow_multicast else multicast_env_problems(os.environ)
    if problems:  # the launcher checks this too; a rank never starts with multicast possible
        raise SystemExit("refusing to run: " + "; ".join(problems))
    w = Worker(rank, cfg)
    w.describe()
    w.setup()
    w.measure()
    w.close()
    # Everything is saved. Skip interpreter teardown: NCCL/symm-mem destructors at exit can hang or crash,
    # and that must not turn a complete run into a failed one.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
