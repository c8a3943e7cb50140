"""P5 (sglang): the FlashInfer fusion workspace exists before CUDA-graph capture, sized to
cuda_graph_max_bs x speculative_num_draft_tokens, and the fusion gate is tied to that size."""

from __future__ import annotations

import pytest

from .conftest import carrying

PROBE = """
import json
from support.tp import run_tp
print(json.dumps(run_tp(2, "support.scenarios_fusion:workspace_at_capture",
                        {"cuda_graph_bs": [1, 2, 4, 8, 16], "draft_tokens": 3})[0]))
"""


def _problems(r: dict) -> list[str]:
    p = []
    if r["max_num_token"] != 48:
        p.append(f"scenario broken: largest verify graph has {r['max_num_token']} tokens, expected 16 x 3")
    if not r["initialized"]:
        p.append("no fusion workspace when capture starts (it would be created inside graph capture)")
    sizes = [c["max_token_num"] for c in r["calls"]]
    if sizes and sizes != [48]:
        p.append(f"workspace created for {sizes} tokens, expected [48]")
    if r["gate_above_max"]:
        p.append("fusion gate admits more tokens than the workspace holds")
    if not r["gate_at_max"]:
        p.append("fusion gate closed for the largest captured graph")
    if r["prefill_error"]:
        p.append(f"prefill-sized batch tripped the workspace: {r['prefill_error']}")
    if r["workspace_calls_after"]:
        p.append("a prefill batch re-created the workspace (for 2048 tokens)")
    return p


@pytest.mark.parametrize("base", carrying("P5"))
def test_workspace_created_before_capture_and_sized(base, patch_trees):
    patch_trees.assert_needs_patch(base, "P5", PROBE, _problems)
