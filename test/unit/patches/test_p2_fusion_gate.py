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


RESOLVE_CASES = [  # sglang >= 0.5.14: --flashinfer-allreduce-fusion-backend resolution
    ({"capability": (12, 0), "backend": "trtllm"}, "trtllm"),
    ({"capability": (12, 0), "backend": "auto"}, "trtllm"),  # explicit opt-in; never auto-enabled
    ({"capability": (12, 0), "backend": "mnnvl"}, None),       # needs NVLink multicast
    ({"capability": (12, 0), "backend": "trtllm", "multi_node": True}, None),
    ({"capability": (9, 0), "backend": "auto"}, "trtllm"),    # Hopper: unchanged
]
PATH_PROBE = ("import json\nfrom support.scenarios_gate import resolve_cases, preflight_sizes\n"
              "print(json.dumps({'resolve': resolve_cases(" + repr([c for c, _ in RESOLVE_CASES]) + "), "
              "'preflight_no_multicast': preflight_sizes(False), 'preflight_multicast': preflight_sizes(True)}))")


def _path_problems(r: dict) -> list[str]:
    p = []
    for (case, want), got in zip(RESOLVE_CASES, r["resolve"], strict=True):
        if got["resolved"] != want:
            p.append(f"{case}: resolved to {got['resolved']!r} ({got['error']}), expected {want!r}")
    pre = r["preflight_no_multicast"]
    if pre["error"]:
        p.append(f"workspace preflight fails on a GPU without multicast: {pre['error']}")
    return p


def _bases_with_unified_fusion_api() -> list[str]:
    return [b for b in carrying("P2") if b != "0.5.9"]  # 0.5.9 has neither _resolve_backend nor the preflight


@pytest.mark.parametrize("base", _bases_with_unified_fusion_api())
def test_backend_resolution_and_preflight_need_patch(base, patch_trees):
    """sglang >= 0.5.14 also rejects SM12x in _resolve_backend and, on GPUs without multicast (PCIe), fails
    the workspace preflight at cuMulticastGetGranularity, so fusion is skipped with a warning."""
    r = patch_trees.assert_needs_patch(base, "P2", PATH_PROBE, _path_problems)
    assert r["with"]["preflight_multicast"]["sizes"] and not r["with"]["preflight_multicast"]["error"]
    assert all(s % (1 << 21) == 0 for s in r["with"]["preflight_no_multicast"]["sizes"])


@pytest.mark.parametrize("base", carrying("P2"))
def test_never_auto_enabled_on_sm120(base, patch_trees):
    """ServerArgs turns fusion on by itself for DeepSeek-V3 on SM90 (so the scenario can see auto-enabling)
    but never on SM12x: upstream withdrew that after a TP4 PCIe regression (PR #32330)."""
    probe = ("import json\nfrom support.scenarios_gate import auto_enable\n"
             "print(json.dumps({'sm90': auto_enable((9, 0))['auto_enabled'], "
             "'sm120': auto_enable((12, 0))['auto_enabled']}))")
    r = run_probe(patch_trees.with_patch(base), probe)
    assert r == {"sm90": True, "sm120": False}
