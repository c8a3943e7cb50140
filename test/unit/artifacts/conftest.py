"""Fixtures shared with the other tooling tests (test/support/wheel_world.py)."""

from support.wheel_world import server, tiny_base  # noqa: F401 - pytest fixtures
