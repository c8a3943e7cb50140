"""HTTP for `bench eagle3` (stdlib only): JSON calls, plain-text GETs, server-sent-event streams, on the one
bounded client of ours (httpclient.py: no proxy for loopback, no redirect followed, first-byte / idle / total
deadlines and size caps; its module docstring says how each is read).

What is bench eagle3's own here: the per-request bounds of the run (`LIMITS`, `set_limits` from
`--request-timeouts`) and the run's deadline (`set_run_deadline`, `--deadline-s`), which ends any request still
running at that moment (`RunDeadline`). A request past a bound raises `Timeout` (`RunDeadline` for the run's) or
`TooLarge`, both OSErrors naming the bound.
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

from ...httpclient import MAX_BODY, MAX_LINE, Limits, Redirected, Reply, RunDeadline, Timeout, TooLarge, is_loopback
from ...httpclient import request as _request

__all__ = ["MAX_BODY", "MAX_LINE", "Limits", "Redirected", "Reply", "RunDeadline", "StreamCut", "Timeout", "TooLarge",
           "get_text", "http_json", "is_loopback", "post_request", "request", "run_deadline_passed", "set_limits",
           "set_run_deadline", "sse_events", "status", "urlopen"]

LIMITS = Limits()
_RUN: dict[str, float | None] = {"at": None, "seconds": None}  # the run's deadline (time.monotonic()), --deadline-s


def set_limits(limits: Limits) -> None:
    global LIMITS
    LIMITS = limits


def set_run_deadline(seconds: float | None, start: float | None = None) -> None:
    """Every request ends by `start` (default now) + seconds; None: no run deadline."""
    _RUN["seconds"] = seconds
    _RUN["at"] = None if seconds is None else (time.monotonic() if start is None else start) + seconds


def run_deadline_passed() -> str | None:
    """Why no more requests may start (the run's --deadline-s has come), or None."""
    at, why = _run_at()
    return why if time.monotonic() >= at else None


def _run_at() -> tuple[float, str]:
    at = _RUN["at"]
    if at is None:
        return float("inf"), ""
    return at, f"--deadline-s {_RUN['seconds'] or 0:g} reached mid-request: the run's time is up"


def request(req: urllib.request.Request | str, *, first_byte_s: float, total_s: float | None = None,
            idle_s: float | None = None) -> Reply:
    """httpclient.request within the run's deadline (--deadline-s): no redirect followed, no proxy for loopback,
    the headers within first_byte_s, the Reply's reads within idle_s and total_s (default first_byte_s)."""
    return _request(req, first_byte_s=first_byte_s, total_s=total_s, idle_s=idle_s, deadline=_run_at)


def urlopen(req: urllib.request.Request | str, timeout: float) -> Reply:
    """A small call: the whole answer within `timeout`."""
    return request(req, first_byte_s=timeout)


def post_request(url: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> urllib.request.Request:
    return urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                  headers={"Content-Type": "application/json", **(headers or {})})


def http_json(url: str, body: dict[str, Any] | None = None, timeout: float = 30.0,
              method: str | None = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method or ("POST" if data is not None else "GET"),
                                 headers={"Content-Type": "application/json"})
    with urlopen(req, timeout=timeout) as r:
        raw = r.body()
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except ValueError:  # some endpoints (/start_profile, /flush_cache) answer plain text
        return raw.decode(errors="replace")


def get_text(url: str, timeout: float = 10.0) -> str:
    with urlopen(url, timeout=timeout) as r:
        return r.body().decode(errors="replace")


def status(url: str, timeout: float = 5.0) -> int | str:
    """The HTTP status of GET url, or why there was none (a short string; a redirect says where to)."""
    try:
        with urlopen(url, timeout=timeout) as r:
            return r.status
    except Redirected as e:
        return str(e)[:300]
    except urllib.error.HTTPError as e:
        return e.code
    except (OSError, ValueError, http.client.HTTPException) as e:
        return f"{type(e).__name__}: {getattr(e, 'reason', e)}"[:200]


class StreamCut(OSError):
    """The server closed a server-sent-events stream before `data: [DONE]`."""


def sse_events(r: Reply, first_byte_s: float | None = None) -> Iterator[tuple[float, bytes]]:
    """(time.perf_counter() when the line arrived, payload) for each `data:` line of a server-sent-events
    stream, until `data: [DONE]` (not yielded; SGLang and vLLM end every stream with it, so a stream that ends
    without it was cut off: StreamCut). Comment lines (`: ...`), `event:`/`id:` lines and the blank lines
    between events are skipped; servers send one `data:` line per event."""
    for t, raw in r.lines(LIMITS.first_byte_s if first_byte_s is None else first_byte_s):
        line = raw.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            return
        yield t, data
    raise StreamCut("the stream ended before data: [DONE]")
