"""P2 (sglang): SM12x accepted by the FlashInfer all-reduce fusion gate when the user opts in; never
auto-enabled on SM12x.

One probe process per tree answers every question (the gate matrix, backend resolution and the workspace
preflight where the line has them, auto-enabling): importing a sglang tree costs far more than the checks.
"""

from __future__ import annotations

import pytest

from .conftest import carrying

CASES = [  # (capability, the user's fusion opt-in, expected gate with the patch)
    ((12, 0), True, True),    # RTX PRO 6000 Blackwell / RTX 50xx, opted in: the patch
    ((12, 1), True, True),    # DGX Spark / GB10 class
    ((12, 0), False, False),  # SM12x without the flag: no fusion
    ((9, 0), True, True),     # Hopper: unchanged
    ((10, 0), True, True),    # Blackwell datacenter: unchanged
    ((8, 0), True, False),    # Ampere: unchanged
]
RESOLVE_CASES = [  # sglang >= 0.5.14: --flashinfer-allreduce-fusion-backend resolution
    ({"capability": (12, 0), "backend": "trtllm"}, "trtllm"),
    ({"capability": (12, 0), "backend": "auto"}, "trtllm"),  # explicit opt-in; never auto-enabled
    ({"capability": (12, 0), "backend": "mnnvl"}, None),       # needs NVLink multicast
    ({"capability": (12, 0), "backend": "trtllm", "multi_node": True}, None),
    ({"capability": (9, 0), "backend": "auto"}, "trtllm"),    # Hopper: unchanged
]
PROBE = f"""
import json
from support.scenarios_gate import auto_enable, gate_cases, preflight_sizes, resolve_cases
print(json.dumps({{
    "gates": [r["gate"] for r in gate_cases({[{"capability": c, "fusion_flag": f} for c, f, _ in CASES]!r})],
    "resolve": resolve_cases({[c for c, _ in RESOLVE_CASES]!r}),
    "preflight_no_multicast": preflight_sizes(False), "preflight_multicast": preflight_sizes(True),
    "auto_enabled": {{"sm90": auto_enable((9, 0))["auto_enabled"], "sm120": auto_enable((12, 0))["auto_enabled"]}},
}}))
"""


def _gate_problems(r: dict) -> list[str]:
    return [f"capability {c} flag {f}: gate {'open' if g else 'closed'}, expected {'open' if e else 'closed'}"
            for (c, f, e), g in zip(CASES, r["gates"], strict=True) if g != e]


def _path_problems(r: dict) -> list[str]:
    """sglang >= 0.5.14 also rejects SM12x in _resolve_backend and, on GPUs without multicast (PCIe), fails the
    workspace preflight at cuMulticastGetGranularity, so fusion is skipped with a warning."""
    if not r["resolve"][0]["applicable"]:  # 0.5.9 has neither _resolve_backend nor the preflight
        return []
    p = []
    for (case, want), got in zip(RESOLVE_CASES, r["resolve"], strict=True):
        if got["resolved"] != want:
            p.append(f"{case}: resolved to {got['resolved']!r} ({got['error']}), expected {want!r}")
    pre = r["preflight_no_multicast"]
    if pre["error"]:
        p.append(f"workspace preflight fails on a GPU without multicast: {pre['error']}")
    return p


def _problems(r: dict) -> list[str]:
    return _gate_problems(r) + _path_problems(r)


@pytest.fixture(scope="module", params=carrying("P2"))
def outcome(request, patch_trees):
    return patch_trees.assert_needs_patch(request.param, "P2", PROBE, _problems)


def test_gate_matrix(outcome):
    assert _gate_problems(outcome["with"]) == []
    assert outcome["without"]["gates"][0] is False  # upstream: SM120 silently ignores the opt-in


def test_backend_resolution_and_preflight(outcome):
    with_, without = outcome["with"], outcome["without"]
    if not with_["resolve"][0]["applicable"]:
        pytest.skip("this sglang line has no backend resolution or workspace preflight (0.5.9)")
    assert _path_problems(with_) == []
    assert _path_problems(without), "without P2 SM12x resolution and the multicast-free preflight should fail"
    assert with_["preflight_multicast"]["sizes"] and not with_["preflight_multicast"]["error"]
    assert all(s % (1 << 21) == 0 for s in with_["preflight_no_multicast"]["sizes"])


def test_never_auto_enabled_on_sm120(outcome):
    """sglang turns fusion on by itself for DeepSeek-V3 on SM90 (so the scenario can see auto-enabling) but
    never on SM12x: upstream withdrew that after a TP4 PCIe regression (PR #32330). The patch keeps it so."""
    assert outcome["with"]["auto_enabled"] == {"sm90": True, "sm120": False}
