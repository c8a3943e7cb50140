"""The numerics rules of `bench allreduce` on CPU tensors: exactness at TP=2, bf16 tolerance otherwise, and
that real mistakes (one ulp off, a missing residual, NaN) fail. The rank context is a CPU stand-in for a
GPU rank."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from sglang_blackwell.bench.allreduce import correctness as ac  # noqa: E402
from sglang_blackwell.bench.allreduce.backends import RankContext  # noqa: E402

H, T = 256, 3


def ctx(world_size: int = 2, rank: int = 0) -> RankContext:
    return RankContext(rank=rank, world_size=world_size, device=torch.device("cpu"), group=None, hidden=H,
                       dtype=torch.bfloat16, tokens=[T], fi_max_tokens=2048)


def local_reference(world_size: int) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor, ac.Reference]:
    """What reference() computes, for every rank's inputs generated on one CPU."""
    xs = [ac.make_inputs(ctx(world_size, r), T, seed=7)[0] for r in range(world_size)]
    _, res, gamma = ac.make_inputs(ctx(world_size), T, seed=7)
    s = torch.stack([x.float() for x in xs]).sum(0)
    r = s + res.float()
    n = r * torch.rsqrt(r.pow(2).mean(-1, keepdim=True) + 1e-6) * gamma.float()
    nccl = xs[0].clone()
    for x in xs[1:]:
        nccl = (nccl.float() + x.float()).to(torch.bfloat16)
    return xs, res, gamma, ac.Reference(s, r, n, nccl)


def test_inputs_differ_per_rank_residual_shared():
    a, ra, ga = ac.make_inputs(ctx(2, 0), T, seed=1)
    b, rb, gb = ac.make_inputs(ctx(2, 1), T, seed=1)
    assert not torch.equal(a, b)
    assert torch.equal(ra, rb) and torch.equal(ga, gb)
    assert a.dtype == torch.bfloat16 and a.shape == (T, H)


def test_ulp():
    assert ac.ulp(1.0, torch.bfloat16) == 2 ** -7
    assert ac.ulp(5.0, torch.bfloat16) == 2 ** -5
    assert ac.ulp(-5.0, torch.float16) == 2 ** -8
    assert ac.ulp(0.0, torch.bfloat16) == 0.0


def test_ar_tp2_must_be_bit_identical():
    _, _, _, ref = local_reference(2)
    ok = ac.check("ar", (ref.nccl_sum.clone(),), ref, ctx(2))
    assert ok["ok"] and ok["rule"].startswith("bit-identical") and ok["parts"]["sum"]["max_abs"] == 0.0
    off = ref.nccl_sum.clone()
    v = float(off[1, 7])
    off[1, 7] = v + ac.ulp(v, torch.bfloat16)  # the next bf16 value: one ulp off
    assert not torch.equal(off, ref.nccl_sum)
    bad = ac.check("ar", (off,), ref, ctx(2))
    assert not bad["ok"] and bad["parts"]["sum"]["max_abs"] > 0


def test_ar_tp4_tolerance():
    _, _, _, ref = local_reference(4)
    near = ac.check("ar", (ref.sum32.to(torch.bfloat16),), ref, ctx(4))  # one rounding: within tolerance
    assert near["ok"] and near["rule"].startswith("bf16 tolerance")
    wrong = ac.check("ar", ((ref.sum32 * 0.9).to(torch.bfloat16),), ref, ctx(4))
    assert not wrong["ok"]


def test_fused_tolerance_and_mistakes():
    _, res, gamma, ref = local_reference(2)
    norm, resid = ref.norm32.to(torch.bfloat16), ref.residual32.to(torch.bfloat16)
    assert ac.check("ar_rmsnorm", (norm, resid), ref, ctx(2))["ok"]
    # forgot the residual add: the norm of the wrong vector
    s = ref.sum32
    n_wrong = (s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + 1e-6) * gamma.float()).to(torch.bfloat16)
    r = ac.check("ar_rmsnorm", (n_wrong, s.to(torch.bfloat16)), ref, ctx(2))
    assert not r["ok"] and not r["parts"]["residual"]["ok"]
    # NaN anywhere fails, and is reported as not finite
    nan = norm.clone()
    nan[0, 0] = float("nan")
    r = ac.check("ar_rmsnorm", (nan, resid), ref, ctx(2))
    assert not r["ok"] and r["parts"]["norm"]["max_abs"] is None


def test_worst_over_ranks():
    a = {"ok": True, "rule": "x", "parts": {"sum": {"ok": True, "max_abs": 0.0, "rel_l2": 1e-3,
                                                   "max_abs_bound": 0.1}}}
    b = {"ok": False, "rule": "x", "parts": {"sum": {"ok": False, "max_abs": None, "rel_l2": None,
                                                    "max_abs_bound": 0.1}}}
    w = ac.worst([a, b])
    assert not w["ok"] and w["parts"]["sum"]["max_abs"] is None
    assert ac.worst([a, a])["ok"]
