"""P13 (sglang 0.5.14, 0.5.23): the Triton backend's grouped (GQA / MHA) decode gets more KV splits on long-context
models, as MLA decode already does upstream; short sequences keep the splits they had.

Upstream caps the grouped decode kernel's splits at --triton-attention-num-kv-splits (8) whatever the context, so at
batch 1 a 32 / 8-head draft layer walks a 128k prefix with 64 programs (the lab: the GQA draft's round 1.5 ms longer
than the MLA draft's at 128k). What the patched tree must show, on CPU (support/scenarios_decode_splits.py builds
TritonAttnBackend from sglang's own ModelConfig and ServerArgs on a simulated 132-SM GPU):

- max_kv_splits for a grouped model: max(flag, min(64, next_pow2(SMs), next_pow2(ceil(context / 2048)))), so 8 up to
  16k of context, 64 at 128k; the flag's value with SGLANG_TRITON_DECODE_SPLITS_BY_CONTEXT=0; MLA as upstream has it;
- get_num_kv_splits gives a 131072-token sequence 64 splits and a 2048-token one the 8 it had;
- decode_attention_fwd with the split count and buffers the backend sized (more than 8 splits) equals an fp64
  softmax attention within the bound the scenario derives.
"""

from __future__ import annotations

import math

import pytest

from .conftest import carrying

RUN = """
import json
from support.scenarios_decode_splits import cap_cases, dispatch_case
cap = cap_cases()
# the decode kernel where the backend lifts the cap (the interpreted kernel is the slow part); elsewhere the splits
lifted = any(r["max_kv_splits"] > r["flag"] for r in cap["rows"] if not r["mla"])
print(json.dumps({"cap": cap, "dispatch": dispatch_case(decode=lifted)}))
"""
GQA_MAX, TOKENS_PER_SPLIT = 64, 2048


def _pow2(n: int) -> int:
    return 1 << max(0, math.ceil(math.log2(n)))


def expected_gqa(context: int, flag: int, env: str | None, sm_count: int) -> int:
    if env == "0":
        return flag
    return max(flag, min(GQA_MAX, _pow2(sm_count), _pow2(math.ceil(context / TOKENS_PER_SPLIT))))


def _cap_problems(r: dict) -> list[str]:
    out = []
    for row in r["cap"]["rows"]:
        if row["mla"]:
            continue
        want = expected_gqa(row["context"], row["flag"], row["env"], r["cap"]["sm_count"])
        if row["max_kv_splits"] != want:
            out.append(f"GQA model, context {row['context']}, flag {row['flag']}, switch {row['env']}: "
                       f"max_kv_splits {row['max_kv_splits']}, expected {want}")
    return out


def _dispatch_problems(r: dict) -> list[str]:
    d, out = r["dispatch"], []
    if d["splits_131072"] != GQA_MAX:
        out.append(f"a 131072-token sequence of the GQA draft gets {d['splits_131072']} splits, expected {GQA_MAX}")
    if d["splits_2048"] != 8:
        out.append(f"a 2048-token sequence gets {d['splits_2048']} splits, expected the 8 it had")
    if "splits" not in d:
        return out + ["the backend lifts no cap: the decode kernel was not run with more than 8 splits"]
    if not d["splits"] > 8:
        out.append(f"the {d['seq_len']}-token decode ran {d['splits']} splits: not more than upstream's 8")
    if not (d["finite"] and d["err_vs_bound"] <= 1):  # NaN fails too
        out.append(f"decode output {d['err_vs_bound']:.2f}x the bound off the fp64 reference (finite: {d['finite']})")
    return out


def _problems(r: dict) -> list[str]:
    return _cap_problems(r) + _dispatch_problems(r)


@pytest.fixture(scope="module", params=carrying("P13"))
def outcome(request, patch_trees):
    return patch_trees.assert_needs_patch(request.param, "P13", RUN, _problems, env={"TRITON_INTERPRET": "1"})


def test_grouped_decode_cap_grows_with_the_context(outcome):
    assert _cap_problems(outcome["with"]) == []
    assert _cap_problems(outcome["without"]), "without P13 a long-context GQA model keeps 8 splits"


def test_mla_decode_cap_is_upstreams(outcome):
    mla = [(row["context"], row["max_kv_splits"]) for row in outcome["with"]["cap"]["rows"] if row["mla"]]
    assert mla == [(row["context"], row["max_kv_splits"]) for row in outcome["without"]["cap"]["rows"] if row["mla"]]
    assert len(mla) >= 5


def test_long_sequences_get_the_splits_short_ones_keep_theirs(outcome):
    assert _dispatch_problems(outcome["with"]) == []
    without = outcome["without"]["dispatch"]
    assert without["splits_131072"] == 8 and without["splits_2048"] == 8
