"""Configuration of the hostile-request GPU suite (from the environment), the flags of its two server launches, its
time budget, its facts file. Imports nothing heavy: CPU CI collects this directory too (and deselects it: marker
`gpu`).

    SGLB_LAB_TARGET   target model dir with its tokenizer (default /tmp/lab/target; gen_lab_pair.py writes it)
    SGLB_LAB_DRAFT    EAGLE-3 draft dir (default /tmp/lab/draft)
    SGLB_OUT          artifacts: facts.json, progress.log, server logs (default /tmp/sglb-hostile)
    SGLB_DEADLINE_S   seconds from collection for the whole suite (default 300): a case or a launch that does not
                      fit is skipped, with the reason in the facts (and so in the receipt)
    SGLB_PYTHON       interpreter for `sglang-blackwell serve` (default: this one)
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# the GPU suites' shared modules (../suite_env.py, ../lab_accept.py), importable wherever this one is imported from
_GPU_TESTS = str(Path(__file__).resolve().parents[1])
if _GPU_TESTS not in sys.path:
    sys.path.append(_GPU_TESTS)
import suite_env  # noqa: E402

FACTS_SCHEMA = "sglang-blackwell/hostile-facts/1"  # = qualify.hostile_receipt.FACTS_SCHEMA (a CPU test checks)

CONTEXT_LEN = 2048  # small, so "prompt == context" costs one short prefill
MAX_RUNNING = 128  # with MAX_QUEUED: 224 requests fit at once, so c=256 goes past the queue limit
MAX_QUEUED = 96
# A user's TP=1 launch (suite_env.USER_FLAGS) reachable beyond loopback with an API key and no admin key, the way
# `serve` lets a user expose it: the admin endpoints must then be closed (P12)
HOSTILE_FLAGS = ["--context-length", str(CONTEXT_LEN), "--max-running-requests", str(MAX_RUNNING),
                 "--max-queued-requests", str(MAX_QUEUED)]
ARM_SPECULATIVE = {"baseline": False, "eagle3": True}

STARTUP_TIMEOUT_S = 240  # ~55 s on the lab with the small pair (the first start of a machine compiles Triton)
WARM_STARTUP_S = 60  # what a (re)start is budgeted at
TEARDOWN_S = 25  # SIGTERM, the grace, the GPU released
ARM_MIN_S = 40  # the eagle3 arm is launched only if this much is left after its start: the baseline arm leaves it
REQUEST_TIMEOUT_S = 30.0  # one request of a case, unless the case says otherwise
KV_IDLE_WAIT_S = 10.0  # the KV pool's release after a case is asynchronous: poll this long

REFERENCE_PROMPT = "The capital of France is"  # the reference greedy request (temperature 0, REFERENCE_TOKENS)
REFERENCE_TOKENS = 32


@dataclass(frozen=True)
class Config(suite_env.ExposedServerConfig):
    DEFAULT_OUT = "/tmp/sglb-hostile"
    SERVER_FLAGS = HOSTILE_FLAGS

    @classmethod
    def from_env(cls) -> Config:
        return cls(**cls.common_from_env(suite_env.deadline_from_env("300")))


class Facts(suite_env.FactsFile):
    """The hostile suite's facts (suite_env.FactsFile): its config and one section per arm, {starts, restarts,
    reference, cases: {case: {verdict, status, message, why, ...}}}. The receipt
    (sglang_blackwell.qualify.hostile_receipt) is built from it and the JUnit XML."""

    def __init__(self, path: Path, config: Config):
        super().__init__(path, FACTS_SCHEMA, {"target": str(config.target), "draft": str(config.draft),
                                              "deadline_s": config.deadline_s, "context_length": CONTEXT_LEN,
                                              "max_running_requests": MAX_RUNNING,
                                              "max_queued_requests": MAX_QUEUED},
                         arms={})

    def arm(self, name: str) -> dict[str, Any]:
        return self.data["arms"].setdefault(name, {"starts": [], "restarts": [], "cases": {}})

    def case(self, arm: str, case: str, record: dict[str, Any]) -> None:
        self.arm(arm)["cases"][case] = record
        self.save()
