#!/usr/bin/env python3
"""Target-verify attention per layer call, in CUDA-graph replay, on the GPU it runs on: the installed sglang's
split-KV kernel (P8, `verify_shared_kv_fwd`) against `extend_attention_fwd` (what target-verify runs without
it) and upstream's per-head split-KV kernel (`verify_splitkv_fwd`, gated to AMD gfx95 upstream), at the lab
pair's / Kimi-K2.x TP8's shape (8 query heads, one 512 + 64 latent KV head, 3 draft tokens, bf16), per prefix
length and batch size; plus a few tiles of ours at one shape (the tuning that chose the default). With `--shapes`,
also the draft models' draft-extend (P11: the same kernel) at the lab drafts' shapes: `gqa` (32 query / 8 KV heads
of 128, separate K and V) and `mla` (8 heads, one 512 + 64 latent). With `--decode`, first, sglang's Triton decode
attention (`decode_attention_fwd`, what TritonAttnBackend.forward_decode runs: a decode step's layer call) at those
shapes per context, batch and cap on the KV splits (`--decode-splits`: the backend's max_kv_splits), the splits
picked as the backend picks them, each output checked against fp64 attention (receipt key `decode`). Writes a
receipt (kind verify-kernel-bench).

    PYTHONPATH=/tmp/site:python:test python3 benchmark/lab/verify_kernel_bench.py --out DIR [--contexts ...]
    ... --shapes --decode gqa mla --decode-contexts 32768 131072 --decode-batch 1 4   (the decode sweep alone)

Without a GPU (Triton's interpreter, TRITON_INTERPRET=1: the CPU test) the kernels run on CPU tensors, and each
time is the median of `--reps` wall-clock runs of `--calls` eager calls (receipt: method.device "cpu").

Each time is the median of `--reps` replays of a graph of `--calls` back-to-back calls (one call per layer,
as in a verify forward), divided by the calls; every graph is replayed `--warmup` times first. x 61 layers
is what a 61-layer target's verify spends in attention.
"""

from __future__ import annotations

import argparse
import json
import math
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
from support.scenarios_verify import U_BF16, U_FP32, _args, make_inputs  # noqa: E402

# (BLOCK_H, BLOCK_N, num_warps, num_stages): the tuning that chose the default at 32k (2026-12-01). num_stages 2
# is not among them: the KV loads go through kv_indices, which Triton's pipeliner leaves alone (compiled for sm_90a
# and sm_120a, a tile's shared memory is the same at 1 and 2 stages). (8, 32, 8, 1) spills (255 registers, a 64-byte
# stack on sm_120a): it asks what reading the latent KV once, not once per head block, would gain.
TILES = [(4, 32, 8, 1), (4, 16, 8, 1), (8, 32, 8, 1), (4, 32, 16, 1), (4, 64, 8, 1)]
# the decode sweep's caps on the KV splits (TritonAttnBackend.max_kv_splits): upstream's default
# (--triton-attention-num-kv-splits 8) and what a cap by context would give (P13: up to 64 for GQA; MLA's cap is
# next_power_of_2(SM count): 256 on an H200 at 128k)
DECODE_SPLITS = [8, 16, 32, 64, 128]
H200_SMS = 132  # device_core_count without a GPU (the lab's H200): the split rule needs one
DEV = "cuda" if torch.cuda.is_available() else "cpu"


def _graph_us(fn, calls: int, reps: int, warmup: int) -> float:
    if DEV == "cpu":  # Triton's interpreter (the CPU test): eager calls, wall clock; nothing to compile or warm
        times = []
        for _ in range(reps):
            t = time.perf_counter()
            for _ in range(calls):
                fn()
            times.append((time.perf_counter() - t) * 1e6 / calls)
        return statistics.median(times)
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


def _decode_shape(shape: str, heads: int) -> tuple[int, int, int, int, bool]:
    """(query heads, KV heads, key width, value width, MLA) of a decode layer: the target's (`heads`, one 576-wide
    latent whose first 512 columns are the values) or a lab draft's."""
    if shape == "target":
        return heads, 1, 576, 512, True
    h_q, h_kv, d, dv = drafts.SHAPES[shape]
    return h_q, h_kv, d, dv, shape == "mla"


def _decode_problem(shape: str, ctx: int, bs: int, heads: int) -> tuple[dict, int]:
    """(decode_attention_fwd's inputs as forward_decode passes them, KV bytes a token holds): one query token per
    request, each request's `ctx` tokens of bf16 KV in contiguous slots of the pool (page size 1: a long request
    as the allocator hands it out), separate K and V buffers (GQA) or, for MLA, the value buffer a view of the
    latent's first columns (MLATokenToKVPool.get_value_buffer)."""
    h_q, h_kv, d, dv, mla = _decode_shape(shape, heads)
    g = torch.Generator(device=DEV).manual_seed(0)
    n = bs * ctx

    def randn(*size):
        return torch.randn(*size, generator=g, device=DEV, dtype=torch.bfloat16)

    k = randn(n, h_kv, d)
    x = {"q": randn(bs, h_q, d), "k_buf": k, "v_buf": k[..., :dv] if mla else randn(n, h_kv, dv), "mla": mla,
         "kv_indptr": torch.arange(0, n + 1, ctx, dtype=torch.int32, device=DEV),
         "kv_indices": torch.arange(n, dtype=torch.int64, device=DEV),
         "seq_lens": torch.full((bs,), ctx, dtype=torch.int64, device=DEV),
         "sm_scale": 1.0 / math.sqrt(192 if mla else d)}  # layer.scaling: DeepSeek's 128 + 64 query width for MLA
    return x, h_kv * (d + (0 if mla else dv)) * 2


def _num_kv_splits(x: dict, max_kv_splits: int, sm_count: int):
    """The splits per request, as TritonAttnBackend.get_num_kv_splits picks them at decode (num_token == num_seq:
    num_group 1; dynamic splits: SGLANG_TRITON_DECODE_ATTN_STATIC_KV_SPLITS unset, device_core_count > 0)."""
    import triton
    from sglang.srt.layers.attention.triton_ops.metadata import get_num_kv_splits_triton

    bs, h_q = x["q"].shape[:2]
    out = torch.empty(bs, dtype=torch.int32, device=DEV)
    get_num_kv_splits_triton[(1,)](out, x["seq_lens"], bs, 1, h_q, x["k_buf"].shape[1], max_kv_splits, sm_count,
                                   MAX_NUM_SEQ=256 if bs < 256 else triton.next_power_of_2(bs))
    return out


def _decode_reference(x: dict, max_splits: int, drop_tail: float = 0.0) -> tuple:
    """(fp64 softmax attention of every request's query over its KV, per element the bound on a bf16 kernel's
    error). The bound, from where decode_attention_fwd rounds: the probabilities cast to bf16 before the PV product
    (u_bf16 x max|v|); the scores fp32 sums of `d` exact bf16 products (d x u_fp32 x sum|q k| x scale, twice:
    numerator and denominator); the fp32 sums (the split's keys in blocks of <= 64, <= 64 products a block, the
    merge of <= max_splits partials, their log-sum-exp: |score| + log n) in u_fp32 x max|v| each; the output's own
    rounding to bf16 (u_bf16 x |out|). drop_tail: leave out that fraction of each request's last keys (a defect
    the check must see)."""
    q = x["q"].double()
    bs, h_q, d = q.shape
    h_kv = x["k_buf"].shape[1]
    rep = h_q // h_kv
    outs, bounds = [], []
    for b in range(bs):
        lo, hi = int(x["kv_indptr"][b]), int(x["kv_indptr"][b + 1])
        n = hi - lo
        idx = x["kv_indices"][lo:hi - int(n * drop_tail)]
        k, v = x["k_buf"][idx].double(), x["v_buf"][idx].double()  # [n, h_kv, d]
        qg = q[b].view(h_kv, rep, d)
        s = torch.einsum("grd,ngd->grn", qg, k) * x["sm_scale"]
        out = torch.einsum("grn,ngd->grd", torch.softmax(s, -1), v).reshape(h_q, -1)
        e_qk = d * U_FP32 * torch.einsum("grd,ngd->grn", qg.abs(), k.abs()).amax(-1).reshape(h_q) * x["sm_scale"]
        vmax = v.abs().amax(dim=(0, 2)).repeat_interleave(rep)  # [h_q]: the row's KV head
        sums = U_FP32 * (2 * (64 + math.ceil(n / 32)) + 4 * max_splits + 8
                         + 4 * (s.abs().amax(-1).reshape(h_q) + math.log(max(n, 1))))
        bounds.append(((U_BF16 + 2 * e_qk + sums) * vmax)[:, None] + U_BF16 * (1 + U_BF16) * out.abs())
        outs.append(out)
    return torch.stack(outs), torch.stack(bounds)


def _decode_sweep(a) -> dict:
    """decode_attention_fwd per layer call at every (shape, context, batch, max_kv_splits) of the arguments."""
    from sglang.srt.layers.attention.triton_ops.decode_attention import decode_attention_fwd
    from sglang.srt.utils import get_device_core_count

    gpu_sms = get_device_core_count(0)  # what the backend asks: 0 without a GPU
    sm_count = a.sm_count or gpu_sms or H200_SMS
    source = "--sm-count" if a.sm_count else "the GPU" if gpu_sms else f"no GPU: {H200_SMS}, an H200's"
    # sgl_kernel's is_arch_support_pdl, which the backend asks on CUDA: not HIP, capability major >= 9
    use_pdl = DEV == "cuda" and not torch.version.hip and torch.cuda.get_device_capability()[0] >= 9
    rows = []
    for shape, ctx, bs in ((s_, c_, b_) for s_ in a.decode for c_ in a.decode_contexts for b_ in a.decode_batch):
        x, token_bytes = _decode_problem(shape, ctx, bs, a.heads)
        ref, bound = _decode_reference(x, max(a.decode_splits))
        h_q, dv = x["q"].shape[1], x["v_buf"].shape[-1]
        group = h_q // x["k_buf"].shape[1]
        head_blocks = -(-h_q // min(16, group)) if group > 1 else h_q  # the stage-1 grid's second axis
        o = torch.empty(bs, h_q, dv, dtype=torch.bfloat16, device=DEV)
        for m in a.decode_splits:
            splits = _num_kv_splits(x, m, sm_count)
            logits = torch.empty(bs, h_q, m, dv, dtype=torch.float32, device=DEV)  # as forward_metadata's
            lse = torch.empty(bs, h_q, m, dtype=torch.float32, device=DEV)
            o.zero_()

            def call(x=x, o=o, logits=logits, lse=lse, splits=splits, m=m):
                decode_attention_fwd(x["q"], x["k_buf"], x["v_buf"], o, x["kv_indptr"], x["kv_indices"], logits, lse,
                                     splits, m, x["sm_scale"], 1.0, 1.0, logit_cap=0.0, sinks=None,
                                     xai_temperature_len=-1, has_mla=x["mla"], use_pdl=use_pdl)

            us = _graph_us(call, a.calls, a.reps, a.warmup)
            err = float(((o.double() - ref).abs() / bound).max())  # the timed calls' output; NaN stays NaN
            row = {"shape": shape, "context": ctx, "batch": bs, "max_kv_splits": m,
                   "splits": [int(v) for v in splits.tolist()], "grid": [bs, head_blocks, m],
                   "us": round(us, 2), "GBps": round(bs * ctx * token_bytes / us / 1e3, 1),
                   "vs_ref": err if math.isnan(err) else round(err, 4)}
            rows.append(row)
            print(json.dumps({"decode": row}), flush=True)
        del x, ref, bound
    return {"measured": "sglang's Triton decode attention (decode_attention_fwd: split-KV stage 1 and the merge) per "
                        "layer call of a decode step: `batch` requests of one query token, each over `context` "
                        "tokens of bf16 KV (contiguous slots); per cap max_kv_splits, the splits "
                        "get_num_kv_splits_triton picks as TritonAttnBackend.get_num_kv_splits calls it (num_group "
                        "1, device_core_count sm_count) and attn_logits / attn_lse fp32 of (batch, heads, "
                        "max_kv_splits[, v_head_dim]); grid: stage 1's (batch, head blocks, max_kv_splits); us: as "
                        "the verify rows; GBps: KV bytes read (K and V; MLA's latent once) / us; vs_ref: max "
                        "|out - fp64 attention| / the derived bound (<= 1 passes)",
            "sm_count": sm_count, "sm_count_from": source, "use_pdl": use_pdl, "heads": a.heads, "kv": "bf16",
            "rows": rows}


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
    ap.add_argument("--shapes", nargs="*", default=["target"], choices=["target", "gqa", "mla"],
                    help="target: target-verify at --heads (P8); gqa / mla: the lab drafts' draft-extend (P11); "
                         "none (a bare --shapes): no verify rows")
    ap.add_argument("--no-tiles", action="store_true", help="skip the tile sweep")
    ap.add_argument("--splits", type=int, nargs="*", default=[],
                    help="time the tile sweep (target shape, largest context, bs 1) at each of these caps on the "
                         "split count (verify_shared_kv.MAX_SPLITS; default: the kernel's own); with --no-tiles, "
                         "the default tile at each cap: where P8 stops scaling")
    ap.add_argument("--decode", nargs="*", default=[], choices=["target", "gqa", "mla"],
                    help="first time sglang's Triton decode attention (decode_attention_fwd, a decode step's layer "
                         "call) at these shapes: target at --heads, the lab drafts' gqa / mla")
    ap.add_argument("--decode-splits", type=int, nargs="+", default=DECODE_SPLITS,
                    help="the decode sweep's caps on the KV splits (the backend's max_kv_splits; upstream's GQA "
                         "default is 8)")
    ap.add_argument("--decode-contexts", type=int, nargs="+", default=[32768, 65536, 131072])
    ap.add_argument("--decode-batch", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--sm-count", type=int, default=0,
                    help=f"device_core_count of the decode split rule (default: the GPU's; {H200_SMS}, an H200's, "
                         "without one)")
    a = ap.parse_args(argv)

    t0 = time.monotonic()
    decode = _decode_sweep(a) if a.decode else None  # first: a lab call's bench may run out of time
    rows, errors, tiles, default_tile = [], {}, [], None
    if a.shapes or a.splits:  # P8's and P11's kernels: the patched tree's
        rows, tiles, default_tile = _verify_sweep(a, errors)
    summary = {"heads": a.heads, "draft_tokens": 3, "kv": "bf16", "layers": a.layers,
               "speedup_by_context_bs1": {str(r["context"]): r["speedup"] for r in rows
                                          if r["batch"] == 1 and r["shape"] == "target"},
               "speedup_by_shape_context_bs1": {f"{r['shape']}:{r['context']}": r["speedup"] for r in rows
                                                if r["batch"] == 1},
               "default_tile": default_tile}
    if decode is not None:
        by: dict[str, dict[str, float]] = {}
        for r in decode["rows"]:
            if r["batch"] == 1:
                by.setdefault(f"{r['shape']}:{r['context']}", {})[str(r["max_kv_splits"])] = r["us"]
        summary["decode_us_by_shape_context_bs1"] = by
    summary["wall_s"] = round(time.monotonic() - t0, 1)
    extra = {} if decode is None else {"decode": decode}
    r = receipts.make_receipt("verify-kernel-bench", summary, machine=nvidia_smi.machine(), rows=rows,
                              tiles=tiles, errors=errors, **extra,
                              method={"timing": __doc__.strip().splitlines()[-3:], "device": DEV,
                                      "calls": a.calls, "reps": a.reps, "warmup": a.warmup})
    a.out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    path = receipts.write_receipt(r, a.out / f"verify-kernel-bench_{stamp}.json")
    print(f"receipt: {path}")
    return 0


def _verify_sweep(a, errors: dict) -> tuple[list, list, list | None]:
    """(rows, tiles, default tile): the verify / draft-extend rows per shape, context and batch, then the tile
    and split-cap sweep."""
    from sglang.srt.layers.attention.triton_ops import verify_shared_kv as ours
    from sglang.srt.layers.attention.triton_ops.extend_attention import extend_attention_fwd
    from sglang.srt.layers.attention.triton_ops.verify_splitkv import verify_splitkv_fwd

    rows = []
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
    if TILES or a.splits:
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
    return rows, tiles, [chosen.constexprs["BLOCK_H"], chosen.constexprs["BLOCK_N"], chosen.num_warps,
                         chosen.num_stages]


if __name__ == "__main__":
    sys.exit(main())
