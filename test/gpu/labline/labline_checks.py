"""Small assertions shared by the arm tests: fail with the recorded reason when a step a test needs did not
run (the server did not start, the step errored); skip where the deadline cut it."""

from __future__ import annotations

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
