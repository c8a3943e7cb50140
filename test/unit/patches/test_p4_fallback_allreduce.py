"""P4 (sglang): when the fused AR+residual+RMSNorm declines, RMSNorm.forward_with_allreduce_fusion still
all-reduces (TP=2, CPU ranks), adds post_residual_addition once, and leaves the caller's residual alone."""

from __future__ import annotations

import pytest

from .conftest import absorbed, carrying

PROBE = """
import json
from support.tp import run_tp
print(json.dumps({"ranks": run_tp(2, "support.scenarios_fusion:rmsnorm_fallback_cases")}))
"""
VARIANTS = ("plain", "post_residual_addition")


def _problems(r: dict) -> list[str]:
    p = []
    for rank, cases in enumerate(r["ranks"]):
        p += [f"{v}: {q}" for v in VARIANTS for q in _rank_problems(rank, cases[v])]
    return p


def _rank_problems(rank: int, x: dict) -> list[str]:
    p = []
    if x["out_max_err"] > 1e-4:
        p.append(f"rank {rank}: norm output off by {x['out_max_err']:.3g} (partial sums, no all-reduce)")
    if x["residual_max_err"] > 1e-4:
        p.append(f"rank {rank}: residual off by {x['residual_max_err']:.3g}")
    if not x["caller_residual_untouched"]:
        p.append(f"rank {rank}: the caller's residual tensor was modified")
    return p


@pytest.mark.parametrize("base", carrying("P4"))
def test_fallback_allreduces(base, patch_trees):
    r = patch_trees.assert_needs_patch(base, "P4", PROBE, _problems)
    # both variants are wrong without the patch, not just one
    assert all(_rank_problems(0, r["without"]["ranks"][0][v]) for v in VARIANTS)


@pytest.mark.parametrize("base", absorbed("P4"))
def test_absorbed_upstream(base, patch_trees):
    """Where base.toml says upstream has the fix (0.5.23: the fallback all-reduces over the kernel's group),
    the same scenario passes on the unpatched release."""
    patch_trees.assert_absorbed_fusion(base, "fallback", _problems)
