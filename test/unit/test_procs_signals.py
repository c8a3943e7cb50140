"""procs.signals_as_interrupt with real signals to this process: a Ctrl-C whose KeyboardInterrupt Python drops is
still on record (raise_if_interrupted), the record ends with the scope, and a SIGINT we inherited as ignored stays
ignored. The harness-level consequences: test/unit/bench/eagle3/test_bench_server.py."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator

import pytest

from sglang_blackwell import procs


class SigintInFinalizer:
    def __del__(self) -> None:
        os.kill(os.getpid(), signal.SIGINT)  # handled right here: the KeyboardInterrupt leaves __del__


@pytest.fixture(autouse=True)
def default_sigint() -> Iterator[None]:
    """Python's own Ctrl-C handler, whatever the test runner set."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


@pytest.fixture
def unraisable() -> Iterator[list[BaseException | None]]:
    """What Python reported and dropped ("Exception ignored in ..."), instead of pytest's warning."""
    seen: list[BaseException | None] = []
    old = sys.unraisablehook
    sys.unraisablehook = lambda u: seen.append(u.exc_value)
    try:
        yield seen
    finally:
        sys.unraisablehook = old


def test_a_ctrl_c_dropped_in_a_finalizer_is_raised_again(unraisable: list[BaseException | None]) -> None:
    with procs.signals_as_interrupt():
        SigintInFinalizer()  # dropped at once: its __del__ gets the SIGINT
        assert len(unraisable) == 1 and type(unraisable[0]) is KeyboardInterrupt  # Python lost it...
        assert procs.interrupted() == signal.SIGINT
        for _ in range(2):  # ...the record did not, and it stays interrupted
            with pytest.raises(KeyboardInterrupt) as e:
                procs.raise_if_interrupted()
            assert type(e.value) is KeyboardInterrupt  # Ctrl-C stays Ctrl-C (procs.run sends it on as SIGINT)
    assert procs.interrupted() is None
    procs.raise_if_interrupted()  # the scope is over: nothing to raise


def test_sigterm_is_recorded_as_interrupted(unraisable: list[BaseException | None]) -> None:
    with procs.signals_as_interrupt(), pytest.raises(procs.Interrupted, match="signal SIGTERM"):
        os.kill(os.getpid(), signal.SIGTERM)
    with procs.signals_as_interrupt():
        with pytest.raises(procs.Interrupted):
            os.kill(os.getpid(), signal.SIGTERM)
        with pytest.raises(procs.Interrupted, match="signal SIGTERM"):
            procs.raise_if_interrupted()
    assert not unraisable


def test_a_signal_held_by_signals_deferred_is_on_record() -> None:
    with procs.signals_as_interrupt():
        with pytest.raises(procs.Interrupted, match="held until"), procs.signals_deferred():
            os.kill(os.getpid(), signal.SIGINT)
        assert procs.interrupted() == signal.SIGINT
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_an_inherited_ignored_sigint_stays_ignored() -> None:
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a background job or nohup starts us
    try:
        with procs.signals_as_interrupt():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            with procs.signals_deferred():
                assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
                os.kill(os.getpid(), signal.SIGINT)
            procs.raise_if_interrupted()
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, old)
