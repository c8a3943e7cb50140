"""Fixtures of the soak (marker `gpu`; run it with benchmark/lab/soak.sh on the GPU lab; issue 31 item 4).

Two user servers on the one GPU at the same time, started as users start them (`sglang-blackwell serve -- <sglang
args>`, with the tokenizer, --host 0.0.0.0, --api-key): the baseline arm and the EAGLE-3 arm (soak_env.py: the
flags, and why both fit). One client drives both with the same seeded schedule (soak_schedule.py) for SGLB_SOAK_S
seconds; the result goes to $SGLB_OUT/facts.json, judged by qualify/soak_verdict.py. SIGTERM/SIGHUP unwind like
Ctrl-C, so the servers are always taken down.
"""

from __future__ import annotations

import pytest
from soak_env import Config, suite_env


@pytest.fixture(scope="session")
def cfg() -> Config:
    c = Config.from_env()
    suite_env.require_lab(c, ("sglang",))
    c.out.mkdir(parents=True, exist_ok=True)
    return c


@pytest.fixture(scope="session", autouse=True)
def _signals_unwind():
    from sglang_blackwell.procs import signals_as_interrupt

    with signals_as_interrupt():
        yield
