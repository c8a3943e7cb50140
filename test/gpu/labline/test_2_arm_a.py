"""Arm A: EAGLE-3 + FlashInfer fusion on (trtllm), TP=2, CUDA graphs: the fused all-reduce kernel runs inside
every target-verify forward (profiler trace, no instrumentation), the workspace is sized by P5, EAGLE-3
accepts drafts, the target behaves as the bigram map, and the server is gone afterwards."""

from __future__ import annotations

import pytest
from labline_checks import accept_check, need, need_step

from sglang_blackwell.qualify import gpu_suite_checks as checks

pytestmark = pytest.mark.gpu


def test_server_is_the_arm(arm_a):
    need_step(arm_a, "server_info")
    assert arm_a["identity"]["ok"], arm_a["identity"]["why"]


def test_fused_allreduce_in_every_verify_step(arm_a):
    need_step(arm_a, "profile")
    prof = arm_a["profile"]
    v = prof["verdict"]
    layers = arm_a.get("expected_layers") or arm_a["num_layers"]  # SGLB_LAB_LAYERS, else the target's own
    assert v["expected_per_step"] == checks.fused_kernels_per_forward(layers)
    assert v["ok"], (f"{v['why']}; per-step counts {v['counts']}, attribution {prof['method']}, fused kernels "
                     f"in the trace {prof['kernels_matched']}, by mode {prof['by_mode']}"
                     + (f"; the target has {arm_a['num_layers']} layers, SGLB_LAB_LAYERS says {layers}"
                        if arm_a["num_layers"] != layers else ""))
    # every other rank launched them in every verify step too (its own trace)
    bad = {r: rv["why"] for r, rv in (prof.get("rank_verdicts") or {}).items() if not rv["ok"]}
    assert not bad, f"rank(s) {sorted(bad)}: {bad}"


def test_workspace_sized_for_the_verify_graphs(arm_a):
    need(arm_a)
    w = arm_a["log_checks"]["workspace"]
    assert w["ok"], (f"{w['why']} (expected {w['expected_max_token_num']} = decode bs 16 x 3 draft tokens); "
                     f"lines {w['lines']}")


def test_accept_length(lab, arm_a):
    r = accept_check(arm_a, lab)
    assert r["passed"], r


def test_outputs_follow_the_bigram_map(arm_a):
    need_step(arm_a, "greedy")
    assert arm_a["bigram"]["consistent"], arm_a["bigram"]["why"]


def test_teardown_complete(arm_a):
    t = arm_a["teardown_check"]
    assert t["clean"], t
