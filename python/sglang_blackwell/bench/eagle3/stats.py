"""The one percentile of `bench eagle3` (latency percentiles, medians across repeats, the step-time quantile).

Definition: linear interpolation between the closest ranks, numpy's default (`method="linear"`, type 7 of
Hyndman & Fan): sort the n values, take the position h = (n - 1) * q / 100, and return
v[floor(h)] + (h - floor(h)) * (v[floor(h) + 1] - v[floor(h)]). So p0 is the minimum, p100 the maximum, p50 the
median (the mean of the two middle values when n is even), and p99 of 10 values lies 9/10 of the way from the
9th to the 10th smallest.
"""

from __future__ import annotations

import math
from collections.abc import Iterable


def percentile(values: Iterable[float], q: float) -> float:
    """The q-th percentile (0 <= q <= 100) of a non-empty collection, by linear interpolation (see above)."""
    v = sorted(float(x) for x in values)
    if not v:
        raise ValueError("percentile of no values")
    if not 0.0 <= q <= 100.0 or math.isnan(q):
        raise ValueError(f"percentile q must be in [0, 100], got {q}")
    h = (len(v) - 1) * q / 100.0
    lo = math.floor(h)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (h - lo) * (v[hi] - v[lo])


def median(values: Iterable[float]) -> float:
    return percentile(values, 50.0)
