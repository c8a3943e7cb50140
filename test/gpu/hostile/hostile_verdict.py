"""How the hostile suite judges: each answer of a case (judge_reply: a Finding), then the case as a whole with the
server's state after it (case_verdict): clean (every answer a 4xx with a clear message, or a correct answer, and
the server as before), wrong (a 5xx, a 2xx where a 4xx was due, an incorrect answer, no answer while the server
lives on, a 4xx that says nothing, or the reference text changed), leak (the KV pool not back to idle) or
server-died (the server process, its scheduler or its /health gone). Pure functions; standard library only."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from server_checks import After
    from server_http import Reply

# why a 2xx answer is not correct (None: it is)
Accept = Callable[[Any], "str | None"]
BUSY = (429, 503)  # "too many requests" / sglang's "The request queue is full." (--max-queued-requests)


@dataclass
class Finding:
    ok: bool
    what: str  # one line: "400: Token id 40000 at position 2 ...", "500: Internal Server Error", ...
    status: int | None
    message: str


def judge_reply(reply: Reply, *, accept: Accept | None = None, busy_ok: bool = False) -> Finding:
    """One answer. accept: how a 2xx is checked (None: a 2xx is wrong, the request had to be refused).
    busy_ok: a 429/503 with a message is a correct answer too (a case that goes past the server's limits)."""
    msg = reply.message()
    st = reply.status
    if st is None:
        return Finding(False, f"no answer: {reply.error}", None, msg)
    if 200 <= st < 300:
        if accept is None:
            return Finding(False, f"{st}: accepted, where a 4xx was due", st, msg)
        why = accept(reply.json())
        return Finding(why is None, f"{st}: " + (why or "correct answer"), st, msg)
    if st in BUSY and busy_ok:
        return Finding(bool(msg), f"{st}: " + (msg or "busy, without a message"), st, msg)
    if 400 <= st < 500:
        return Finding(bool(msg.strip()), f"{st}: " + (msg or "a 4xx without a message"), st, msg)
    return Finding(False, f"{st}: {msg or 'no message'}", st, msg)


def admin_finding(reply: Reply) -> Finding:
    """An admin endpoint called without its key: 401/403 is closed; 404 the route is not served here; anything
    else (a 2xx above all: it was accepted) is wrong."""
    st = reply.status
    msg = reply.message()
    if st in (401, 403, 404):
        return Finding(True, f"{st}: {msg or 'refused'}", st, msg)
    return Finding(False, f"{st}: " + ("ACCEPTED without the admin key" if st is not None and 200 <= st < 300
                                      else msg or "no answer"), st, msg)


def case_verdict(findings: list[Finding], after: After) -> tuple[str, str]:
    """(verdict, why) of a case from its findings and the server's state after it."""
    if after.died():
        return "server-died", after.why_dead()
    if not after.kv_idle:
        return "leak", f"KV pool not back to idle: {after.kv_used} tokens used (idle {after.kv_idle_used}), " \
                       f"{after.kv_requests} requests still running or waiting"
    bad = [f.what for f in findings if not f.ok]
    if not after.reference_same:
        bad.append(f"the reference request's text changed: {after.reference_text!r}")
    if bad:
        return "wrong", "; ".join(bad)[:600]
    return "clean", f"{len(findings)} answers as due"


def first_status_and_message(findings: list[Finding]) -> tuple[int | None, str]:
    """The case's status and message for the receipt: those of its first wrong answer, else of its first."""
    if not findings:
        return None, ""
    f = next((f for f in findings if not f.ok), findings[0])
    return f.status, f.message
