"""Reading SGLang's cumulative server-side statistics around a measured window."""

from __future__ import annotations

import pytest

from sglang_blackwell.bench.eagle3.sglang_api import avg_accept_length, low_quantile, new_step_times, step_times


def test_step_times_are_differenced_around_the_window() -> None:
    # /server_info as sglang returns it: JSON keys are strings, one list per batch size, lists only grow
    before = step_times({"internal_states": [{"step_time_dict": {"1": [0.010, 0.011], "4": [0.02]}}]})
    grown = {"1": [0.010, 0.011, 0.002, 0.0021, 0.009], "4": [0.02]}
    after = step_times({"internal_states": [{"step_time_dict": grown}]})
    assert before == {1: [0.010, 0.011], 4: [0.02]}
    assert new_step_times(before, after, 1) == [0.002, 0.0021, 0.009]
    assert new_step_times(before, after, 4) == []
    assert new_step_times(None, after, 4) == [0.02]
    assert step_times({"internal_states": [{}]}) is None  # SGLANG_RECORD_STEP_TIME not set
    assert new_step_times(before, None, 1) == []


def test_low_quantile_resists_intervals_that_span_request_gaps() -> None:
    steady, spanning = [2.0, 2.02, 1.98, 2.01, 1.99, 2.0], [2.6, 2.7, 2.5, 2.8, 2.65]  # 5 of 11 read high
    vals = steady + spanning
    assert low_quantile(vals) == pytest.approx(2.0, abs=0.02)
    assert sorted(vals)[len(vals) // 2] > 2.0  # the median is pulled up by the gap intervals
    assert low_quantile([3.0]) == 3.0
    assert low_quantile([1.0, 2.0], q=0.5) == 1.5


def test_avg_accept_length() -> None:
    assert avg_accept_length({"internal_states": [{"avg_spec_accept_length": 2.75}]}) == 2.75
    assert avg_accept_length({"internal_states": [{}]}) is None
    assert avg_accept_length({}) is None
