"""The hostile suite's time budget (test/gpu/hostile/hostile_arm.py run_case) in-process, with its real Arm, Facts
and Deadline: a case or a (re)start that does not fit in SGLB_DEADLINE_S is recorded as not-run with the reason
and skipped, never silently absent; the baseline arm leaves the EAGLE-3 arm its minimum when the deadline holds
both, and takes the time itself when it does not; an arm whose server did not start records every later case."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "gpu" / "hostile"))
import hostile_arm  # noqa: E402
import hostile_env  # noqa: E402
import suite_env  # noqa: E402

ARM_MIN = hostile_env.WARM_STARTUP_S + hostile_env.ARM_MIN_S + hostile_env.TEARDOWN_S


def arm(tmp_path: Path, name: str, deadline_s: float, left_s: float) -> hostile_arm.Arm:
    cfg = hostile_env.Config(target=tmp_path / "t", draft=tmp_path / "d", out=tmp_path, deadline_s=deadline_s,
                             python=sys.executable)
    deadline = suite_env.Deadline(deadline_s, t0=time.monotonic() - (deadline_s - left_s))
    env = hostile_arm.Env(cfg, deadline, hostile_env.Facts(tmp_path / "facts.json", cfg), lambda msg: None, None)
    return hostile_arm.Arm(env, name)


def recorded(tmp_path: Path, arm_name: str, case: str) -> dict:
    return json.loads((tmp_path / "facts.json").read_text())["arms"][arm_name]["cases"][case]


def test_a_start_that_does_not_fit_is_recorded_not_run(tmp_path):
    a = arm(tmp_path, "eagle3", 300, left_s=70)
    with pytest.raises(pytest.skip.Exception, match="deadline: 70 s left of SGLB_DEADLINE_S=300"):
        hostile_arm.run_case(a, "oov_ids_generate")
    rec = recorded(tmp_path, "eagle3", "oov_ids_generate")
    assert rec["verdict"] == "not-run" and "a start of the eagle3 server and this case need about 88 s" in rec["why"]


def test_the_baseline_arm_leaves_the_eagle3_arm_its_minimum_when_both_fit(tmp_path):
    a = arm(tmp_path, "baseline", 300, left_s=200)  # 200 s: enough for a baseline start, not with eagle3's share
    assert a.reserve_s() == hostile_env.TEARDOWN_S + ARM_MIN
    with pytest.raises(pytest.skip.Exception):
        hostile_arm.run_case(a, "n_64")
    assert recorded(tmp_path, "baseline", "n_64")["why"].startswith("deadline: 200 s left")
    assert arm(tmp_path, "eagle3", 300, left_s=200).reserve_s() == hostile_env.TEARDOWN_S


def test_below_both_arms_minimum_the_baseline_arm_takes_the_time(tmp_path):
    assert arm(tmp_path, "baseline", 2 * ARM_MIN - 1, left_s=100).reserve_s() == hostile_env.TEARDOWN_S


def test_an_arm_whose_server_did_not_start_records_every_later_case(tmp_path):
    a = arm(tmp_path, "baseline", 300, left_s=290)
    a.launch_error = "the baseline server did not start: server exited with code 1 after 12 s"
    for case in ("empty_prompt", "overload_c256"):
        with pytest.raises(pytest.skip.Exception):
            hostile_arm.run_case(a, case)
        assert recorded(tmp_path, "baseline", case) == {"verdict": "not-run", "why": a.launch_error}
