"""P8 (split-KV target-verify attention on CUDA): the scenarios its probe runs against a patched sglang tree.

- `kernel_cases`: the line's split-KV verify entry (`verify_shared_kv_fwd`: ours in 0.5.14's
  `triton_ops/verify_shared_kv.py`, upstream's grouped-head `verify_mla.py` in 0.5.23) against the line's own
  `extend_attention_fwd` and an fp64 reference, on CPU tensors under Triton's interpreter (its bf16 dot and
  its float downcasts made what the GPU computes: `faithful_interpreter`), at MLA's shapes (one 512 + 64
  latent KV head, 8-16 query heads, 3-4 draft tokens, bf16 and fp8 KV). Each error is checked against a bound
  derived from where the kernels round (see `error_bound`); with an fp8 KV also against `tiled_reference`,
  the kernel's own per-tile roundings made again in fp64, whose bound holds fp32's errors and the output's
  bf16 rounding only.
- `split_counts`: how many splits 0.5.14's kernel gives a prefix (its in-kernel rule) per GPU, batch and length.
- `gate_cases`: which simulated GPUs (support.cuda_sim) the line's backend sends target-verify to it on.
- `dispatch_case` (0.5.14, where the patch adds the dispatch): `TritonAttnBackend.forward_extend` in
  TARGET_VERIFY mode runs the split-KV kernel and returns what `extend_attention_fwd` returns.
- `compile_cases`: the exact launch the line makes (its constexprs and launch options, captured from the real
  launcher), compiled by Triton for sm_90a and sm_120a without a GPU: shared memory within the SM's limit and
  no register spills (ptxas' stack frame, read with the cuobjdump Triton ships).
"""

from __future__ import annotations

import contextlib
import importlib
import math
import os
import subprocess
import tempfile
from types import SimpleNamespace
from typing import Any

VERIFY_MODULES = ("sglang.srt.layers.attention.triton_ops.verify_shared_kv",  # 0.5.14 with P8
                  "sglang.kernels.ops.attention.verify_mla")                    # 0.5.23 (upstream's)
EXTEND_MODULES = ("sglang.srt.layers.attention.triton_ops.extend_attention",
                  "sglang.kernels.ops.attention.extend_attention")
BACKEND = "sglang.srt.layers.attention.triton_backend"
# the simulated GPUs: (capability, SM count) of an H200 (the lab) and an RTX PRO 6000 Blackwell (the target)
ARCHS = {"sm90": ((9, 0), 132), "sm120": ((12, 0), 188)}
# cudaDevAttrMaxSharedMemoryPerBlockOptin: 227 KB on SM90, 99 KB on SM120/SM121
SHARED_LIMIT = {90: 232448, 120: 101376}
U_BF16 = 2.0**-8  # unit roundoff of bfloat16 (8 significand bits)
U_FP8 = 2.0**-4  # float8_e4m3fn (4 significand bits)
FP8_ABS = 2.0**-10  # half the smallest e4m3 subnormal (2^-9): the absolute rounding error of a tiny value
U_FP32 = 2.0**-24
# fp32 exp and log: ex2.approx / lg2.approx on NVIDIA GPUs (2 ulp), numpy's float32 exp / log under the
# interpreter (within 4 ulp): 4 ulp of fp32, relative for exp, absolute (times 1 + |log x|) for log
U_EXP = 2.0**-21

CASES = [  # the kimi61 pair's and Kimi-K2.x TP8's shapes: 8 heads/rank; DeepSeek-V3 TP8: 16
    {"arch": "sm90", "bs": 2, "h": 8, "draft": 3, "prefix": [37, 300], "kv": "bf16"},
    {"arch": "sm120", "bs": 1, "h": 8, "draft": 3, "prefix": [700], "kv": "bf16"},  # 6 splits, the last short
    {"arch": "sm90", "bs": 3, "h": 16, "draft": 4, "prefix": [1, 129, 520], "kv": "bf16"},
    {"arch": "sm120", "bs": 4, "h": 8, "draft": 3, "prefix": [5, 64, 200, 300], "kv": "bf16"},
    {"arch": "sm90", "bs": 2, "h": 8, "draft": 3, "prefix": [37, 300], "kv": "fp8", "k_scale": 0.5,
     "v_scale": 2.0},
    # fp8 with scales fp32 rounds, a one-key prefix and 4 drafts (0.5.14: 2 splits; 0.5.23: 6 of 33 keys)
    {"arch": "sm120", "bs": 2, "h": 8, "draft": 4, "prefix": [1, 200], "kv": "fp8", "k_scale": 0.37,
     "v_scale": 1.7},
    # the long-prefix rule at a size the interpreter runs (0.5.14's SHORT_SPLITS / LONG_CHUNK scaled down to 2 and
    # 128 tokens): 1100 tokens take 9 splits, not 2; beside it a short prefix that keeps its 2
    {"arch": "sm90", "bs": 1, "h": 8, "draft": 3, "prefix": [1100], "kv": "bf16", "split_rule": (2, 128)},
    {"arch": "sm120", "bs": 2, "h": 8, "draft": 3, "prefix": [40, 1000], "kv": "bf16", "split_rule": (2, 128)},
]
# prefix lengths the split rule is asked about (split_counts): short ones, the 64k edge, the lab's 96k / 128k / 256k
SPLIT_PREFIXES = (1, 700, 8192, 32768, 65536, 65537, 98304, 131072, 262144)


def _first_module(names: tuple[str, ...]):
    for name in names:
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError:
            continue
    return None


def verify_module():
    """The line's split-KV verify module, or None (a tree without it)."""
    m = _first_module(VERIFY_MODULES)
    return m if m is not None and hasattr(m, "verify_shared_kv_fwd") else None


def _simulate_arch(module, arch: str) -> None:
    """Our 0.5.14 kernel plans from the device's capability and SM count; on CPU tensors it asks these two."""
    capability, sms = ARCHS[arch]
    if hasattr(module, "_device_capability"):
        module._device_capability = lambda device: capability
        module._sm_count = lambda device: sms
    for cache in ("_SCRATCH", "_VMLA_CACHE"):
        if hasattr(module, cache):
            getattr(module, cache).clear()


def make_inputs(case: dict, seed: int = 0) -> dict:
    import torch

    g = torch.Generator().manual_seed(seed)
    bs, h, draft, d, dv = case["bs"], case["h"], case["draft"], 576, 512
    prefix = case["prefix"]
    tokens = bs * draft
    pool = max(1024, 2 * sum(prefix) + tokens)
    kv_dtype = torch.float8_e4m3fn if case["kv"] == "fp8" else torch.bfloat16
    q = torch.randn(tokens, h, d, generator=g).bfloat16()
    k_ext = torch.randn(tokens, 1, d, generator=g).bfloat16()
    k_buf = torch.randn(pool, 1, d, generator=g).to(kv_dtype)
    lens = torch.tensor(prefix, dtype=torch.int32)
    kv_indptr = torch.zeros(bs + 1, dtype=torch.int32)
    kv_indptr[1:] = torch.cumsum(lens, 0)
    kv_indices = torch.randperm(pool, generator=g)[: sum(prefix)].to(torch.int64)
    # the tree mask sglang builds for topk == 1: the whole prefix, then the causal chain of the drafts
    mask = torch.cat([torch.tril(torch.ones(draft, p + draft, dtype=torch.bool), diagonal=p).flatten()
                      for p in prefix])
    mask_indptr = torch.zeros(bs + 1, dtype=torch.int64)
    mask_indptr[1:] = torch.cumsum(torch.tensor([draft * (p + draft) for p in prefix]), 0)
    return {"q": q, "k_ext": k_ext, "v_ext": k_ext[..., :dv], "k_buf": k_buf, "v_buf": k_buf[..., :dv],
            "qo_indptr": torch.arange(0, tokens + 1, draft, dtype=torch.int32), "kv_indptr": kv_indptr,
            "kv_indices": kv_indices, "mask": mask, "mask_indptr": mask_indptr, "draft": draft,
            "sm_scale": 1.0 / math.sqrt(192), "k_scale": case.get("k_scale", 1.0),
            "v_scale": case.get("v_scale", 1.0), "kv_dtype": kv_dtype}


def _args(x: dict, out) -> tuple:
    return (x["q"], x["k_ext"].contiguous(), x["v_ext"].contiguous(), out, x["k_buf"], x["v_buf"], x["qo_indptr"],
            x["kv_indptr"], x["kv_indices"], x["mask"], True, x["mask_indptr"], x["draft"], x["k_scale"],
            x["v_scale"], x["sm_scale"])


def reference(x: dict, drop_tail: float = 0.0) -> tuple[Any, Any]:
    """fp64 attention of every draft token over its prefix and the drafts up to itself, with the kernels' one
    deterministic rounding applied (the prefix scores use q cast to the KV dtype, as extend_attention_fwd's
    `q.to(k.dtype)`); and per (token, head) row the bound of error_bound. drop_tail: leave out that fraction
    of every prefix's last tokens (a defect the checks must see)."""
    import torch

    draft, bs = x["draft"], x["qo_indptr"].numel() - 1
    q64 = x["q"].double()
    q_kv = x["q"].to(x["kv_dtype"]).double()
    outs, bounds = [], []
    fp8 = x["kv_dtype"] != torch.bfloat16
    for b in range(bs):
        lo, hi = int(x["kv_indptr"][b]), int(x["kv_indptr"][b + 1])
        hi_used = hi - int((hi - lo) * drop_tail)
        idx = x["kv_indices"][lo:hi_used]
        kp, vp = x["k_buf"][idx, 0].double(), x["v_buf"][idx, 0].double() * x["v_scale"]
        ke, ve = x["k_ext"][b * draft:(b + 1) * draft, 0].double(), x["v_ext"][b * draft:(b + 1) * draft, 0].double()
        rows = slice(b * draft, (b + 1) * draft)
        s_p = torch.einsum("lhd,nd->lhn", q_kv[rows], kp) * x["sm_scale"] * x["k_scale"]
        s_e = torch.einsum("lhd,nd->lhn", q64[rows], ke) * x["sm_scale"]
        causal = torch.tril(torch.ones(draft, draft, dtype=torch.bool))
        s_e = s_e.masked_fill(~causal[:, None, :], float("-inf"))
        s = torch.cat([s_p, s_e], -1)
        p = torch.softmax(s, -1)
        v_all = torch.cat([vp, ve], 0)
        outs.append(torch.einsum("lhn,nd->lhd", p, v_all))
        # per-row ingredients of the bound
        abs_qk = torch.cat([torch.einsum("lhd,nd->lhn", q_kv[rows].abs(), kp.abs()) * x["sm_scale"] * x["k_scale"],
                            torch.einsum("lhd,nd->lhn", q64[rows].abs(), ke.abs()) * x["sm_scale"]], -1)
        visible = torch.isfinite(s)
        vmax = v_all.abs().amax(-1)  # per key
        vmax_row = torch.where(visible, vmax[None, None, :], torch.zeros(())).amax(-1)
        e_qk = 576 * U_FP32 * torch.where(visible, abs_qk, torch.zeros(())).amax(-1)
        denom = torch.exp(s - s.amax(-1, keepdim=True)).sum(-1)  # sum of p relative to the row's max
        n_visible = visible.sum(-1).double()
        u_p = U_FP8 if fp8 else U_BF16
        tiny = FP8_ABS * n_visible / denom if fp8 else torch.zeros(())
        bounds.append(((u_p + 2 * e_qk) * vmax_row + tiny * vmax_row, vmax_row))
    out = torch.cat(outs)
    return out, bounds


def error_bound(bounds: list, ref, partials_bf16: bool):
    """Per element, how far a kernel's bf16 output may be from the fp64 reference, whatever its tiling (so with
    an fp8 KV it holds fp8's 2^-4 on every weight: tiled_reference is the bound that sees a kernel 5% off):
    - the probabilities are cast to V's dtype before the PV product: a relative error u_p per weight, so at
      most u_p x max|v| on the weighted mean (u_p = 2^-8 bf16, 2^-4 fp8; fp8 also flushes weights below 2^-10
      of their tile's maximum: FP8_ABS x keys / sum of weights, times max|v|);
    - the scores are fp32 sums of 576 exact products: relative error <= 576 x 2^-24 of sum |q_i k_i| x scale,
      which moves every weight by that factor (twice: numerator and denominator);
    - partial results stored as bf16 (upstream's verify_mla): u_bf16 x max|v| more;
    - the output's own rounding to bf16: u_bf16 x |out| (with 1 ulp of slack for the merge's fp32 exp/log)."""
    import torch

    per_row = torch.cat([b for b, _ in bounds])  # [tokens, heads]
    vmax = torch.cat([v for _, v in bounds])
    extra = (U_BF16 * vmax) if partials_bf16 else 0.0
    return (per_row + extra)[..., None] + U_BF16 * ref.abs() * (1 + U_BF16) + 4 * U_FP32 * vmax[..., None]


# ---- fp8 KV: a reference that rounds p where the kernel does -------------------------------------------
#
# error_bound covers any tiling: every probability rounded to the KV dtype anywhere in (0, 1], u_p = 2^-4 for
# fp8, so an output 5% off still passes. The kernel's rounding is deterministic, though: tiled_reference makes
# it again (same tiles, same running max, same dtypes) in fp64, and its bound holds only what is left.


def _gamma(n: int) -> float:
    """The relative error bound of n fp32 roundings (a sum of n + 1 terms, or a chain of n operations)."""
    return n * U_FP32 / (1 - n * U_FP32)


@contextlib.contextmanager
def _stage1_launch(vmod):
    """Inside it the line's stage-1 kernel runs as ever and records its launch into the dict it yields:
    {parameter name: value}, its constexprs included, and the kernel's name."""
    names = [n for n in ("_verify_shared_kv_stage1", "_verify_mla_prefix_stage1") if hasattr(vmod, n)]
    seen: dict = {}

    class Spy:
        def __init__(self, fn):
            self.fn = fn

        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                # positional: the leading parameters (the constexprs come as keywords)
                seen.update(zip(self.fn.arg_names, args, strict=False), **kwargs, kernel=self.fn.__name__)
                return self.fn[grid](*args, **kwargs)
            return launch

    saved = {n: getattr(vmod, n) for n in names}
    try:
        for n, fn in saved.items():
            setattr(vmod, n, Spy(fn))
        yield seen
    finally:
        for n, fn in saved.items():
            setattr(vmod, n, fn)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def kernel_tiles(launch: dict, prefix: int) -> list[list[tuple[int, int]]]:
    """The prefix's splits as the launched kernel walks them, each a list of (lo, hi) key tiles.
    0.5.14 (`_verify_shared_kv_stage1`): split_count(prefix) splits of per_split = BLOCK_N x cdiv(cdiv(prefix,
    splits), BLOCK_N) tokens, the last cut at the prefix (those past it empty). 0.5.23 (`_verify_mla_prefix_
    stage1`): max(1, min(num_splits, prefix // BLOCK_N)) splits of prefix // splits tokens, the last to the end.
    Tiles of BLOCK_N from each split's start."""
    bn = launch["BLOCK_N"]
    if launch["kernel"] == "_verify_shared_kv_stage1":
        short = min(launch["SHORT"], _cdiv(prefix, launch["MIN_CHUNK"]))
        n = min(launch["max_splits"], max(1, max(short, _cdiv(prefix, launch["LONG"]))))
        per = _cdiv(_cdiv(prefix, n), bn) * bn
        bounds = [(s * per, min((s + 1) * per, prefix)) for s in range(n)]
    else:
        n = max(1, min(launch["num_splits"], prefix // bn))
        per = prefix // n
        bounds = [(s * per, prefix if s == n - 1 else (s + 1) * per) for s in range(n)]
    return [[(t, min(t + bn, hi)) for t in range(lo, hi, bn)] for lo, hi in bounds if hi > lo]


# what each line's kernel does beside the prefix splits: the dtype the draft block's p is cast to before its
# PV product (0.5.14: V_Ext's, bf16; 0.5.23's combine stage keeps fp32), and the dtype the partials are stored in
LINES = {"_verify_shared_kv_stage1": {"draft_p": "bf16", "partials": None},
         "_verify_mla_prefix_stage1": {"draft_p": None, "partials": "bf16"}}


def _rounder(dtype):
    import torch

    if dtype is None:
        return lambda t: t
    dt = {"bf16": torch.bfloat16, "fp8": torch.float8_e4m3fn}.get(dtype, dtype)
    return lambda t: t.to(dt).double()


def _split_part(s, e, r, v, tiles, p_dtype, v_scale: float) -> tuple:
    """One split (or the draft block) of one sequence, every (token, head) row at once, in fp64: the kernel's
    online softmax over `tiles` with p rounded to p_dtype per tile against the running max. s: [L, H, keys]
    scores (-inf where not visible), e / r: [L, H] the row's score error bound and score range, v: [keys, DV].
    Returns (M, A, A_abs, F, B) relative to the split's max M (tiled_reference says what they are)."""
    import torch

    rnd = _rounder(p_dtype)
    rows, dv = s.shape[:2], v.shape[1]
    m_run = torch.full(rows, float("-inf"), dtype=torch.float64)
    a, a_abs, f_abs = (torch.zeros(*rows, dv, dtype=torch.float64) for _ in range(3))
    b = torch.zeros(rows, dtype=torch.float64)
    d_p = (2 * e + U_FP32 * (r + 2 * e))[..., None]  # how far the kernel's exp argument s - M_j may be from ours
    for lo, hi in tiles:
        st, vt = s[..., lo:hi], v[lo:hi]
        m_new = torch.maximum(m_run, st.amax(-1))
        alpha = torch.exp(m_run - m_new)[..., None]
        p = torch.exp(st - m_new[..., None])
        flips = rnd(p * torch.exp(d_p) * (1 + U_EXP)) - rnd(p * torch.exp(-d_p) * (1 - U_EXP))
        a = a * alpha + rnd(p) @ vt
        a_abs = a_abs * alpha + rnd(p) @ vt.abs()
        f_abs = f_abs * alpha + flips @ vt.abs()
        b = b * alpha[..., 0] + p.sum(-1)
        m_run = m_new
    return m_run, v_scale * a, v_scale * a_abs, v_scale * f_abs, b


def tiled_reference(x: dict, launch: dict) -> tuple[Any, Any]:
    """The launched kernel's output with its deterministic roundings made again in fp64, and per element the
    bound of what is left; `launch` is its stage-1 launch (_stage1_launch), which gives the tiles (kernel_tiles).

    Made again: q cast to the KV dtype (the prefix scores); per split, per tile of BLOCK_N keys, the running max
    M_j = max(M_j-1, the tile's max) and p = exp(s - M_j) rounded to the V tile's dtype (fp8 KV: e4m3, round to
    nearest even) in the numerator, unrounded in the denominator; v_scale on the prefix; the draft block
    likewise (0.5.14: p cast to bf16; 0.5.23: fp32). Merged by log-sum-exp, the output is one ratio over all
    keys i (in tile j of split P): out = A / B, A = sum_i v_scale e^(M_j) rnd(p_i) v_i, B = sum_i e^(s_i).

    Left to the bound, per (token, head) row, with u = 2^-24, gamma(n) = n u / (1 - n u), U_EXP = 2^-21:
    - the scores: fp32 sums of 576 exact products (fp8 x fp8, bf16 x bf16), scaled twice, fl(sm_scale) once:
      |s_kernel - s| <= e_i = gamma(578) sum_d |q_d k_d| x scale; E = the row's largest e_i, R its score range;
    - the kernel's p: its exp argument s - M_j is off by <= D = 2E + u (R + 2E), so its p lies in [p e^-D
      (1 - U_EXP), p e^D (1 + U_EXP)], and its rounded p is ours unless a rounding boundary lies inside; then
      it is off by <= rnd(hi) - rnd(lo) (rounding is monotone): F = sum_i v_scale e^(M_j) (rnd(hi) - rnd(lo)) |v_i|
      (0 for almost every key);
    - every key's weight in A (v_scale e^(M_j) through the tile rescales, the split's lse and the merge) and in
      B (e^(s_i)) is the kernel's within a factor e^(+-theta): theta = E + K U_EXP (1 + L) + (K + 2) u L, where
      K = m + n + 5 is the exps and logs on its way (m tile rescales, its p, the split's log, n + 1 merge exps,
      0.5.23's second log and exp), each off by U_EXP (relative, or absolute for a log), and each of their fp32
      arguments rounded (u |arg|), |arg| <= L = max|s| + R + log(keys); eps_w = e^theta - 1 (m: the most tiles a
      split has, n: the splits and the draft block);
    - the fp32 sums: A's the PV dots' (exact products; 0.5.23's draft: rounded, +1), the tile rescales and adds,
      fl(v_scale), the multiply by it and the divide by e_sum, the merge's multiplies, adds and divides:
      gamma(N + 2m + 3n + 10) of sum_i |terms| = A_abs (N = BLOCK_N); B's: gamma(N + 2m + 2n + 3);
      eps_a = (1 + eps_w)(1 + gamma(N + 2m + 3n + 10)) - 1, eps_b = (1 + eps_w)(1 + gamma(N + 2m + 2n + 3)) - 1;
    - so A is off by eps_a A_abs + (1 + eps_w) F, B by eps_b B, and out (A / B - A' / B' = (A - A') / B' +
      A (B' - B) / (B B')) by err = (eps_a A_abs / B + (1 + eps_w) F / B + eps_b |out|) / (1 - eps_b);
    - 0.5.23 stores the prefix splits' partials as bf16: + 2^-8 sum_P lambda'_P |o'_P|, bounded by 2^-8 (S /
      (1 - eps_b) + (eps_a A_abs + (1 + eps_w) F) / (B (1 - eps_b))), S = sum_P lambda_P |o_P| (exact weights);
    - the output's rounding to bf16 (round to nearest even): 2^-8 (|out| + err).
    No term is fp8's 2^-4: a kernel off by 5% lands outside. The fp32 sums are IEEE fp32's, as the interpreter's
    np.matmul computes them; on SM90 Triton leaves an fp8 tl.dot's accumulation imprecise (the NVIDIA backend's
    max_num_imprecise_acc_default is 2^30 for capability 90: the tensor cores' own, never promoted), which this
    bound does not model: a check on an H100 / H200 needs that figure first."""
    import torch

    line = LINES[launch["kernel"]]
    draft, bs = x["draft"], x["qo_indptr"].numel() - 1
    q64, q_kv = x["q"].double(), x["q"].to(x["kv_dtype"]).double()
    scale_p, scale_e = x["sm_scale"] * x["k_scale"], x["sm_scale"]
    g_qk = _gamma(x["q"].shape[-1] + 2)
    outs, bounds = [], []
    for b in range(bs):
        lo, hi = int(x["kv_indptr"][b]), int(x["kv_indptr"][b + 1])
        idx = x["kv_indices"][lo:hi]
        kp, vp = x["k_buf"][idx, 0].double(), x["v_buf"][idx, 0].double()
        rows = slice(b * draft, (b + 1) * draft)
        ke, ve = x["k_ext"][rows, 0].double(), x["v_ext"][rows, 0].double()
        causal = torch.tril(torch.ones(draft, draft, dtype=torch.bool))[:, None, :]
        s_p = torch.einsum("lhd,nd->lhn", q_kv[rows], kp) * scale_p
        s_e = (torch.einsum("lhd,nd->lhn", q64[rows], ke) * scale_e).masked_fill(~causal, float("-inf"))
        e_p = g_qk * torch.einsum("lhd,nd->lhn", q_kv[rows].abs(), kp.abs()) * scale_p
        e_e = (g_qk * torch.einsum("lhd,nd->lhn", q64[rows].abs(), ke.abs()) * scale_e).masked_fill(~causal, 0)
        e = torch.cat([e_p, e_e], -1).amax(-1)
        s_all = torch.cat([s_p, s_e], -1)
        finite = s_all.masked_fill(torch.isinf(s_all), 0.0)
        r = s_all.amax(-1) - s_all.masked_fill(torch.isinf(s_all), float("inf")).amin(-1)
        big_l = finite.abs().amax(-1) + r + math.log(hi - lo + draft)
        splits = kernel_tiles(launch, hi - lo)
        parts = [_split_part(s_p, e, r, vp, tiles, x["kv_dtype"], x["v_scale"]) for tiles in splits]
        parts.append(_split_part(s_e, e, r, ve, [(0, draft)], line["draft_p"], 1.0))
        m_p, a_p, a_abs, f_abs, b_p = (torch.stack(t) for t in zip(*parts, strict=True))
        w = torch.exp(m_p - m_p.amax(0))  # [parts, L, H]: each split's e^(M_P) on a common scale
        big_b = (w * b_p).sum(0)[..., None]
        a_all, a_abs, f_abs = ((w[..., None] * t).sum(0) for t in (a_p, a_abs, f_abs))
        out = a_all / big_b
        m, n, nb = max([len(t) for t in splits] + [1]), len(parts), launch["BLOCK_N"]  # [1]: the draft block
        k = m + n + 5
        theta = e + k * U_EXP * (1 + big_l) + (k + 2) * U_FP32 * big_l
        eps_w = (torch.exp(theta) - 1)[..., None]
        eps_a = (1 + eps_w) * (1 + _gamma(nb + 2 * m + 3 * n + 10)) - 1
        eps_b = (1 + eps_w) * (1 + _gamma(nb + 2 * m + 2 * n + 3)) - 1
        num = (eps_a * a_abs + (1 + eps_w) * f_abs) / big_b
        err = (num + eps_b * out.abs()) / (1 - eps_b)
        if line["partials"] == "bf16":
            s_abs = (w[:-1, ..., None] * a_p[:-1].abs()).sum(0) / big_b  # the prefix splits' sum lambda |o|
            err = err + U_BF16 * (s_abs + num) / (1 - eps_b)
        outs.append(out)
        bounds.append(err + U_BF16 * (out.abs() + err))
    return torch.cat(outs), torch.cat(bounds)


# ---- the interpreter's float downcasts, made what the GPU computes ---------------------------------------

_CAST_PROBE = (0.49, 0.4999, 1.97, -1.99, 7.9, 0.0039, 0.0015, 0.00585, 0.296875, 1.004150390625,
               0.9990234375, -3.999, 1.01171875, 0.0625 * 0.98, 240.0, 0.0)


def _cast_errors() -> int:
    """How many of _CAST_PROBE the interpreter casts otherwise than torch (round to nearest even, as the GPU's
    cvt.rn): fp32 -> bf16, fp32 -> fp8e4nv, bf16 -> fp8e4nv."""
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def _casts(X, B, F, G, N: tl.constexpr):
        i = tl.arange(0, N)
        x = tl.load(X + i)
        tl.store(B + i, x.to(tl.bfloat16))
        tl.store(F + i, x.to(tl.float8e4nv))
        tl.store(G + i, x.to(tl.bfloat16).to(tl.float8e4nv))

    x = torch.tensor(_CAST_PROBE, dtype=torch.float32)
    bf, f8, g8 = torch.zeros_like(x, dtype=torch.bfloat16), *(torch.zeros_like(x, dtype=torch.float8_e4m3fn)
                                                              for _ in range(2))
    _casts[(1,)](x, bf, f8, g8, N=x.numel())
    want = [x.bfloat16(), x.to(torch.float8_e4m3fn), x.bfloat16().to(torch.float8_e4m3fn)]
    return sum(int((got.view(torch.uint8 if got.element_size() == 1 else torch.int16)
                    != w.view(torch.uint8 if w.element_size() == 1 else torch.int16)).sum())
               for got, w in zip((bf, f8, g8), want, strict=True))


def fix_fp_downcasts() -> bool:
    """Make the interpreter's fp32 -> bf16 and fp32 / bf16 -> fp8e4nv casts round to nearest even, as the GPU
    does; True if it had to be patched. Triton 3.9's interpreter truncates fp32 -> bf16 (cast_impl hands
    _convert_float no rounding mode: 1.0041 -> 1.0, 0.999 -> 0.996) and its 'rtne' to fp8 rounds half up, drops
    the carry of a significand that rounds up into an odd exponent (0.49 -> 0.25, 1.97 -> 1.0) and flushes
    what rounds to the smallest subnormals (0.0039 -> 0.00195): a kernel's fp8 p and q were up to 2x off
    there. Such casts go through torch's conversions (round to nearest even) instead; others are untouched.
    It checks itself as support.triton_interp.fix_bf16_dot does (the two belong together there)."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError("fix_fp_downcasts: TRITON_INTERPRET=1 must be set before the kernels are defined")
    if _cast_errors() == 0:
        return False
    import numpy as np
    import torch
    import triton.language as tl
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    cast_impl, fp_to_fp = builder.cast_impl, builder.create_fp_to_fp
    to_torch = {tl.float32: lambda d: torch.from_numpy(np.ascontiguousarray(d, dtype=np.float32)),
                tl.bfloat16: lambda d: torch.from_numpy(np.ascontiguousarray(d).view(np.int16)).view(torch.bfloat16)}
    from_torch = {tl.bfloat16: lambda t: t.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16),
                  tl.float8e4nv: lambda t: t.to(torch.float8_e4m3fn).view(torch.uint8).numpy()}

    def rounded(src, dst):
        data = from_torch[dst](to_torch[src.dtype.scalar](src.data)).reshape(np.shape(src.data))
        return interpreter.TensorHandle(data, dst)

    def fixed_cast_impl(self, src, dst_type):
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
            return rounded(src, tl.bfloat16)
        return cast_impl(self, src, dst_type)

    def fixed_fp_to_fp(self, src, dst_type, rounding_mode):
        if (src.dtype.scalar in to_torch and dst_type.scalar == tl.float8e4nv
                and rounding_mode == interpreter._ir.ROUNDING_MODE.RTNE):
            return rounded(src, tl.float8e4nv)
        return fp_to_fp(self, src, dst_type, rounding_mode)

    builder.cast_impl, builder.create_fp_to_fp = fixed_cast_impl, fixed_fp_to_fp
    bad = _cast_errors()
    if bad:
        raise RuntimeError(f"fix_fp_downcasts: {bad} casts still off after the fix")
    return True


def faithful_interpreter() -> dict:
    """Triton's interpreter with its bf16 dot (support.triton_interp) and its downcasts (fix_fp_downcasts) made
    right; which of them had to be patched."""
    from support.triton_interp import fix_bf16_dot

    return {"bf16_dot": fix_bf16_dot(), "fp_downcasts": fix_fp_downcasts()}


def kernel_cases(cases: list[dict] | None = None) -> dict:
    """Every case through the line's verify entry and extend_attention_fwd (TRITON_INTERPRET=1)."""
    import torch

    extend = _first_module(EXTEND_MODULES)
    vmod = verify_module()
    out: dict[str, Any] = {"verify_module": vmod.__name__ if vmod else None, "interpreter": faithful_interpreter(),
                           "cases": []}
    for case in cases or CASES:
        x = make_inputs(case)
        ref, bounds = reference(x)
        ext = torch.zeros(ref.shape, dtype=torch.bfloat16)
        extend.extend_attention_fwd(*_args(x, ext))
        row = {"case": case, "ran": False}
        partials_bf16 = bool(vmod) and vmod.__name__.endswith("verify_mla")
        bound_ext = error_bound(bounds, ref, partials_bf16=False)
        row["extend_vs_ref"] = _ratio(ext.double() - ref, bound_ext)
        defect, _ = reference(x, drop_tail=0.25)
        row["defect_vs_ref"] = _ratio(defect - ref, bound_ext)  # a kernel that skipped 1/4 of the prefix
        if vmod is not None:
            _simulate_arch(vmod, case["arch"])
            mine = torch.zeros(ref.shape, dtype=torch.bfloat16)
            with _split_rule(vmod, case.get("split_rule")), _stage1_launch(vmod) as launch:
                row["ran"] = bool(vmod.verify_shared_kv_fwd(*_args(x, mine), max_bs=case["bs"] + 2))
            bound = error_bound(bounds, ref, partials_bf16)
            row["verify_vs_ref"] = _ratio(mine.double() - ref, bound)
            row["verify_vs_extend"] = _ratio(mine.double() - ext.double(), bound + bound_ext)
            row["max_abs_diff_vs_extend"] = float((mine.double() - ext.double()).abs().max())
            if case["kv"] == "fp8" and row["ran"]:  # the kernel's own roundings made again: what is left is fp32's
                tiled, tight = tiled_reference(x, launch)
                row["verify_vs_tiled"] = _ratio(mine.double() - tiled, tight)
                row["defect_vs_tiled"] = _ratio(defect - tiled, tight)
                row["scaled_vs_tiled"] = _ratio(1.05 * mine.double() - tiled, tight)  # a kernel 5% off
                row["scaled_vs_ref"] = _ratio(1.05 * mine.double() - ref, bound)  # error_bound's: it passes
                row["tight_vs_bound"] = float((tight / bound).max())
        out["cases"].append(row)
    return out


@contextlib.contextmanager
def _split_rule(vmod, rule: tuple[int, int] | None):
    """0.5.14's split rule (SHORT_SPLITS, LONG_CHUNK) replaced for one call; nothing where the line has none."""
    if rule is None or not hasattr(vmod, "SHORT_SPLITS"):
        yield
        return
    saved = vmod.SHORT_SPLITS, vmod.LONG_CHUNK
    vmod.SHORT_SPLITS, vmod.LONG_CHUNK = rule
    try:
        yield
    finally:
        vmod.SHORT_SPLITS, vmod.LONG_CHUNK = saved


_SPLIT_COUNT = None  # the line's split_count, set by split_counts (a global: the probe kernel calls it by name)


def split_counts() -> dict:
    """How many splits the line's kernel gives one sequence's prefix (its in-kernel `split_count`, run by a probe
    kernel under Triton's interpreter), per simulated GPU, batch size and prefix length, with the grid's
    max_splits; {"rule": None} where the line has no such rule (0.5.23: upstream's verify_mla)."""
    global _SPLIT_COUNT
    import torch
    import triton
    import triton.language as tl

    vmod = verify_module()
    if vmod is None or not hasattr(vmod, "split_count"):
        return {"rule": None}
    _SPLIT_COUNT = vmod.split_count

    @triton.jit
    def probe(P, OUT, max_splits, MIN_CHUNK: tl.constexpr, SHORT: tl.constexpr, LONG: tl.constexpr):
        i = tl.program_id(0)
        tl.store(OUT + i, _SPLIT_COUNT(tl.load(P + i), max_splits, MIN_CHUNK, SHORT, LONG))

    rows = []
    for arch, (cap, sms) in ARCHS.items():
        plan = vmod.plan_launch(8, 1, 576, 512, 3, cap, v_is_k=True)
        c = plan.constexprs
        for bs in (1, 4):
            ms = vmod.max_splits(bs, plan.head_blocks, sms)
            prefixes = torch.tensor(SPLIT_PREFIXES, dtype=torch.int32)
            got = torch.zeros_like(prefixes)
            probe[(len(SPLIT_PREFIXES),)](prefixes, got, ms, MIN_CHUNK=c["MIN_CHUNK"], SHORT=c["SHORT"],
                                          LONG=c["LONG"])
            rows += [{"arch": arch, "bs": bs, "prefix": p, "max_splits": ms, "min_chunk": c["MIN_CHUNK"],
                      "splits": int(n)} for p, n in zip(SPLIT_PREFIXES, got.tolist(), strict=True)]
    return {"rule": {"MAX_SPLITS": vmod.MAX_SPLITS, "SHORT_SPLITS": vmod.SHORT_SPLITS, "LONG_CHUNK": vmod.LONG_CHUNK},
            "rows": rows}


def _ratio(err, bound) -> float:
    """max over elements of |err| / bound: <= 1 is within the bound."""
    return float((err.abs() / bound).max())


def gate_cases() -> dict:
    """The line's target-verify gate on simulated GPUs: (capability, SGLANG_ENABLE_SPLITKV_VERIFY, topk, MLA)."""
    from support.cuda_sim import simulate_cuda

    simulate_cuda((9, 0), device_count=1)
    backend = importlib.import_module(BACKEND)
    rows = []
    for cap in ((9, 0), (12, 0), (12, 1), (10, 0), (8, 9)):
        for env, topk, mla in (("1", 1, True), ("0", 1, True), ("1", 4, True), ("1", 1, False)):
            simulate_cuda(cap, device_count=1)
            os.environ["SGLANG_ENABLE_SPLITKV_VERIFY"] = env
            hf = SimpleNamespace(architectures=["DeepseekV3ForCausalLM"], model_type="deepseek_v3")
            if hasattr(backend, "_should_use_verify_shared_kv"):  # 0.5.23: the backend's one gate
                on = backend._should_use_verify_shared_kv(SimpleNamespace(hf_config=hf), topk, mla, False)
            elif hasattr(backend, "_should_use_cuda_verify_shared_kv"):  # 0.5.14 with P8
                on = backend._should_use_cuda_verify_shared_kv(topk, mla)
            else:
                on = False  # 0.5.14 before P8: only gfx95 (ROCm) has a split-KV verify
            rows.append({"capability": list(cap), "env": env, "topk": topk, "mla": mla, "on": bool(on)})
    os.environ.pop("SGLANG_ENABLE_SPLITKV_VERIFY", None)
    return {"rows": rows}


class _FakeMLAPool:
    """What forward_extend asks of MLATokenToKVPool: one latent row of 576 per token, values = its first 512."""

    def __init__(self, k_buf):
        self.k_buf = k_buf

    def get_key_buffer(self, layer_id):
        return self.k_buf

    def get_value_buffer(self, layer_id):
        return self.k_buf[..., :512]

    def set_kv_buffer(self, layer, loc, cache_k, cache_v, *scales):
        self.k_buf[loc.loc if hasattr(loc, "loc") else loc] = cache_k.to(self.k_buf.dtype)


def dispatch_case() -> dict:
    """0.5.14: TritonAttnBackend.forward_extend in TARGET_VERIFY mode, an MLA layer, on a simulated SM120, with
    the backend's gate as __init__ computes it; which kernels ran and how the output compares."""
    import torch

    from support.cuda_sim import simulate_cuda

    faithful_interpreter()
    simulate_cuda((12, 0), device_count=1)
    if _first_module(EXTEND_MODULES[:1]) is None:  # 0.5.23 (kernels moved): the dispatch is upstream's own
        return {"applicable": False}
    tb = importlib.import_module(BACKEND)
    from sglang.srt.layers.radix_attention import AttentionType
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    extend = importlib.import_module(EXTEND_MODULES[0])
    vmod = verify_module()
    case = {"arch": "sm120", "bs": 2, "h": 8, "draft": 3, "prefix": [37, 300], "kv": "bf16"}
    x = make_inputs(case, seed=1)
    if vmod is not None:
        _simulate_arch(vmod, "sm120")
    ran: list[str] = []

    def spy(name, fn):
        def call(*a, **k):
            ran.append(name)
            return fn(*a, **k)
        return call

    backend = tb.TritonAttnBackend.__new__(tb.TritonAttnBackend)
    gate = getattr(tb, "_should_use_cuda_verify_shared_kv", None)
    backend.use_verify_shared_kv = bool(gate(1, True)) if gate else False
    backend.use_verify_splitkv = False
    backend.use_mla = True
    backend.enable_deterministic = False
    backend.allow_bidirectional_attention_in_extend = False
    backend.extend_attention_fwd = spy("extend_attention_fwd", extend.extend_attention_fwd)
    if vmod is not None:
        backend.verify_shared_kv_fwd = spy("verify_shared_kv_fwd", vmod.verify_shared_kv_fwd)
    # the draft tokens' rows in the pool: after the prefixes, written by forward_extend (save_kv_cache)
    pool = _FakeMLAPool(x["k_buf"].clone())
    backend.token_to_kv_pool = pool
    backend.req_to_token_pool = SimpleNamespace(size=4)
    backend.forward_metadata = tb.ForwardMetadata(
        attn_logits=None, attn_lse=None, max_extend_len=x["draft"], num_kv_splits=None, kv_indptr=x["kv_indptr"],
        kv_indices=x["kv_indices"], qo_indptr=x["qo_indptr"], custom_mask=x["mask"], mask_indptr=x["mask_indptr"],
        window_kv_indptr=None, window_kv_indices=None, window_num_kv_splits=None, window_kv_offsets=None)
    layer = SimpleNamespace(tp_q_head_num=8, qk_head_dim=576, v_head_dim=512, layer_id=0, k_scale=None,
                            v_scale=None, scaling=x["sm_scale"], logit_capping_method="tanh", logit_cap=0.0,
                            is_cross_attention=False, attn_type=AttentionType.DECODER, sliding_window_size=None,
                            xai_temperature_len=-1)
    tokens = x["q"].shape[0]
    free = sorted(set(range(pool.k_buf.shape[0])) - set(x["kv_indices"].tolist()))[:tokens]
    batch = SimpleNamespace(forward_mode=ForwardMode.TARGET_VERIFY, out_cache_loc=torch.tensor(free))
    o = backend.forward_extend(x["q"].view(tokens, -1), x["k_ext"], x["v_ext"], layer, batch)
    ref = torch.zeros(tokens, 8, 512, dtype=torch.bfloat16)
    extend.extend_attention_fwd(*_args({**x, "k_buf": pool.k_buf, "v_buf": pool.k_buf[..., :512]}, ref))
    got = o.view(tokens, 8, 512).double()
    rref, bounds = reference(x)
    bound = error_bound(bounds, rref, partials_bf16=False)
    return {"applicable": True, "gate": backend.use_verify_shared_kv, "ran": ran,
            "vs_extend": _ratio(got - ref.double(), 2 * bound)}


# ---- compiling the real launch for sm_90a / sm_120a -----------------------------------------------------

_TRITON_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "int32": "i32", "int64": "i64",
                  "float8_e4m3fn": "fp8e4nv"}


class _Recorder:
    """Stands in for a @triton.jit kernel: `kernel[grid](*args, **kwargs)` records the call, launches nothing."""

    def __init__(self, fn, calls: list):
        self.fn, self.calls = fn, calls

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.calls.append((self.fn, args, kwargs))
        return launch


def _signature(fn, args: tuple, kwargs: dict) -> tuple[dict, dict, dict]:
    options = {k: kwargs[k] for k in ("num_warps", "num_stages") if k in kwargs}
    constexprs = {k: v for k, v in kwargs.items() if k not in options}
    sig: dict[str, str] = {}
    positional = iter(args)
    for p in fn.params:
        if p.is_constexpr:
            sig[p.name] = "constexpr"
            continue
        v = next(positional)
        if hasattr(v, "dtype") and hasattr(v, "data_ptr"):
            sig[p.name] = "*" + _TRITON_DTYPES[str(v.dtype).removeprefix("torch.")]
        elif isinstance(v, float):
            sig[p.name] = "fp32"
        else:
            sig[p.name] = "i32"
    return sig, constexprs, options


def _resources(cubin: bytes) -> dict:
    import triton

    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        text = subprocess.run([tool, "-res-usage", f.name], capture_output=True, text=True, check=True).stdout
    fields = dict(tok.split(":", 1) for line in text.splitlines() if "REG:" in line for tok in line.split()
                  if ":" in tok and tok.split(":", 1)[1].isdigit())
    return {"registers": int(fields["REG"]), "stack": int(fields["STACK"])}


def compile_cases() -> dict:
    """The kimi61 / Kimi-K2.x TP8 launch (8 heads, 3 drafts, 576/512) the line makes on each architecture, for
    bf16 and fp8 KV, compiled for the real target; the stage-1 (prefix) kernel is the heavy one."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    vmod = verify_module()
    if vmod is None:
        return {"verify_module": None, "rows": []}
    rows = []
    for arch, (cap, _sms) in ARCHS.items():
        for kv in ("bf16", "fp8"):
            calls: list = []
            kernels = {n: getattr(vmod, n) for n in dir(vmod) if isinstance(getattr(vmod, n), triton.JITFunction)}
            try:
                for name, fn in kernels.items():
                    setattr(vmod, name, _Recorder(fn, calls))
                _simulate_arch(vmod, arch)
                x = make_inputs({"bs": 1, "h": 8, "draft": 3, "prefix": [64], "kv": kv})
                import torch

                vmod.verify_shared_kv_fwd(*_args(x, torch.zeros(3, 8, 512, dtype=torch.bfloat16)), max_bs=1)
            finally:
                for name, fn in kernels.items():
                    setattr(vmod, name, fn)
            target = cap[0] * 10 + cap[1]
            for fn, args, kwargs in calls:
                sig, constexprs, options = _signature(fn, args, kwargs)
                compiled = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=constexprs),
                                          target=GPUTarget("cuda", target, 32), options=options)
                rows.append({"arch": arch, "kv": kv, "kernel": fn.__name__, "shared": compiled.metadata.shared,
                             "shared_limit": SHARED_LIMIT[target], **_resources(compiled.asm["cubin"]),
                             "options": options,
                             "tile": {k: v for k, v in constexprs.items() if k.startswith(("BLOCK", "ROWS"))}})
    return {"verify_module": vmod.__name__, "rows": rows}
