"""Why an arm run failed, in the benchmark's terms (not the server's, not a request's)."""

from __future__ import annotations


class BenchRunError(RuntimeError):
    """The server is not the one the arm describes, or its profiler wrote no rank-0 trace: recorded in the run
    (its `error`, or the profile's), and the next arm run goes on."""
