"""P1 (flashinfer): the trtllm_comm JIT module builds for SM12x."""

from __future__ import annotations

import pytest

from .conftest import absorbed, carrying

SPEC_PROBE = """
import json
from flashinfer.jit import comm
try:
    spec = comm.gen_trtllm_comm_module()
    print(json.dumps({"flags": [f for f in spec.extra_cuda_cflags if "arch=" in f],
                      "sources": sorted(str(s).rsplit("/", 1)[-1] for s in spec.sources)}))
except RuntimeError as e:
    print(json.dumps({"error": str(e)}))
"""


def _sm120_flags(r: dict) -> list[str]:
    if "error" in r:
        return [f"gen_trtllm_comm_module raised: {r['error']}"]
    if not any("compute_120a" in f and "sm_120a" in f for f in r["flags"]):
        return [f"no sm_120a target in {r['flags']}"]
    if "trtllm_allreduce_fusion.cu" not in r["sources"]:
        return [f"fusion source missing from {r['sources']}"]
    return []


@pytest.mark.parametrize("base", carrying("P1"))
def test_trtllm_comm_jit_spec_targets_sm120a(base, patch_trees):
    """With FLASHINFER_CUDA_ARCH_LIST=12.0a (an RTX PRO 6000's arch), the module's nvcc flags target sm_120a;
    unpatched, FlashInfer raises 'No supported CUDA architectures found for major versions [9, 10]'."""
    r = patch_trees.assert_needs_patch(base, "P1", SPEC_PROBE, _sm120_flags,
                                       env={"FLASHINFER_CUDA_ARCH_LIST": "12.0a"})
    assert "major versions [9, 10]" in r["without"].get("error", "")


@pytest.mark.parametrize("base", carrying("P1"))
@pytest.mark.parametrize("arch", ["9.0a", "10.0a"])
def test_trtllm_comm_jit_spec_keeps_hopper_and_blackwell_dc(base, arch, patch_trees):
    from support.probe import run_probe

    r = run_probe(patch_trees.with_patch(base), SPEC_PROBE, env={"FLASHINFER_CUDA_ARCH_LIST": arch})
    want = arch.replace(".", "")
    assert any(f"sm_{want}" in f for f in r["flags"]), r


@pytest.mark.parametrize("base", absorbed("P1"))
def test_absorbed_upstream(base, patch_trees):
    """flashinfer >= 0.6.17 lists major 12 itself (PR #3903): the same probe passes on the unpatched wheel."""
    r = patch_trees.assert_absorbed(base, "flashinfer", SPEC_PROBE, _sm120_flags,
                                    env={"FLASHINFER_CUDA_ARCH_LIST": "12.0a"})
    assert "trtllm_allreduce_fusion.cu" in r["sources"]
