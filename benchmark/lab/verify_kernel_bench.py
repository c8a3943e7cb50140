#!/usr/bin/env python3
"""Target-verify attention per layer call, in CUDA-graph replay, on the GPU it runs on: the installed sglang's
split-KV kernel (P8, `verify_shared_kv_fwd`) against `extend_attention_fwd` (what target-verify runs without
it) and upstream's per-head split-KV kernel (`verify_splitkv_fwd`, gated to AMD gfx95 upstream), at the lab
pair's / Kimi-K2.x TP8's shape (8 query heads, one 512 + 64 latent KV head, 3 draft tokens, bf16), per prefix
length and batch size; plus a few tiles of ours at one shape (the tuning that chose the default). With `--shapes`,
also the draft models' draft-extend (P11: the same kernel) at the lab drafts' shapes: `gqa` (32 query / 8 KV heads
of 128, separate K and V) and `mla` (8 heads, one 512 + 64 latent). Writes a receipt (kind verify-kernel-bench).

    PYTHONPATH=/tmp/site:python:test python3 benchmark/lab/verify_kernel_bench.py --out DIR [--contexts ...]

Each time is the median of `--reps` replays of a graph of `--calls` back-to-back calls (one call per layer,
as in a verify forward), divided by the calls; every graph is replayed `--warmup` times first. x 61 layers
is what a 61-layer target's verify spends in attention.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
for p in (ROOT / "python", ROOT / "test"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from sglang_blackwell import receipts  # noqa: E402
from sglang_blackwell.box import nvidia_smi  # noqa: E402
from support import scenarios_draft_extend as drafts  # noqa: E402
from support.scenarios_verify import _args, make_inputs  # noqa: E402

# (BLOCK_H, BLOCK_N, num_warps, num_stages): the tuning that chose the default at 32k (2026-12-01). num_stages 2
# is not among them: the KV loads go through kv_indices, which Triton's pipeliner leaves alone (compiled for sm_90a
# and sm_120a, a tile's shared memory is the same at 1 and 2 stages). (8, 32, 8, 1) spills (255 registers, a 64-byte
# stack on sm_120a): it asks what reading the latent KV once, not once per head block, would gain.
TILES = [(4, 32, 8, 1), (4, 16, 8, 1), (8, 32, 8, 1), (4, 32, 16, 1), (4, 64, 8, 1)]


def _graph_us(fn, calls: int, reps: int, warmup: int) -> float:
    fn()  # eager once: compiles, allocates scratch outside the capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    for _ in range(warmup):
        g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / calls)
    return statistics.median(times)


def _problem(shape: str, ctx: int, bs: int, heads: int) -> tuple[tuple, int]:
    """(extend_attention_fwd's arguments on the GPU, KV bytes a prefix token holds) of one shape: the target's
    verify (P8) or a lab draft's draft-extend (P11)."""
    if shape == "target":
        x = make_inputs({"bs": bs, "h": heads, "draft": 3, "prefix": [ctx] * bs, "kv": "bf16"})
        x = {k: (v.cuda() if hasattr(v, "cuda") else v) for k, v in x.items()}
        return _args(x, torch.zeros(bs * 3, heads, 512, dtype=torch.bfloat16, device="cuda")), 576 * 2
    h_q, h_kv, d, dv = drafts.SHAPES[shape]
    x = drafts.make_inputs({"shape": shape, "bs": bs, "draft": 3, "prefix": [ctx] * bs, "kv": "bf16"})
    x = {k: (v.cuda() if hasattr(v, "cuda") else v) for k, v in x.items()}
    if shape == "mla":  # the values are views of the keys (MLA's latent pool)
        x["v_ext"], x["v_buf"] = x["k_ext"][..., :dv], x["k_buf"][..., :dv]
    token_bytes = h_kv * (d + (0 if shape == "mla" else dv)) * 2
    return drafts._args(x, torch.zeros(bs * 3, h_q, dv, dtype=torch.bfloat16, device="cuda")), token_bytes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--contexts", type=int, nargs="+", default=[256, 2048, 8192, 32768])
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--layers", type=int, default=61)
    ap.add_argument("--no-per-head", action="store_true", help="skip upstream's per-head kernel")
    ap.add_argument("--shapes", nargs="+", default=["target"], choices=["target", "gqa", "mla"],
                    help="target: target-verify at --heads (P8); gqa / mla: the lab drafts' draft-extend (P11)")
    ap.add_argument("--no-tiles", action="store_true", help="skip the tile sweep")
    ap.add_argument("--splits", type=int, nargs="*", default=[],
                    help="time the tile sweep (target shape, largest context, bs 1) at each of these caps on the "
                         "split count (verify_shared_kv.MAX_SPLITS; default: the kernel's own); with --no-tiles, "
                         "the default tile at each cap: where P8 stops scaling")
    a = ap.parse_args(argv)
    from sglang.srt.layers.attention.triton_ops import verify_shared_kv as ours
    from sglang.srt.layers.attention.triton_ops.extend_attention import extend_attention_fwd
    from sglang.srt.layers.attention.triton_ops.verify_splitkv import verify_splitkv_fwd

    t0 = time.monotonic()
    rows, errors = [], {}
    for shape, ctx, bs in ((s_, c_, b_) for s_ in a.shapes for c_ in a.contexts for b_ in a.batch):
        args, token_bytes = _problem(shape, ctx, bs, a.heads)
        row = {"shape": shape, "context": ctx, "batch": bs}
        row["extend_us"] = round(_graph_us(lambda args=args: extend_attention_fwd(*args), a.calls, a.reps,
                                           a.warmup), 2)
        row["splitkv_us"] = round(_graph_us(lambda args=args: ours.verify_shared_kv_fwd(*args, max_bs=max(a.batch)),
                                            a.calls, a.reps, a.warmup), 2)
        if shape == "target" and not a.no_per_head and "per_head" not in errors:
            try:
                row["per_head_us"] = round(_graph_us(
                    lambda args=args: verify_splitkv_fwd(*args, max_bs=max(a.batch)), a.calls, a.reps, a.warmup), 2)
            except Exception as e:  # upstream's kernel is not built for NVIDIA: say how it fails
                errors["per_head"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
        row["splitkv_GBps"] = round(bs * ctx * token_bytes / row["splitkv_us"] / 1e3, 1)
        row["speedup"] = round(row["extend_us"] / row["splitkv_us"], 2)
        row["per_verify_ms"] = {k: round(row[k + "_us"] * a.layers / 1e3, 3) for k in ("extend", "splitkv")}
        rows.append(row)
        print(json.dumps(row), flush=True)
    tiles = []
    ctx, bs = max(a.contexts), 1
    if a.no_tiles or "target" not in a.shapes:
        TILES.clear()
    x = make_inputs({"bs": bs, "h": a.heads, "draft": 3, "prefix": [ctx], "kv": "bf16"})
    x = {k: (v.cuda() if hasattr(v, "cuda") else v) for k, v in x.items()}
    out = torch.zeros(3, a.heads, 512, dtype=torch.bfloat16, device="cuda")
    default_plan, default_max = ours.plan_launch, ours.MAX_SPLITS
    # every tile at every split cap (a runtime argument: one compile a tile); --splits alone: the default tile
    for tile, cap_splits in ((t, c) for t in (TILES or [None]) for c in (a.splits or [default_max])):
        if tile is None and not a.splits:
            break
        entry = {"tile": list(tile) if tile else None, "max_splits": cap_splits, "context": ctx, "batch": bs}
        try:
            if tile is not None:
                ours.plan_launch = lambda *p, _t=tile, **k: default_plan(*p, **{**k, "tile": _t})
            ours.MAX_SPLITS = cap_splits
            ours._SCRATCH.clear()
            us = _graph_us(lambda: ours.verify_shared_kv_fwd(*_args(x, out), max_bs=1), a.calls, a.reps, a.warmup)
            entry.update(us=round(us, 2), GBps=round(ctx * 576 * 2 / us / 1e3, 1))
        except Exception as e:
            entry["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
        finally:
            ours.plan_launch, ours.MAX_SPLITS = default_plan, default_max
            ours._SCRATCH.clear()
        tiles.append(entry)
        print(json.dumps(entry), flush=True)
    cap = torch.cuda.get_device_capability()
    chosen = ours.plan_launch(a.heads, 1, 576, 512, 3, cap, v_is_k=True)
    summary = {"heads": a.heads, "draft_tokens": 3, "kv": "bf16", "layers": a.layers,
               "speedup_by_context_bs1": {str(r["context"]): r["speedup"] for r in rows
                                          if r["batch"] == 1 and r["shape"] == "target"},
               "speedup_by_shape_context_bs1": {f"{r['shape']}:{r['context']}": r["speedup"] for r in rows
                                                if r["batch"] == 1},
               "default_tile": [chosen.constexprs["BLOCK_H"], chosen.constexprs["BLOCK_N"], chosen.num_warps,
                                chosen.num_stages],
               "wall_s": round(time.monotonic() - t0, 1)}
    r = receipts.make_receipt("verify-kernel-bench", summary, machine=nvidia_smi.machine(), rows=rows,
                              tiles=tiles, errors=errors,
                              method={"timing": __doc__.strip().splitlines()[-3:], "calls": a.calls,
                                      "reps": a.reps, "warmup": a.warmup})
    a.out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    path = receipts.write_receipt(r, a.out / f"verify-kernel-bench_{stamp}.json")
    print(f"receipt: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
