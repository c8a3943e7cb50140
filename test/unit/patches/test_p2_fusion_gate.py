"""P2 (sglang): SM12x accepted by the FlashInfer all-reduce fusion gate when the user opts in; never
auto-enabled on SM12x."""

from __future__ import annotations

import pytest

from support.probe import run_probe

from .conftest import carrying

CASES = [  # (capability, --enable-flashinfer-allreduce-fusion, expected gate with the patch)
    ((12, 0), True, True),    # RTX PRO 6000 Blackwell / RTX 50xx, opted in: the patch
    ((12, 1), True, True),    # DGX Spark / GB10 class
    ((12, 0), False, False),  # SM12x without the flag: no fusion
    ((9, 0), True, True),     # Hopper: unchanged
    ((10, 0), True, True),    # Blackwell datacenter: unchanged
    ((8, 0), True, False),    # Ampere: unchanged
]
GATE_PROBE = ("import json\nfrom support.scenarios_gate import gate_cases\n"
              "print(json.dumps({'gates': [r['gate'] for r in gate_cases("
              + repr([{"capability": c, "fusion_flag": f} for c, f, _ in CASES]) + ")]}))")


def _problems(r: dict) -> list[str]:
    return [f"capability {c} flag {f}: gate {'open' if g else 'closed'}, expected {'open' if e else 'closed'}"
            for (c, f, e), g in zip(CASES, r["gates"], strict=True) if g != e]


@pytest.mark.parametrize("base", carrying("P2"))
def test_gate_matrix_needs_patch(base, patch_trees):
    r = patch_trees.assert_needs_patch(base, "P2", GATE_PROBE, _problems)
    assert r["without"]["gates"][0] is False  # upstream: SM120 silently ignores the opt-in flag


@pytest.mark.parametrize("base", carrying("P2"))
def test_never_auto_enabled_on_sm120(base, patch_trees):
    """ServerArgs turns fusion on by itself for DeepSeek-V3 on SM90 (so the scenario can see auto-enabling)
    but never on SM12x: upstream withdrew that after a TP4 PCIe regression (PR #32330)."""
    probe = ("import json\nfrom support.scenarios_gate import auto_enable\n"
             "print(json.dumps({'sm90': auto_enable((9, 0))['auto_enabled'], "
             "'sm120': auto_enable((12, 0))['auto_enabled']}))")
    r = run_probe(patch_trees.with_patch(base), probe)
    assert r == {"sm90": True, "sm120": False}
