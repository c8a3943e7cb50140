"""Fixtures of the bench eagle3 tests: the harness's fixed polls, at a twentieth of their interval."""

from __future__ import annotations

import time
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

# what the harness's polls sleep in these tests: sleep/20 (wait_healthy's 0.5 s -> 25 ms, the traces' 1 s -> 50 ms)
POLL_SCALE = 20


@pytest.fixture(scope="module", autouse=True)
def fast_polls() -> Iterator[None]:
    """server.py's and profiling.py's `time` with their sleeps cut by POLL_SCALE; monotonic stays the real clock,
    so every timeout and deadline is what the config or the flag says, only looked at more often. What the polls
    wait for comes at once in these tests, and an interval is not what any of them checks:

    - wait_healthy polls /health every 0.5 s: a fake server (support/fake_*_server.py) listens ~0.1-0.3 s after
      its start, so each launch waited out a whole interval (the log's "healthy after 0.5 s");
    - profiling._wait_traces polls every 1 s for a trace's size to stay the same over two polls: the fake server
      writes each rank's whole trace before its /start_profile answers, so the second poll passes whatever the
      interval; a test of the poll itself (test_verify_ranks.py) runs it on a virtual clock.

    Only this process's polls: a harness run as a subprocess (the Ctrl-C tests) polls at the real intervals.
    Module-scoped (an autouse fixture comes first in its scope), so that a module's shared fake servers
    (test_bench_client.py's `servers`) start and stop under it too; undone at the module's end."""
    from sglang_blackwell.bench.eagle3 import profiling, server

    fast = SimpleNamespace(monotonic=time.monotonic, sleep=lambda s: time.sleep(s / POLL_SCALE))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(profiling, "time", fast)
        mp.setattr(server, "time", fast)
        yield
