"""Fixtures of the bench eagle3 tests."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

# the poll of profiling._wait_traces as these tests run it: sleep/20 between polls (1 s -> 50 ms)
POLL_SCALE = 20


@pytest.fixture
def fast_profile_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    """profiling's `time` with its sleeps cut by POLL_SCALE (monotonic stays the real clock, so every timeout is as
    the config says). The fake server (support/fake_sglang_server.py) writes each rank's whole trace before its
    /start_profile answers, so a trace's size is already final at the first poll: the two-poll stability rule
    passes at the second poll whatever its interval, and the interval (1 s each window) is not what these tests
    check. A test of the poll itself (test_verify_ranks.py) runs it on a virtual clock instead."""
    from sglang_blackwell.bench.eagle3 import profiling

    monkeypatch.setattr(profiling, "time", SimpleNamespace(monotonic=time.monotonic,
                                                           sleep=lambda s: time.sleep(s / POLL_SCALE)))
