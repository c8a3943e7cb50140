"""P7 (sglang): environment knobs for the all-reduce dispatch the tuner decides (symm-mem sizes, fused tokens),
read by the patched server (CPU ranks, TP=2)."""

from __future__ import annotations

import pytest

from .conftest import carrying

SYMM_PROBE = ("import json\nfrom support.tp import run_tp\n"
              "res = run_tp(2, 'support.scenarios_symm_mem:communicator_cases', "
              "{'cases': [dict(capability=(12, 0), p2p_atomics=True)]}, sglang_init=False)\n"
              "print(json.dumps(res[0][0]))")
SYMM_ENV = {"SGLANG_TORCH_SYMM_MEM_MAX_SIZE": str(256 * 1024), "SGLANG_TORCH_SYMM_MEM_ONESHOT_MAX_SIZE": "16384"}


def _symm_problems(r: dict) -> list[str]:
    if not r["constructed"] or r["disabled"]:
        return [f"communicator unusable: {r}"]
    p = []
    if r["kernels"]["43008"] != ["two_shot_all_reduce_"]:
        p.append(f"42 KB used {r['kernels']['43008']}: SGLANG_TORCH_SYMM_MEM_ONESHOT_MAX_SIZE=16384 ignored")
    if r["kernels"]["1048576"] != "nccl":
        p.append(f"1 MiB used {r['kernels']['1048576']}: SGLANG_TORCH_SYMM_MEM_MAX_SIZE=256 KiB ignored")
    return p


@pytest.mark.parametrize("base", carrying("P7"))
def test_symm_mem_size_knobs(base, patch_trees):
    patch_trees.assert_needs_patch(base, "P7", SYMM_PROBE, _symm_problems, env=SYMM_ENV)


FUSION_PROBE = """
import json
from support.tp import run_tp
print(json.dumps(run_tp(2, "support.scenarios_fusion:workspace_at_capture",
                        {"cuda_graph_bs": [1, 2, 4, 8, 16], "draft_tokens": 3})[0]))
"""


def _fusion_problems(r: dict) -> list[str]:
    p = []
    sizes = [c["max_token_num"] for c in r["calls"]]
    if sizes != [24]:
        p.append(f"workspace for {sizes} tokens; SGLANG_FLASHINFER_ALLREDUCE_FUSION_MAX_TOKENS=24 ignored")
    gate = {int(k): v for k, v in r["gate"].items()}
    if not gate[24] or gate[25] or gate[48]:
        p.append(f"fusion gate {gate}: expected open up to 24 tokens only")
    return p


@pytest.mark.parametrize("base", carrying("P7"))
def test_fusion_token_knob(base, patch_trees):
    """The knob lowers the cap P5 derives from the captured graphs (16 x 3 = 48) to 24 tokens."""
    patch_trees.assert_needs_patch(base, "P7", FUSION_PROBE, _fusion_problems,
                                   env={"SGLANG_FLASHINFER_ALLREDUCE_FUSION_MAX_TOKENS": "24"})
