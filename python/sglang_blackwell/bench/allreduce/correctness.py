"""Numerics: every backend's result against NCCL or an exact fp32 reference.

Rules (written into every check result):
  op "ar", TP=2        bit-identical to NCCL's sum: with two ranks every correct implementation computes
                       round(a + b) exactly once, so any difference is a bug.
  op "ar", TP>2        bf16 tolerance against the exact fp32 sum (summation order differs between kernels).
  op "ar_rmsnorm"      bf16 tolerance against fp32 residual add + RMSNorm, for residual_out and norm_out.
  bf16 tolerance       every value finite, rel_l2 <= 1e-2, and max_abs <= max(2, TP) ulps of the largest
                       |reference| value (a bf16 ulp is 2^-7 relative; rounding alone gives rel_l2 ~2e-3).
The fp32 reference sums all ranks' bf16 inputs exactly in fp32 (all_gather), adds the residual and applies
RMSNorm (eps 1e-6) times gamma, all in fp32.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.distributed as dist

from .backends import RankContext

REL_L2_MAX = 1e-2
MANTISSA_BITS = {torch.bfloat16: 7, torch.float16: 10}


@dataclass
class Reference:
    sum32: torch.Tensor
    residual32: torch.Tensor
    norm32: torch.Tensor
    nccl_sum: torch.Tensor  # NCCL's own result for the same inputs (dtype of the run)


def make_inputs(ctx: RankContext, tokens: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-rank partial sums x (different on every rank), and the residual and gamma (same on every rank)."""
    def randn(s: int, *shape: int) -> torch.Tensor:
        g = torch.Generator(device=ctx.device)
        g.manual_seed(s)
        return torch.randn(*shape, generator=g, device=ctx.device, dtype=torch.float32)

    x = randn(seed * 10 + ctx.rank, tokens, ctx.hidden).to(ctx.dtype)
    residual = randn(seed * 10 + 1_000_003, tokens, ctx.hidden).to(ctx.dtype)
    gamma = (1.0 + 0.1 * randn(seed * 10 + 2_000_003, ctx.hidden)).to(ctx.dtype)
    return x, residual, gamma


def reference(ctx: RankContext, x: torch.Tensor, residual: torch.Tensor, gamma: torch.Tensor) -> Reference:
    parts = [torch.empty_like(x, dtype=torch.float32) for _ in range(ctx.world_size)]
    dist.all_gather(parts, x.float(), group=ctx.group)
    s = torch.stack(parts).sum(0)
    r = s + residual.float()
    n = r * torch.rsqrt(r.pow(2).mean(-1, keepdim=True) + ctx.eps) * gamma.float()
    nccl = x.clone()
    dist.all_reduce(nccl, group=ctx.group)
    return Reference(s, r, n, nccl)


def ulp(value: float, dtype: torch.dtype) -> float:
    """Spacing of `dtype` values at |value| (bf16: 2^(exponent - 7))."""
    v = abs(value)
    if v == 0.0 or not math.isfinite(v):
        return 0.0
    return 2.0 ** (math.floor(math.log2(v)) - MANTISSA_BITS[dtype])


def compare(out: torch.Tensor, ref: torch.Tensor, *, exact: bool, ulps: float, dtype: torch.dtype) -> dict:
    a, b = out.float(), ref.float()
    finite = bool(torch.isfinite(a).all().item())
    d = (a - b).abs()
    bound = 0.0 if exact else ulps * ulp(float(b.abs().max().item()), dtype)
    if not finite:  # JSON has no infinity: None marks "not finite"
        return {"ok": False, "finite": False, "max_abs": None, "rel_l2": None, "max_abs_bound": bound}
    max_abs = float(d.max().item())
    rel_l2 = float(((a - b).norm() / b.norm().clamp_min(1e-30)).item())
    ok = max_abs == 0.0 if exact else (rel_l2 <= REL_L2_MAX and max_abs <= bound)
    return {"ok": ok, "finite": finite, "max_abs": max_abs, "rel_l2": rel_l2, "max_abs_bound": bound}


def check(op: str, outs: tuple[torch.Tensor, ...], ref: Reference, ctx: RankContext) -> dict:
    """This rank's verdict for one call's outputs; see the module doc for the rules."""
    ulps = float(max(2, ctx.world_size))
    if op == "ar":
        if ctx.world_size == 2:
            rule = "bit-identical to NCCL (TP=2)"
            parts = {"sum": compare(outs[0], ref.nccl_sum, exact=True, ulps=0, dtype=ctx.dtype)}
        else:
            rule = f"bf16 tolerance vs fp32 sum (rel_l2 <= {REL_L2_MAX}, max_abs <= {ulps:g} ulp)"
            parts = {"sum": compare(outs[0], ref.sum32, exact=False, ulps=ulps, dtype=ctx.dtype)}
    else:
        rule = f"bf16 tolerance vs fp32 residual+RMSNorm (rel_l2 <= {REL_L2_MAX}, max_abs <= {ulps:g} ulp)"
        parts = {"norm": compare(outs[0], ref.norm32, exact=False, ulps=ulps, dtype=ctx.dtype),
                 "residual": compare(outs[1], ref.residual32, exact=False, ulps=ulps, dtype=ctx.dtype)}
    return {"ok": all(p["ok"] for p in parts.values()), "rule": rule, "parts": parts}


def worst(per_rank: list[dict]) -> dict:
    """Combine the ranks' verdicts for one check: ok only if every rank is ok; worst statistics."""
    out = {"ok": all(c["ok"] for c in per_rank), "rule": per_rank[0]["rule"], "parts": {}}
    for name in per_rank[0]["parts"]:
        ps = [c["parts"][name] for c in per_rank]
        out["parts"][name] = {
            "ok": all(p["ok"] for p in ps),
            "max_abs": _worst_value(p["max_abs"] for p in ps),
            "rel_l2": _worst_value(p["rel_l2"] for p in ps),
            "max_abs_bound": min(p["max_abs_bound"] for p in ps),
        }
    return out


def _worst_value(values) -> float | None:
    vals = list(values)
    return None if any(v is None for v in vals) else max(vals)
