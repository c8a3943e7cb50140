"""P11 (sglang 0.5.14, 0.5.23): the EAGLE draft model's draft-extend on CUDA through the split-KV kernel
target-verify uses (P8), for GQA and MLA drafts at topk == 1, on SM90 and SM12x;
SGLANG_ENABLE_SPLITKV_DRAFT_EXTEND=0 turns it off.

Upstream runs draft-extend (after every verify: the accepted tokens over the whole prefix of the draft's KV
cache) through extend_attention_fwd, one program per (request, head) walking the prefix serially: its cost
grows with the context as target-verify's did (0.879 ms a round at 8k on the lab, GQA draft). What the patched
tree must show, on CPU (support/scenarios_draft_extend.py says how each is checked):

- the gate: on for SM90 / SM12.0 / SM12.1 at topk 1, off with the switch at 0, at topk > 1, and on other GPUs;
- TritonAttnBackend.forward_extend in DRAFT_EXTEND_V2 mode runs the split-KV kernel for a GQA (32 / 8 heads of
  128, separate K and V) and an MLA (8 heads, one 576-wide latent) draft layer, and returns what
  extend_attention_fwd returns within the derived bound;
- the kernel equals extend_attention_fwd and an fp64 reference within that bound at both shapes, including
  rows with no prefix (the padded rows of a draft-extend CUDA graph), where 0.5.23's kernel gave NaN before.
"""

from __future__ import annotations

import pytest

from .conftest import carrying

RUN = """
import json
from support.scenarios_draft_extend import CASES, dispatch_case, gate_cases, kernel_cases
gate = gate_cases()
# every case where the backend routes draft-extend to the kernel; elsewhere (Triton's interpreter is the slow part)
# only the small one with an empty prefix, which 0.5.23's kernel turned into NaN
kernel = kernel_cases() if gate["gate"] else {**kernel_cases([CASES[3]]), "routed": False}
print(json.dumps({"gate": gate, "dispatch": dispatch_case(), "kernel": kernel}))
"""
VALIDATED = ((9, 0), (12, 0), (12, 1))


def _gate_problems(r: dict) -> list[str]:
    out = [] if r["gate"]["gate"] else ["no draft-extend gate in the backend"]
    for row in r["gate"]["rows"]:
        want = tuple(row["capability"]) in VALIDATED and row["env"] == "1" and row["topk"] == 1
        if row["on"] != want:
            out.append(f"capability {row['capability']} SGLANG_ENABLE_SPLITKV_DRAFT_EXTEND={row['env']} topk "
                       f"{row['topk']}: split-KV draft-extend {'on' if row['on'] else 'off'}, expected "
                       f"{'on' if want else 'off'}")
    return out


def _dispatch_problems(r: dict) -> list[str]:
    d, out = r["dispatch"], []
    for shape, layer in d["layers"].items():
        if "error" in layer:
            out.append(f"{shape} draft layer: DRAFT_EXTEND_V2 forward_extend raised {layer['error']}")
            continue
        if layer["ran"] != ["verify_shared_kv_fwd"]:
            out.append(f"{shape} draft layer: DRAFT_EXTEND_V2 forward_extend on SM120 ran {layer['ran']}, expected "
                       "the split-KV kernel only")
        if layer["vs_extend"] > 1:
            out.append(f"{shape} draft layer: output off extend_attention_fwd by {layer['vs_extend']:.2f}x the bound")
    return out


def _kernel_problems(r: dict) -> list[str]:
    out = [] if r["kernel"].get("routed", True) else ["the backend routes no draft-extend to the kernel"]
    for row in r["kernel"]["cases"]:
        c = row["case"]
        label = f"{c['arch']} {c['shape']} draft, prefixes {c['prefix']}"
        if row["extend_vs_ref"] > 1:
            out.append(f"{label}: extend_attention_fwd itself is {row['extend_vs_ref']:.2f}x the bound off the fp64 "
                       "reference (the bound is wrong)")
        if not row["ran"]:
            out.append(f"{label}: the split-KV kernel declined the case")
            continue
        if not row["finite"]:
            out.append(f"{label}: NaN or inf in the output")
        for key in ("verify_vs_ref", "verify_vs_extend"):
            if not row[key] <= 1:  # NaN fails too
                out.append(f"{label}: {key} {row[key]:.2f}x the bound")
    return out


def _problems(r: dict) -> list[str]:
    return _gate_problems(r) + _dispatch_problems(r) + _kernel_problems(r)


@pytest.fixture(scope="module", params=carrying("P11"))
def outcome(request, patch_trees):
    return patch_trees.assert_needs_patch(request.param, "P11", RUN, _problems, env={"TRITON_INTERPRET": "1"})


def test_gate_on_sm90_and_sm12x_only(outcome):
    assert _gate_problems(outcome["with"]) == []
    assert _gate_problems(outcome["without"]), "without P11 draft-extend never takes the split-KV path"


def test_draft_extend_dispatches_to_it_for_gqa_and_mla_drafts(outcome):
    assert _dispatch_problems(outcome["with"]) == []
    assert _dispatch_problems(outcome["without"])


def test_equals_extend_attention_within_the_bound_with_empty_prefixes(outcome, request):
    assert _kernel_problems(outcome["with"]) == []
    if request.node.callspec.params["outcome"] == "0.5.23":  # upstream's kernel without P11: NaN on an empty prefix
        assert any("NaN" in p for p in _kernel_problems(outcome["without"]))
    rows = outcome["with"]["kernel"]["cases"]
    assert {r["case"]["shape"] for r in rows} == {"gqa", "mla"} and any(0 in r["case"]["prefix"] for r in rows)
