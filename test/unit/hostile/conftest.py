"""The hostile-input suite prints its counts at the end of the run (support/hostile.py says what they mean)."""

from __future__ import annotations

from support import hostile


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if hostile.TALLY:
        terminalreporter.write_line(hostile.summary(hostile.TALLY))
