"""The one percentile of bench eagle3: linear interpolation between closest ranks (numpy's default), checked on
hand-computed cases and against numpy itself."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from sglang_blackwell.bench.eagle3.sglang_api import low_quantile
from sglang_blackwell.bench.eagle3.stats import median, percentile


@pytest.mark.parametrize("values, q, expect", [
    ([15, 20, 35, 40, 50], 40, 29.0),      # h = 4 * 0.40 = 1.6: 20 + 0.6 * (35 - 20)
    ([15, 20, 35, 40, 50], 50, 35.0),      # odd n: the middle value
    ([1, 2, 3, 4], 50, 2.5),               # even n: the mean of the two middle values
    ([4, 1, 3, 2], 0, 1.0),                # unsorted input; p0 = min
    ([4, 1, 3, 2], 100, 4.0),              # p100 = max
    ([7], 99, 7.0),                        # one value: every percentile is it
    (list(range(1, 11)), 99, 9.91),        # h = 9 * 0.99 = 8.91: 9 + 0.91 * (10 - 9)
    (list(range(1, 11)), 90, 9.1),         # h = 8.1
    ([10, 20], 25, 12.5),                  # h = 0.25
    ([3, 3, 3, 9], 75, 4.5),               # h = 2.25: 3 + 0.25 * 6
])
def test_hand_computed(values: list[float], q: float, expect: float) -> None:
    # the formula takes at most 4 rounded operations on values below 100: 1e-12 is far above their error
    assert percentile(values, q) == pytest.approx(expect, abs=1e-12)


def test_median_and_the_step_time_quantile_are_the_same_function() -> None:
    v = [5.0, 1.0, 4.0, 2.0, 3.0, 8.0]
    assert median(v) == percentile(v, 50) == 3.5
    assert low_quantile(v, 0.2) == percentile(v, 20) == pytest.approx(2.0, abs=1e-12)  # h = 1.0


def test_matches_numpy_linear() -> None:
    rng = random.Random(7)
    for _ in range(300):
        v = [rng.uniform(-1e3, 1e3) for _ in range(rng.randrange(1, 40))]
        q = rng.choice([0, 1, 20, 50, 90, 99, 99.9, 100, rng.uniform(0, 100)])
        # both interpolate a + t (b - a) (numpy switches to b - (1 - t)(b - a) for t >= 0.5): each is within a
        # few ulps of max |v|, so 8 eps x max |v| bounds their difference
        tol = 8 * np.finfo(float).eps * max(abs(x) for x in v)
        assert math.isclose(percentile(v, q), float(np.percentile(v, q)), rel_tol=0, abs_tol=tol)


def test_bad_input() -> None:
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)
    for q in (-1, 100.5, float("nan")):
        with pytest.raises(ValueError, match="q must be in"):
            percentile([1.0], q)
