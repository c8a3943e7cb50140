"""Small assertions shared by the arm tests: fail with the recorded reason when a step a test needs did not
run (the server did not start, the step errored); skip where the deadline cut it; the accept length against the
lab pair's construction."""

from __future__ import annotations

from typing import Any

import pytest


def need(arm: dict) -> None:
    if arm.get("launch_error"):
        pytest.fail(f"arm {arm['name']}: server did not start: {arm['launch_error']}")


def need_step(arm: dict, step: str) -> None:
    need(arm)
    status = arm.get("steps", {}).get(step)
    if status and status.startswith("skipped: deadline"):
        pytest.skip(f"arm {arm['name']}: step {step!r}: {status}")
    if status != "ok":
        pytest.fail(f"arm {arm['name']}: step {step!r}: {status or 'not run'}")


def accept_check(arm: dict, lab: Any) -> dict[str, Any]:
    """The arm's accept length (meta_info: its greedy requests' completion tokens / verify rounds) against what the
    lab pair's construction gives for exactly those requests (lab_accept), kept with the arm's facts."""
    import lab_accept
    from labline_arms import NUM_STEPS

    need_step(arm, "greedy")
    expected = lab_accept.expectation(lab.cfg.target, lab.cfg.draft_kind,
                                      [(p[-1], arm["greedy"]["new_tokens"]) for p in arm["prompts"]], NUM_STEPS)
    arm["accept_check"] = lab_accept.check(expected, "meta", (arm.get("accept") or {}).get("accept_len"))
    lab.facts.save()
    return arm["accept_check"]
