"""support/tp.py: CPU TP ranks retry a process group that fails to form (a load spike on a 2-core machine), never
a scenario that fails. The ranks are real (gloo on CPU, plain torch.distributed)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from support import tp  # noqa: E402


def test_a_plain_gloo_scenario_runs_on_two_ranks():
    assert tp.run_tp(2, "support.scenarios_tp_selftest:world", sglang_init=False) == [[0, 2], [1, 2]]


def test_a_failing_scenario_is_not_retried(monkeypatch):
    calls = []
    real = tp._run_tp_once
    monkeypatch.setattr(tp, "_run_tp_once", lambda *a: (calls.append(1), real(*a))[1])
    with pytest.raises(RuntimeError, match="(?s)rank . failed:.*scenario says no"):
        tp.run_tp(2, "support.scenarios_tp_selftest:refuse", sglang_init=False)
    assert len(calls) == 1


def test_process_groups_that_fail_to_form_are_retried(monkeypatch):
    outcomes = [tp.SetupError("rank 1 could not join: Broken pipe"), tp.SetupError("rank 0: timeout"), ["ok"]]

    def once(*a):
        o = outcomes.pop(0)
        if isinstance(o, Exception):
            raise o
        return o

    monkeypatch.setattr(tp, "_run_tp_once", once)
    assert tp.run_tp(2, "x:y") == ["ok"] and outcomes == []
    outcomes[:] = [tp.SetupError("a"), tp.SetupError("b"), tp.SetupError("c")]
    with pytest.raises(tp.SetupError, match="c"):
        tp.run_tp(2, "x:y")
