"""P3 (sglang): EAGLE-3 aux hidden states are the same with AR+RMSNorm fusion on and off at TP=2."""

from __future__ import annotations

import pytest

from .conftest import absorbed, carrying

PROBE = """
import json
from support.scenarios_fusion import eagle3_summary
from support.tp import run_tp
print(json.dumps(eagle3_summary(run_tp(2, "support.scenarios_fusion:eagle3_capture_on_off"))))
"""


def _problems(r: dict) -> list[str]:
    p = []
    if r["n_aux"] != [3, 3]:
        p.append(f"expected 3 captured layers per run, got {r['n_aux']}")
    if min(r["fused_calls"]) == 0:
        p.append("fusion never ran: the scenario did not exercise the deferred all-reduce")
    if r["out_diff"] > 1e-4:
        p.append(f"model output differs with fusion ({r['out_diff']}): scenario broken")
    if r["aux_diff"] > 1e-4:
        p.append(f"aux hidden states differ with fusion on vs off by {r['aux_diff']:.3g}")
    if r["rank_diff"] > 1e-4:
        p.append(f"ranks captured different aux hidden states ({r['rank_diff']:.3g}): partial sums")
    return p


@pytest.mark.parametrize("base", carrying("P3"))
def test_aux_capture_equal_with_fusion(base, patch_trees):
    r = patch_trees.assert_needs_patch(base, "P3", PROBE, _problems)
    assert r["without"]["aux_diff"] > 1e-2  # the silent bug: per-rank partial sums reach the draft


@pytest.mark.parametrize("base", absorbed("P3"))
def test_absorbed_upstream(base, patch_trees):
    """Where base.toml says upstream has the fix, the same scenario passes on the unpatched release."""
    patch_trees.assert_absorbed_fusion(base, "eagle3", _problems)
