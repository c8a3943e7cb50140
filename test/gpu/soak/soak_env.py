"""Configuration of the soak (from the environment), the flags of its two servers, its time budget, its facts file.
Imports nothing heavy: CPU CI collects this directory too (and deselects it: marker `gpu`).

    SGLB_LAB_TARGET      target model dir with its tokenizer (default /tmp/lab/target; gen_lab_pair.py writes it)
    SGLB_LAB_DRAFT       EAGLE-3 draft dir (default /tmp/lab/draft)
    SGLB_OUT             artifacts: facts.json, progress.log, server logs (default /tmp/sglb-soak)
    SGLB_SOAK_S          seconds of soak (default 600): both arms at once, after both servers are up
    SGLB_SOAK_BUCKET_S   seconds of one bucket, the schedule's cycle (default 60: a minute; the CPU tests use 1)
    SGLB_SOAK_MAX_C      the schedule's concurrency capped at this (default 32: no cap; the CPU tests use 4)
    SGLB_SOAK_SEED       the schedule's seed (default 31)
    SGLB_SOAK_SIDS       a file the servers' session ids are written to, one a line (the runner ends what a killed
                         run left behind); unset: none written
    SGLB_SOAK_ITL_TOL, SGLB_SOAK_MIN_GAPS   the verdict's ITL bounds, for the CPU tests only (the receipt records
                         the bounds used, and whether they are qualify/soak_verdict.py's defaults)
    SGLB_SOAK_KV_WAIT_S  how long the KV pool is polled for idle after the soak (default 20; the CPU tests use 2)
    SGLB_DEADLINE_S      not read: the runner bounds the call (SGLB_SOAK_S + STARTUP_TIMEOUT_S + the drain and the
                         checks)
    SGLB_PYTHON          interpreter for `sglang-blackwell serve` (default: this one)
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

# the GPU suites' shared modules (../suite_env.py, ../server_checks.py, ../server_http.py), importable wherever this
# one is imported from
_GPU_TESTS = str(Path(__file__).resolve().parents[1])
if _GPU_TESTS not in sys.path:
    sys.path.append(_GPU_TESTS)
import suite_env  # noqa: E402

from sglang_blackwell.qualify import soak_verdict  # noqa: E402

FACTS_SCHEMA = "sglang-blackwell/soak-facts/1"  # = qualify.soak_receipt.FACTS_SCHEMA (a CPU test checks)
ARMS = ("baseline", "eagle3")
ARM_SPECULATIVE = {"baseline": False, "eagle3": True}

PROMPT_MAX = 32768  # the schedule's longest prompt; the lab target's max_position_embeddings is 163840
OUTPUT_MAX = 512
CONTEXT_LEN = 34816  # PROMPT_MAX + OUTPUT_MAX within it, rounded up to 1k
# Both servers share one GPU and start at the same time. sglang 0.5.14 sizes the KV pool as (free memory after the
# weights) - (free memory before them) x (1 - mem_fraction_static), each server measuring while the other loads: at
# 0.5 of an 80 GB H100 a server that saw 80 GB free at its start and the other server fully resident (~20 GB)
# after its own weights (12.6 GB, the 10-layer pair) still has 80 - 20 - 12.6 - 40 = 7.4 GB for a pool capped at
# MAX_TOTAL_TOKENS, 3 GB for the target (576 x 2 B x 10 layers a token) and 1 GB for the draft's (EAGLE-3). The cap
# keeps both pools the same size whichever server measured first. 256k tokens hold the cycle's peak (c=32 at the
# mean prompt of 6.7k tokens, 214k) with a few 32k prompts queued past it at times.
MAX_TOTAL_TOKENS = 262144
SOAK_FLAGS = ["--context-length", str(CONTEXT_LEN), "--mem-fraction-static", "0.5", "--max-total-tokens",
              str(MAX_TOTAL_TOKENS)]
# decode CUDA graphs up to the schedule's peak concurrency (the user flags stop at 16)
USER = suite_env.with_value(suite_env.USER_FLAGS, "--cuda-graph-max-bs-decode", "32")

STARTUP_TIMEOUT_S = 240  # both servers at once; ~55 s each alone on the lab (the first start compiles Triton)
REQUEST_TIMEOUT_S = 120.0  # one read of a streamed request (a 32k prefill queued behind 31 others)
DRAIN_S = 90.0  # after the soak stops sending: the requests in flight end (each <= 512 tokens)
KV_IDLE_WAIT_S = 20.0  # the KV pool's release after the soak is asynchronous: poll this long (SGLB_SOAK_KV_WAIT_S)
SAMPLE_PER_BUCKET = 12  # memory and KV samples per bucket (every 5 s at 60 s buckets)

# the reference greedy requests (temperature 0), taken before the soak and again after it: a text prompt and two
# prompts of token ids (a short one and a long one)
REFERENCE_PROMPT = "The capital of France is"
REFERENCE_TOKENS = 32
REFERENCE_ID_LENGTHS = (512, 16384)


def _float(name: str, default: str) -> float:
    raw = os.environ.get(name, default)
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r}: expected a number") from None


@dataclass(frozen=True)
class Config(suite_env.ExposedServerConfig):
    DEFAULT_OUT = "/tmp/sglb-soak"
    SERVER_FLAGS = SOAK_FLAGS
    USER = USER
    # the speculative arm's flags without the user-path's --mem-fraction-static (SOAK_FLAGS has the soak's)
    SPECULATIVE = suite_env.SPECULATIVE_FLAGS
    soak_s: float = 600.0
    bucket_s: float = 60.0
    max_c: int = 32
    seed: int = 31
    sids: Path | None = None
    kv_wait_s: float = KV_IDLE_WAIT_S
    bounds: soak_verdict.Bounds = soak_verdict.DEFAULT

    @classmethod
    def from_env(cls) -> Config:
        bounds = soak_verdict.DEFAULT
        if "SGLB_SOAK_ITL_TOL" in os.environ:
            bounds = replace(bounds, itl_tol=_float("SGLB_SOAK_ITL_TOL", "0"))
        if "SGLB_SOAK_MIN_GAPS" in os.environ:
            bounds = replace(bounds, min_gaps=int(_float("SGLB_SOAK_MIN_GAPS", "0")))
        soak_s = _float("SGLB_SOAK_S", "600")
        sids = os.environ.get("SGLB_SOAK_SIDS")
        return cls(**cls.common_from_env(soak_s + STARTUP_TIMEOUT_S + DRAIN_S + 60), soak_s=soak_s,
                   bucket_s=_float("SGLB_SOAK_BUCKET_S", "60"), max_c=int(_float("SGLB_SOAK_MAX_C", "32")),
                   seed=int(_float("SGLB_SOAK_SEED", "31")), sids=Path(sids) if sids else None,
                   kv_wait_s=_float("SGLB_SOAK_KV_WAIT_S", str(KV_IDLE_WAIT_S)), bounds=bounds)


class Facts(suite_env.FactsFile):
    """The soak's facts (suite_env.FactsFile): its config, the verdict's bounds, the schedule, one section per arm
    ({start, references, kv_used_idle, buckets, after}) and the verdict's rows. The receipt
    (sglang_blackwell.qualify.soak_receipt) judges again from it."""

    def __init__(self, path: Path, config: Config, schedule: dict[str, Any]):
        super().__init__(path, FACTS_SCHEMA, {"target": str(config.target), "draft": str(config.draft),
                                              "soak_s": config.soak_s, "bucket_s": config.bucket_s,
                                              "max_c": config.max_c, "seed": config.seed,
                                              "context_length": CONTEXT_LEN, "max_total_tokens": MAX_TOTAL_TOKENS},
                         bounds=config.bounds.as_facts(), schedule=schedule, arms={}, verdict=[])

    def arm(self, name: str) -> dict[str, Any]:
        return self.data["arms"].setdefault(name, {})
