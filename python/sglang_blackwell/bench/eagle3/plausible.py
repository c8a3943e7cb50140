"""What a measured value of `bench eagle3` can be, before any verdict, table or plot uses it: a finite number in
the range a real measurement of its kind falls in (RANGES). A value outside (NaN, Infinity, a zero or negative
rate, a 310-digit number) is a corrupt or hand-edited record, never evidence: `problem` says which and why.

The ranges are wide on purpose (a plausibility bound, not an expectation): rates are > 0 (a rate is a divisor of
every ratio) and below 10^7 tok/s; times are >= 0 and below one day; an accept length is > 0 and at most 1024
tokens per verify; a ratio of two rates is > 0 and below 10^6. Pure data and arithmetic, imports nothing of ours.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

DAY_S = 86_400.0


@dataclass(frozen=True)
class Range:
    lo: float
    hi: float
    lo_open: bool  # True: lo itself is out (a rate of 0); False: lo is allowed (a latency of 0.0 ms)
    unit: str

    def text(self) -> str:
        return f"{'>' if self.lo_open else '>='} {self.lo:g} and <= {self.hi:g}{' ' + self.unit if self.unit else ''}"


RATE = Range(0.0, 1e7, True, "tok/s")
MS = Range(0.0, DAY_S * 1e3, False, "ms")
STEP_MS = Range(0.0, DAY_S * 1e3, True, "ms")  # a step time divides the break-even accept length
SECONDS = Range(0.0, DAY_S, True, "s")
ACCEPT = Range(0.0, 1024.0, True, "tokens per verify")
PER_CHUNK = Range(0.0, 1e6, True, "tokens per chunk")
RATIO = Range(0.0, 1e6, True, "")
SIGNED_RATIO = Range(-1e6, 1e6, False, "")  # a gain or a difference: may be negative
COUNT = Range(0.0, 1e12, False, "")
TP = Range(1.0, 1e6, False, "GPUs")

# every measured metric of a level, a grid cell or a first burst (verdict.LEVEL_METRICS, grid_verdict.FIRST_METRICS)
RANGES: dict[str, Range] = {
    "tok_s": RATE, "accept_len": ACCEPT, "accept_len_server": ACCEPT, "step_ms": STEP_MS, "step_ms_median": STEP_MS,
    "ttft_ms": MS, "ttft_ms_p99": MS, "tpot_ms": MS, "tpot_ms_p99": MS, "itl_ms": MS, "itl_ms_p99": MS,
    "e2e_ms": MS, "e2e_ms_p99": MS, "tokens_per_chunk": PER_CHUNK, "wall_s": SECONDS,
}


def as_float(v: Any) -> float | None:
    """A JSON number as a finite float; None for anything else (NaN, Infinity, an int too large for a float, a bool,
    a string)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        f = float(v)
    except OverflowError:
        return None
    return f if math.isfinite(f) else None


def shown(v: Any) -> str:
    """A value as an error message shows it: at most 40 characters (a 310-digit number is not repeated whole)."""
    text = repr(v)
    return text if len(text) <= 40 else f"{text[:20]}...({len(text)} characters)"


def problem(v: Any, r: Range) -> str | None:
    """Why `v` is not a measurement in `r`; None: it is one."""
    f = v if isinstance(v, int) and not isinstance(v, bool) else as_float(v)  # an int compares exactly, any size
    if f is None:
        return f"{shown(v)} is not a finite number"
    if f < r.lo or (r.lo_open and f == r.lo) or f > r.hi:
        return f"{shown(v)} is not {r.text()}"
    return None


def metric_problem(metric: str, v: Any) -> str | None:
    """Why a recorded metric's value is not plausible (RANGES; another metric: only finite); None: it is."""
    return problem(v, RANGES.get(metric, Range(-math.inf, math.inf, False, "")))
