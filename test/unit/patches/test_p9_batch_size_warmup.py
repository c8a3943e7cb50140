"""P9 (sglang): a server warms up what its first bursts would compile before it reports ready, so the first
burst of concurrent requests after a start does not stall.

Two first-use compiles stalled the lab's first bursts: MLA's JIT-compiled (tvm-ffi, nvcc) KV store, taken by
the first prefill that writes >= 768 tokens at once (py-spy on the lab: ~10 s in the scheduler, baseline and
EAGLE-3 alike), and EAGLE's per-step helper kernels, which take next_power_of_2(batch size) as a tl.constexpr
outside the CUDA graphs (a new Triton specialization per new power of two). The patched server sends a
1024-token prefill, its general warm-up request again (cached) and, when speculative, one batch per power of
two up to max_running_requests before it marks itself up. What the tree must show (support/scenarios_warmup.py):

- the sizes: powers of two below max_running_requests and that size, for speculative servers only, off with
  SGLANG_ENABLE_BATCH_SIZE_WARMUP=0, with data-parallel attention and disaggregated serving; no bucket a later
  batch (or batch x draft tokens) can fall into is left unformed;
- when it runs at all: not with data-parallel attention, disaggregated serving or the switch at 0;
- what it sends to a real HTTP server: the 1024-token prefill, the cached repeat, then one batched /generate
  per size, greedy, ignore_eos, text or input_ids as the general warm-up was;
- the server's own warm-up calls it after its /generate request succeeded and before it marks the server up.
"""

from __future__ import annotations

import pytest

from .conftest import carrying

PROBE = """
import json
from support.scenarios_warmup import (applies, first_use_failures, long_prefill_lengths, requests_sent,
                                      server_warmup, sizes, wiring)
print(json.dumps({"sizes": sizes(), "applies": applies(), "requests": requests_sent(), "wiring": wiring(),
                  "lengths": long_prefill_lengths(), "failures": first_use_failures(), "server": server_warmup()}))
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


LONG = ([10, 11, 12] * 342)[:1024]
GREEDY = {"temperature": 0, "max_new_tokens": 8, "ignore_eos": True}


def _request_problems(r: dict) -> list[str]:
    q, a = r["requests"], r["applies"]
    if q["missing"] or a["missing"]:
        return ["no warmup_first_use / first_use_warmup_applies in sglang.srt.entrypoints.warmup"]
    out = []
    want_applies = {(1, "null", "1"): True, (1, "null", "0"): False, (2, "null", "1"): False,
                    (1, "prefill", "1"): False}
    for row in a["rows"]:
        if row["applies"] != want_applies[tuple(row["shape"])]:
            out.append(f"first-use warm-up for {row['shape']}: {row['applies']}")
    long_prefill = ("/generate", "input_ids", LONG, {**GREEDY, "max_new_tokens": 1})
    for label, key, one, sizes in (("text", "text", "The capital city of France is", (2, 4, 8)),
                                   ("input_ids", "input_ids", [10, 11, 12], (2, 4, 8)),
                                   ("not_speculative", "text", "t", ())):
        sent = [(x["path"], k, x["body"][k], x["body"].get("sampling_params")) for x in q[label]
                for k in ("input_ids", "text") if k in x["body"]]
        want = [long_prefill] + [("/generate", key, [one] * n, GREEDY) for n in (1, *sizes)]
        if sent != want:
            out.append(f"{label}: sent {[(p, k, str(v)[:40], s) for p, k, v, s in sent]}, expected the 1024-token "
                       f"prefill, the cached repeat and batches {sizes}")
    return out


def _wiring_problems(r: dict) -> list[str]:
    w = r["wiring"]
    if not w["found"]:
        return ["no _execute_server_warmup in entrypoints/http_server.py"]
    if not (w.get("after_check") and w.get("before_up")):
        return [f"_execute_server_warmup does not run the first-use warm-up between its /generate check and "
                f"ServerStatus.Up (call: {w.get('call')})"]
    return []


SWITCH = "SGLANG_ENABLE_BATCH_SIZE_WARMUP=0"
# request budget (context length less reserved tokens) -> the long prefill's prompt: it and its one output token
# fit, and the TokenizerManager refuses a prompt of the whole budget
LONG_PREFILL = {None: 1024, 4096: 1024, 1025: 1024, 1024: 1023, 512: 511, 16: 15, 2: 1, 1: 0, 0: 0}
SHORT_CONTEXT = 64  # scenarios_warmup.server_warmup's --context-length


def _fit_problems(r: dict) -> list[str]:
    if r["lengths"]["missing"]:
        return ["no long_prefill_warmup_tokens in sglang.srt.entrypoints.warmup: the warm-up's prefill does not "
                "fit itself to the context"]
    got = {budget: n for budget, n in r["lengths"]["rows"]}
    return [f"a request budget of {b} tokens: long prefill of {got.get(b)}, expected {n}"
            for b, n in LONG_PREFILL.items() if got.get(b) != n]


def _failure_problems(r: dict) -> list[str]:
    f = r["failures"]
    if f["missing"]:
        return ["no warmup_first_use in sglang.srt.entrypoints.warmup"]
    out = []
    for mode in ("400", "500", "hang"):
        row = f[mode]
        if row["raised"] or row["returned"] is not False:
            out.append(f"first-use request answered {mode}: warmup_first_use raised {row['raised']} / returned "
                       f"{row['returned']} (expected False, no exception)")
        if len(row["warnings"]) != 1 or "1024-token prefill" not in row["warnings"][0] \
                or SWITCH not in row["warnings"][0]:
            out.append(f"first-use request answered {mode}: warnings {row['warnings']}, expected one naming the "
                       f"request and {SWITCH}")
        if row["sent"] != 1:
            out.append(f"first-use request answered {mode}: {row['sent']} requests sent, expected it to stop at "
                       "the failed one")
    return out


def _server_problems(r: dict) -> list[str]:
    s = r["server"]
    out = []
    for name in ("400", "500", "hang", "short_context", "skip_server_warmup"):
        row = s[name]
        if row["raised"] or row["killed"] or not row["up"]:
            out.append(f"server warm-up, {name}: raised {row['raised']}, kill_process_tree called {row['killed']}x, "
                       f"server up: {row['up']}")
    for mode in ("400", "500", "hang"):
        warns = s[mode]["warnings"]
        if len(warns) != 1 or SWITCH not in warns[0]:
            out.append(f"server warm-up, first-use requests answered {mode}: warnings {warns}")
    short = s["short_context"]
    if short["rejected"]:
        out.append(f"server warm-up, --context-length {SHORT_CONTEXT}: the TokenizerManager refused "
                   f"{short['rejected']}")
    lengths = [n for rows in short["generate_lengths"] for n in rows]
    if max(lengths, default=0) != SHORT_CONTEXT - 1:
        out.append(f"server warm-up, --context-length {SHORT_CONTEXT}: prompts of {lengths} tokens, expected the "
                   f"long prefill at {SHORT_CONTEXT - 1}")
    if not any(f"{SHORT_CONTEXT - 1} tokens, not 1024" in m for m in short["infos"]):
        out.append(f"server warm-up, --context-length {SHORT_CONTEXT}: no line saying the long prefill is "
                   f"shortened (info lines: {short['infos']})")
    if s["skip_server_warmup"]["generate_lengths"]:
        out.append(f"--skip-server-warmup: the warm-up sent {s['skip_server_warmup']['generate_lengths']}")
    return out


def _problems(r: dict) -> list[str]:
    return (_size_problems(r) + _request_problems(r) + _wiring_problems(r) + _fit_problems(r)
            + _failure_problems(r) + _server_problems(r))


@pytest.fixture(scope="module", params=carrying("P9"))
def outcome(request, patch_trees):
    return patch_trees.assert_needs_patch(request.param, "P9", PROBE, _problems)


def test_warm_up_sizes_cover_every_bucket(outcome):
    assert _size_problems(outcome["with"]) == []


def test_warm_up_requests_long_prefill_cached_prefix_batches(outcome):
    assert _request_problems(outcome["with"]) == []


def test_server_warm_up_runs_it_before_ready(outcome):
    assert _wiring_problems(outcome["with"]) == []
    assert _wiring_problems(outcome["without"]), "upstream's warm-up runs one short request at batch size 1"


def test_long_prefill_fits_the_context(outcome):
    assert _fit_problems(outcome["with"]) == []


def test_failed_first_use_request_is_one_warning(outcome):
    assert _failure_problems(outcome["with"]) == []


def test_server_warm_up_never_ends_the_server(outcome):
    """400, 500, a hang (bounded by SGLANG_WARMUP_TIMEOUT), a 64-token context, --skip-server-warmup: the
    server's own warm-up returns, marks the server up and never calls kill_process_tree."""
    assert _server_problems(outcome["with"]) == []
