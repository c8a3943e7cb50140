"""The soak's workload, seeded, and the same every bucket (a minute on the lab): the phases of concurrency within
a bucket, and the k-th request of every bucket drawn alike (prompt length, output length, whether and where the
client cuts it), so that any two full minutes carry the same load (soak_verdict compares minute 1 with the last).
The prompt's token ids differ per bucket and request (no prompt is served twice: the radix cache gives a later
minute no head start). Pure: no clock, no I/O.

    concurrency  PHASES: c = 1, 8, 32, 16, 4 for a fifth of the bucket each (capped at max_c)
    prompt       log-uniform 256 .. 32768 tokens (mean 6.7k; one in seven above 16k)
    output       16, 64, 256 or 512 tokens, alike; ignore_eos, so that many are generated
    aborts       one request in ABORT_EVERY (k = 5, 15, 25, ...: every bucket has its first early on), cut by the
                 client: in turn after a random number of output events (mid-decode) and at a random moment in
                 the first 300 ms (queued or in prefill)
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

PHASES = ((0.2, 1), (0.2, 8), (0.2, 32), (0.2, 16), (0.2, 4))  # (fraction of the bucket, concurrency)
PROMPT_MIN = 256
OUTPUTS = (16, 64, 256, 512)
ABORT_EVERY = 10
EARLY_CUT_S = (0.02, 0.3)
FIRST_ID = 100  # prompt ids from here to the vocabulary's end (below: the lab tokenizer's special tokens)


@dataclass(frozen=True)
class Draw:
    prompt_len: int
    output_len: int
    cut_after_chunks: int | None = None  # the client hangs up after this many output events
    cut_after_s: float | None = None  # ... or this many seconds after sending

    @property
    def intended_abort(self) -> bool:
        return self.cut_after_chunks is not None or self.cut_after_s is not None


@dataclass(frozen=True)
class Schedule:
    seed: int
    prompt_max: int
    max_c: int = 32

    def concurrency(self, frac: float) -> int:
        """How many requests run at this point of the bucket (0 <= frac < 1)."""
        edge = 0.0
        for share, c in PHASES:
            edge += share
            if frac < edge:
                return min(c, self.max_c)
        return min(PHASES[-1][1], self.max_c)

    def peak(self) -> int:
        return min(max(c for _, c in PHASES), self.max_c)

    def draw(self, k: int) -> Draw:
        """The k-th request of every bucket."""
        rng = random.Random(f"{self.seed}:draw:{k}")
        span = math.log(self.prompt_max / PROMPT_MIN)
        prompt = min(self.prompt_max, int(PROMPT_MIN * math.exp(rng.random() * span)))
        out = rng.choice(OUTPUTS)
        if k % ABORT_EVERY != ABORT_EVERY // 2:
            return Draw(prompt, out)
        if (k // ABORT_EVERY) % 2 == 0:
            return Draw(prompt, out, cut_after_chunks=rng.randint(1, max(1, out // 2)))
        return Draw(prompt, out, cut_after_s=round(rng.uniform(*EARLY_CUT_S), 3))

    def prompt_ids(self, bucket: int, k: int, n: int, vocab: int) -> list[int]:
        rng = random.Random(f"{self.seed}:ids:{bucket}:{k}")
        return rng.choices(range(FIRST_ID, vocab), k=n)

    def as_facts(self) -> dict[str, Any]:
        return {"seed": self.seed, "phases": [list(p) for p in PHASES], "max_c": self.max_c,
                "prompt": [PROMPT_MIN, self.prompt_max], "outputs": list(OUTPUTS),
                "abort_every": ABORT_EVERY}
