"""Fixtures of the hostile-request GPU suite (marker `gpu`; run it with benchmark/lab/hostile.sh on the GPU lab;
issue 31 item 3).

A user's TP=1 server on the lab pair, started as users start it (`sglang-blackwell serve -- <sglang args>`, with
the tokenizer), reachable beyond loopback (--host 0.0.0.0) with --api-key and no --admin-api-key, a small context
and small request limits (hostile_env.py): the baseline arm (test_1_hostile_baseline.py), then the EAGLE-3 arm
(test_2_hostile_eagle3.py), one after the other (module scope: each server is taken down, and the GPU checked
free, before the next starts). Every case of hostile_receipt.CASES runs against each (hostile_cases.py), is judged
with the server's state after it (hostile_verdict.py, ../server_checks.py) and goes to $SGLB_OUT/facts.json as soon
as it is known. A server that died is started again for the cases after it while SGLB_DEADLINE_S allows; what does
not fit is recorded as not-run with the reason. SIGTERM/SIGHUP unwind like Ctrl-C, so a running server is always
taken down.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hostile_arm import Arm, Env
from hostile_env import Config, Facts, suite_env


@pytest.fixture(scope="session")
def env() -> Env:
    cfg = Config.from_env()
    suite_env.require_lab(cfg, ("sglang", "transformers"))
    cfg.out.mkdir(parents=True, exist_ok=True)
    progress = cfg.progress()
    progress(f"hostile-request GPU suite: target {cfg.target}, draft {cfg.draft}, out {cfg.out}, deadline "
             f"{cfg.deadline_s:.0f} s")
    from lab_truth import GroundTruth

    truth = GroundTruth(cfg.target)
    facts = Facts(cfg.out / "facts.json", cfg)
    facts.data["ground_truth"] = {"preset": truth.preset, "seed": truth.seed}
    return Env(cfg, cfg.deadline(), facts, progress, truth)


@pytest.fixture(scope="session", autouse=True)
def _signals_unwind():
    from sglang_blackwell.procs import signals_as_interrupt

    with signals_as_interrupt():
        yield


def arm_fixture(env: Env, name: str) -> Iterator[Arm]:
    """An arm whose server starts at its first case (run_case) and is taken down after its last."""
    arm = Arm(env, name)
    env.facts.arm(name)
    try:
        yield arm
    finally:
        arm.stop("the arm's cases are done")
        env.progress(f"{name}: done")


@pytest.fixture(scope="module")
def baseline_arm(env: Env) -> Iterator[Arm]:
    yield from arm_fixture(env, "baseline")


@pytest.fixture(scope="module")
def eagle3_arm(env: Env) -> Iterator[Arm]:
    yield from arm_fixture(env, "eagle3")
