"""P7 (sglang): environment knobs for the all-reduce dispatch the tuner decides (symm-mem sizes, fused tokens),
read by the patched server (CPU ranks, TP=2). Both knob families are set at once and checked from one pair of
ranks per tree (support.scenarios_knobs): each only reads its own variables."""

from __future__ import annotations

import pytest

from .conftest import carrying

PROBE = """
import json
from support.tp import run_tp
print(json.dumps(run_tp(2, "support.scenarios_knobs:allreduce_knob_cases")[0]))
"""
ENV = {"SGLANG_TORCH_SYMM_MEM_MAX_SIZE": str(256 * 1024), "SGLANG_TORCH_SYMM_MEM_ONESHOT_MAX_SIZE": "16384",
       "SGLANG_FLASHINFER_ALLREDUCE_FUSION_MAX_TOKENS": "24"}


def _symm_problems(r: dict) -> list[str]:
    if not r["constructed"] or r["disabled"]:
        return [f"communicator unusable: {r}"]
    p = []
    if r["kernels"]["43008"] != ["two_shot_all_reduce_"]:
        p.append(f"42 KB used {r['kernels']['43008']}: SGLANG_TORCH_SYMM_MEM_ONESHOT_MAX_SIZE=16384 ignored")
    if r["kernels"]["1048576"] != "nccl":
        p.append(f"1 MiB used {r['kernels']['1048576']}: SGLANG_TORCH_SYMM_MEM_MAX_SIZE=256 KiB ignored")
    return p


def _fusion_problems(r: dict) -> list[str]:
    """The knob lowers the cap P5 derives from the captured graphs (16 x 3 = 48) to 24 tokens."""
    p = []
    sizes = [c["max_token_num"] for c in r["calls"]]
    if sizes != [24]:
        p.append(f"workspace for {sizes} tokens; SGLANG_FLASHINFER_ALLREDUCE_FUSION_MAX_TOKENS=24 ignored")
    gate = {int(k): v for k, v in r["gate"].items()}
    if not gate[24] or gate[25] or gate[48]:
        p.append(f"fusion gate {gate}: expected open up to 24 tokens only")
    return p


def _problems(r: dict) -> list[str]:
    return [f"symm-mem: {p}" for p in _symm_problems(r["symm"])] + \
        [f"fusion: {p}" for p in _fusion_problems(r["fusion"])]


@pytest.fixture(scope="module", params=carrying("P7"))
def outcome(request, patch_trees):
    return patch_trees.assert_needs_patch(request.param, "P7", PROBE, _problems, env=ENV)


def test_symm_mem_size_knobs(outcome):
    assert _symm_problems(outcome["with"]["symm"]) == []
    assert _symm_problems(outcome["without"]["symm"]), "upstream ignores the symm-mem knobs"


def test_fusion_token_knob(outcome):
    assert _fusion_problems(outcome["with"]["fusion"]) == []
    assert _fusion_problems(outcome["without"]["fusion"]), "upstream ignores the fusion token knob"
