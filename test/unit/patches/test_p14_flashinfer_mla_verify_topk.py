"""P14 (sglang, every base): an EAGLE launch whose draft tree (--speculative-eagle-topk > 1) would be verified by
FlashInfer's MLA backend is refused while sglang resolves its arguments, with one line naming the flag and the way
out; the launches that verify correctly are resolved as upstream resolves them.

FlashInfer's MLA backend plans target-verify with a causal mask and drops the tree mask ("TODO: Support topk > 1
with custom mask" in FlashInferMLAIndicesUpdaterPrefill): each draft token would attend to its sibling branches and
the accepted tokens come from wrong logits. Upstream refuses top-k > 1 only in the MLA draft's own decode backend,
so a GQA draft (LlamaForCausalLMEagle3) on a DeepSeek-V3-shaped target starts and serves wrong tokens. The probe
(support/scenarios_verify_topk.py) resolves a real ServerArgs per case, as `launch_server` does.
"""

from __future__ import annotations

import pytest

from .conftest import carrying

RUN = """
import json
from support.scenarios_verify_topk import cases
print(json.dumps(cases()))
"""
# case name -> refused? (FlashInfer runs target-verify of an MLA target at top-k > 1)
EXPECTED = {
    "mla flashinfer topk 4": True,
    "mla flashinfer topk 4, decode mode": True,
    "mla flashinfer topk 1": False,
    "mla triton topk 4": False,
    "gqa flashinfer topk 4": False,  # FlashInfer's non-MLA backend passes the tree mask
    "mla hybrid, verify on flashinfer": True,  # --speculative-attention-mode prefill: verify on the prefill backend
    "mla hybrid, verify on triton": False,  # mode decode: verify on the Triton decode backend
}


def _problems(r: dict) -> list[str]:
    out = []
    rows = {row["name"]: row for row in r["rows"]}
    if set(rows) != set(EXPECTED):
        return [f"cases run {sorted(rows)}, expected {sorted(EXPECTED)}"]
    for name, refuse in EXPECTED.items():
        row = rows[name]
        if row["error"]:
            out.append(f"{name}: resolution failed otherwise: {row['error']}")
        elif refuse and not row["refused"]:
            out.append(f"{name}: resolved (top-k {row['topk_after']}), a draft tree verified without its mask")
        elif refuse and not all(s in row["refused"] for s in (f"--speculative-eagle-topk {row['topk']}",
                                                                "flashinfer", "--attention-backend")):
            out.append(f"{name}: refused without naming the flag, the backend and the way out: {row['refused']}")
        elif not refuse and row["refused"]:
            out.append(f"{name}: refused a launch that verifies correctly: {row['refused']}")
        elif not refuse and row["topk_after"] != row["topk"]:
            out.append(f"{name}: top-k resolved to {row['topk_after']}, asked {row['topk']}")
    return out


@pytest.fixture(scope="module", params=carrying("P14"))
def outcome(request, patch_trees):
    return patch_trees.assert_needs_patch(request.param, "P14", RUN, _problems)


def test_draft_tree_on_flashinfer_mla_verify_is_refused(outcome):
    rows = {row["name"]: row for row in outcome["with"]["rows"]}
    assert rows["mla flashinfer topk 4"]["refused"].count("\n") == 0  # one line


def test_upstream_resolves_the_draft_tree_silently(outcome):
    """Without P14 the launch resolves with the tree and FlashInfer MLA verify (what assert_needs_patch saw fail)."""
    rows = {row["name"]: row for row in outcome["without"]["rows"]}
    assert rows["mla flashinfer topk 4"]["refused"] is None
    assert rows["mla flashinfer topk 4"]["topk_after"] == 4
