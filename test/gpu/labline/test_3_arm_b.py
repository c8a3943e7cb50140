"""Arm B: EAGLE-3 with fusion off (--enforce-disable-flashinfer-allreduce-fusion): the negative control of the
kernel count (no fused kernel in any verify step, no workspace), and the accept length the fused arm is
compared with."""

from __future__ import annotations

import pytest
from labline_checks import accept_check, need, need_step

pytestmark = pytest.mark.gpu


def test_server_is_the_arm(arm_b):
    need_step(arm_b, "server_info")
    assert arm_b["identity"]["ok"], arm_b["identity"]["why"]


def test_no_fused_kernel_without_fusion(arm_b):
    need_step(arm_b, "profile")
    v = arm_b["profile"]["verdict"]
    assert v["ok"], f"{v['why']}; per-step counts {v['counts']}"
    bad = {r: rv["why"] for r, rv in (arm_b["profile"].get("rank_verdicts") or {}).items() if not rv["ok"]}
    assert not bad, f"rank(s) {sorted(bad)}: {bad}"


def test_no_workspace_without_fusion(arm_b):
    need(arm_b)
    w = arm_b["log_checks"]["workspace"]
    assert w["ok"], w["why"]


def test_accept_length(lab, arm_b):
    r = accept_check(arm_b, lab)
    assert r["passed"], r


def test_teardown_complete(arm_b):
    t = arm_b["teardown_check"]
    assert t["clean"], t
