"""Arm C: no speculation, fusion on: the reference outputs for "speculation on vs off", and P5 without
speculation (workspace for the decode graphs: 16 tokens)."""

from __future__ import annotations

import pytest
from labline_checks import need, need_step

pytestmark = pytest.mark.gpu


def test_server_is_the_arm(arm_c):
    need_step(arm_c, "server_info")
    assert arm_c["identity"]["ok"], arm_c["identity"]["why"]


def test_workspace_sized_for_the_decode_graphs(arm_c):
    need(arm_c)
    w = arm_c["log_checks"]["workspace"]
    assert w["ok"], f"{w['why']}; lines {w['lines']}"


def test_outputs_follow_the_bigram_map(arm_c):
    need_step(arm_c, "greedy")
    assert arm_c["bigram"]["consistent"], arm_c["bigram"]["why"]


def test_teardown_complete(arm_c):
    t = arm_c["teardown_check"]
    assert t["clean"], t
