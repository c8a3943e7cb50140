"""P9 (sglang): a speculative server warms up every batch-size bucket before it reports ready, so the first
burst of concurrent requests after a start does not stall on Triton compiles.

EAGLE's per-step helper kernels take next_power_of_2(batch size) as a tl.constexpr and run outside the CUDA
graphs: each new power of two compiles a new specialization the first time the scheduler forms such a batch
(on the lab the first c=16 burst after a start ran at 0.48-0.57x of the second). The patched server runs one
batch per power of two up to max_running_requests (and the general warm-up request again, cached) before it
marks itself up. What the tree must show (support/scenarios_warmup.py):

- the sizes: powers of two below max_running_requests and that size, for speculative servers only, off with
  SGLANG_ENABLE_BATCH_SIZE_WARMUP=0, with data-parallel attention and disaggregated serving; no bucket a later
  batch (or batch x draft tokens) can fall into is left unformed;
- what it sends to a real HTTP server: the cached repeat, then one batched /generate per size, greedy, 8
  tokens, ignore_eos, text or input_ids as the general warm-up was;
- the server's own warm-up calls it after its /generate request succeeded and before it marks the server up.
"""

from __future__ import annotations

import pytest

from .conftest import carrying

PROBE = """
import json
from support.scenarios_warmup import requests_sent, sizes, wiring
print(json.dumps({"sizes": sizes(), "requests": requests_sent(), "wiring": wiring()}))
"""
EXPECTED = {  # shape -> sizes
    (True, 48, 1, "null", "1"): [2, 4, 8, 16, 32, 48],
    (True, 16, 1, "null", "1"): [2, 4, 8, 16],
    (True, 256, 1, "null", "1"): [2, 4, 8, 16, 32, 64, 128, 256],
    (True, 48, 1, "null", "0"): [],
    (False, 48, 1, "null", "1"): [],
    (True, 48, 2, "null", "1"): [],
    (True, 48, 1, "prefill", "1"): [],
}


def _size_problems(r: dict) -> list[str]:
    s = r["sizes"]
    if s["missing"]:
        return ["no batch_size_warmup_sizes in sglang.srt.entrypoints.warmup"]
    out = []
    for row in s["rows"]:
        shape = tuple(row["shape"])
        if row["sizes"] != EXPECTED[shape]:
            out.append(f"{shape}: warm-up sizes {row['sizes']}, expected {EXPECTED[shape]}")
        if row["uncovered"]:
            out.append(f"{shape}: buckets no warm-up batch forms: {row['uncovered'][:5]}")
    return out


def _request_problems(r: dict) -> list[str]:
    q = r["requests"]
    if q["missing"]:
        return ["no warmup_batch_sizes in sglang.srt.entrypoints.warmup"]
    out = []
    for key, one in (("text", "The capital city of France is"), ("input_ids", [10, 11, 12])):
        sent = [(x["path"], x["body"].get(key), x["body"].get("sampling_params")) for x in q[key]]
        want = [("/generate", [one] * n, {"temperature": 0, "max_new_tokens": 8, "ignore_eos": True})
                for n in (1, 2, 4, 8)]
        if sent != want:
            out.append(f"{key}: sent {sent}, expected {want}")
    if q["none"]:
        out.append(f"no sizes: sent {q['none']}, expected nothing")
    return out


def _wiring_problems(r: dict) -> list[str]:
    w = r["wiring"]
    if not w["found"]:
        return ["no _execute_server_warmup in entrypoints/http_server.py"]
    if not (w.get("after_check") and w.get("before_up")):
        return [f"_execute_server_warmup does not run the batch-size warm-up between its /generate check and "
                f"ServerStatus.Up (call: {w.get('call')})"]
    return []


def _problems(r: dict) -> list[str]:
    return _size_problems(r) + _request_problems(r) + _wiring_problems(r)


@pytest.fixture(scope="module", params=carrying("P9"))
def outcome(request, patch_trees):
    return patch_trees.assert_needs_patch(request.param, "P9", PROBE, _problems)


def test_warm_up_sizes_cover_every_bucket(outcome):
    assert _size_problems(outcome["with"]) == []


def test_warm_up_requests(outcome):
    assert _request_problems(outcome["with"]) == []


def test_server_warm_up_runs_it_before_ready(outcome):
    assert _wiring_problems(outcome["with"]) == []
    assert _wiring_problems(outcome["without"]), "upstream's warm-up runs one request at batch size 1 only"
