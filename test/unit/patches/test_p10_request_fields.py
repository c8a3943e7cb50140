"""P10 (sglang, every base): no request field whose value indexes the model's tensors reaches the scheduler
unchecked. On the lab one /v1/completions request whose prompt held token ids >= the vocabulary size ended the
whole server (an out-of-bounds gather in the embedding, CUBLAS_STATUS_EXECUTION_FAILED, kill_process_tree).

The probe (support/scenarios_requests.field_cases) serves sglang's own FastAPI app in front of a real
TokenizerManager (a tiny model config, no weights) and a stub scheduler, and sends each request of FIELD_CASES
over HTTP: a request either comes back (status, message) or arrives at the stub scheduler. Checked fields:
prompt token ids (flat and batched, /generate and /v1/completions; non-int, bool, negative, == and > vocab, an
empty prompt in a batch), stop_token_ids, top_logprobs_num, token_ids_logprob, logit_bias keys, input_embeds
row width. Good values must still reach the scheduler.
"""

from __future__ import annotations

import pytest

from .conftest import carrying

PROBE = """
import json
from support.scenarios_requests import field_cases
print(json.dumps({"cases": field_cases()}))
"""


def _problems(r: dict) -> list[str]:
    out = []
    for case in r["cases"]:
        got, expected = case["outcome"], case["expected"]
        if expected == "scheduler":
            if got["at"] != "scheduler":
                out.append(f"{case['name']}: a valid request did not reach the scheduler ({got})")
        elif got["at"] != "http" or got["status"] != 400:
            where = f"http {got['status']}" if got["at"] == "http" else got["at"]
            out.append(f"{case['name']}: reached {where}, expected a 400 before the scheduler")
        elif expected not in (case["message"] or ""):
            out.append(f"{case['name']}: 400 says {case['message']!r}, expected it to name {expected!r}")
    return out


@pytest.fixture(scope="module", params=carrying("P10"))
def outcome(request, patch_trees):
    return patch_trees.assert_needs_patch(request.param, "P10", PROBE, _problems)


def test_bad_request_fields_are_a_400_naming_the_value(outcome):
    assert _problems(outcome["with"]) == []


def test_without_it_out_of_vocabulary_prompts_reach_the_scheduler(outcome):
    """The lab's crash: a prompt id >= the vocabulary size, in /v1/completions, got past the TokenizerManager."""
    bad = {c["name"]: c["outcome"]["at"] for c in outcome["without"]["cases"]}
    assert bad["completions: prompt id >= vocab"] == "scheduler"
