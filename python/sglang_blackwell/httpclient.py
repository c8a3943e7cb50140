"""The one bounded HTTP client of ours (standard library only): every network read we make ourselves goes through
`request` (bench eagle3's transport, the package index's JSON API for `base bump` / `check --upstream`).

Bounds, on every request (defaults in `Limits`; `--request-timeouts FIRST,IDLE,TOTAL` sets them, `parse_limits`):
- first byte: the answer's headers within `first_byte_s` (a streamed request: its first `data:` event, see
  `Reply.lines`);
- idle: no byte for `idle_s` once the answer has started (a stream: no `data:` event);
- total: the whole request within `total_s`;
- size: a response of at most `max_body` bytes (MAX_BODY), a line of at most MAX_LINE;
- the caller's overall deadline (`deadline`: bench eagle3's --deadline-s) ends any request still running then.
A request past a bound raises `Timeout` (`RunDeadline` for the caller's deadline) or `TooLarge`, both OSErrors
naming the request and the bound. A server that sends its headers a byte at a time meets the first-byte deadline
too: a timer shuts the socket down.

Proxies: a request to a loopback address never goes through a proxy, whatever http_proxy / HTTPS_PROXY /
ALL_PROXY / no_proxy say: on lab networks http_proxy is often set, and urllib would otherwise send 127.0.0.1
requests to it. Loopback is decided from the parsed address, the way the resolver reads it: 127.0.0.0/8 in any
spelling inet_aton takes (`127.1`, `2130706433`, `0x7f.0.0.1`), ::1 and IPv4-mapped ::ffff:127.x, the unspecified
address (0.0.0.0, ::: a connection to it reaches this machine), and the names `localhost` and `*.localhost`, with
or without the trailing dot. Other hosts get urllib's usual handling of the environment.

Redirects: never followed, to any host. A 3xx answer is a `Redirected` error (an HTTPError: its code is the 3xx)
that says where it pointed: following one would send a request to a host the user did not name, past the proxy
rule.
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import ipaddress
import math
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from .errors import UserError

MAX_LINE = 1 << 20  # one line of a stream (an SSE event is < 2 KiB)
MAX_BODY = 64 << 20  # one response, streamed or not (a 32k-token stream is ~15 MiB; PyPI's torch JSON ~ 3 MiB)
READ_SIZE = 1 << 16
MAX_SECONDS = 7 * 24 * 3600.0  # the longest deadline --request-timeouts takes (a week: a socket takes any less)


@dataclass(frozen=True)
class Limits:
    """Per-request deadlines in seconds (benchmark/README.md says why these)."""

    first_byte_s: float = 300.0
    idle_s: float = 120.0
    total_s: float = 1800.0

    def text(self) -> str:
        return f"{self.first_byte_s:g},{self.idle_s:g},{self.total_s:g}"


def parse_limits(text: str | None, flag: str = "--request-timeouts") -> Limits:
    """FIRST,IDLE,TOTAL (seconds, each > 0 and at most MAX_SECONDS, FIRST and IDLE <= TOTAL); None: the
    defaults. Anything else is a UserError naming the flag."""
    if text is None:
        return Limits()
    parts = text.split(",")
    try:
        vals = [float(x) for x in parts]
    except ValueError:
        vals = []
    if len(vals) != 3 or not all(math.isfinite(v) and v > 0 for v in vals):
        raise UserError(f"{flag} {text}: expected FIRST,IDLE,TOTAL, three numbers of seconds > 0 "
                        f"(default {Limits().text()})")
    if max(vals) > MAX_SECONDS:
        raise UserError(f"{flag} {text}: at most {MAX_SECONDS:g} seconds (a week) each")
    if max(vals[0], vals[1]) > vals[2]:
        raise UserError(f"{flag} {text}: the first-byte and idle deadlines must not exceed the total")
    return Limits(first_byte_s=vals[0], idle_s=vals[1], total_s=vals[2])


class Timeout(OSError):
    """A request ran past one of its bounds (the message says which)."""


class RunDeadline(Timeout):
    """The caller's overall deadline (bench eagle3's --deadline-s) came while a request was still running."""


class TooLarge(OSError):
    """A response (or one line of it) is larger than the client takes."""


class Redirected(urllib.error.HTTPError):
    """A 3xx answer: no redirect is followed."""

    def __init__(self, url: str, code: int, msg: str, hdrs: Any, fp: Any, location: str) -> None:
        super().__init__(url, code, msg, hdrs, fp)
        self.location = location

    def __str__(self) -> str:
        return f"HTTP {self.code} redirect to {self.location}: not followed (no redirect is followed)"


# (time.monotonic() when it comes, why): a bound of a request, or the caller's deadline (inf, "": none)
Deadline = tuple[float, str]
NO_DEADLINE: Callable[[], Deadline] = lambda: (math.inf, "")  # noqa: E731


def _host(url: str) -> str:
    return (urllib.parse.urlsplit(url).hostname or "").lower().rstrip(".")


def is_loopback(url: str) -> bool:
    host = _host(url)
    if host == "localhost" or host.endswith(".localhost"):
        return True
    ip: ipaddress.IPv4Address | ipaddress.IPv6Address
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        if not host[:1].isdigit():
            return False
        try:  # what the resolver takes too: 127.1, 2130706433, 0x7f.0.0.1, 0177.0.0.1
            ip = ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback or ip.is_unspecified


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: ANN001 (urllib's signature)
        raise Redirected(req.full_url, code, msg, headers, fp, newurl)


def _recording(base: type[http.client.HTTPConnection]) -> type[http.client.HTTPConnection]:
    class Conn(base):  # type: ignore[misc,valid-type]
        def __init__(self, *a: Any, holder: list[socket.socket], **kw: Any) -> None:
            super().__init__(*a, **kw)
            self._holder = holder

        def connect(self) -> None:
            super().connect()
            self._holder.append(self.sock)

    return Conn


_HTTP_CONN = _recording(http.client.HTTPConnection)
_HTTPS_CONN = _recording(http.client.HTTPSConnection)


class _HTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, holder: list[socket.socket]) -> None:
        super().__init__()
        self.holder = holder

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(functools.partial(_HTTP_CONN, holder=self.holder), req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, holder: list[socket.socket]) -> None:
        super().__init__()
        self.holder = holder

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(functools.partial(_HTTPS_CONN, holder=self.holder), req,
                            context=self._context)


def _opener(url: str, holder: list[socket.socket]) -> urllib.request.OpenerDirector:
    handlers: list[Any] = [_NoRedirect(), _HTTPHandler(holder), _HTTPSHandler(holder)]
    if is_loopback(url):
        handlers.insert(0, urllib.request.ProxyHandler({}))
    return urllib.request.build_opener(*handlers)  # without the ProxyHandler: reads the proxy env now


def _s(v: float) -> str:
    return f"{v:g} s"


class Reply:
    """An open response with its deadlines: read it with `body()` or `lines()`."""

    def __init__(self, resp: http.client.HTTPResponse, sock: socket.socket | None, where: str, t0: float,
                 total_at: Deadline, idle_s: float, deadline: Callable[[], Deadline] = NO_DEADLINE,
                 max_body: int = MAX_BODY) -> None:
        self.resp, self.sock, self.where, self.t0 = resp, sock, where, t0
        self.status = resp.status
        self.total_at, self.idle_s = total_at, idle_s
        self.deadline, self.max_body = deadline, max_body
        self.size = 0

    def __enter__(self) -> Reply:
        return self

    def __exit__(self, *exc: object) -> None:
        self.resp.close()

    def _read(self, until: Deadline) -> bytes:
        """The next bytes, waiting no later than the earliest of `until`, the total and the caller's deadline."""
        if self.resp.isclosed():  # read to its end: http.client closed it, and the socket with it
            return b""
        run = self.deadline()
        at, why = min(until, self.total_at, run, key=lambda x: x[0])
        left = at - time.monotonic()
        if left <= 0:
            raise _timeout(self.where, why, run)
        if self.sock is not None and self.sock.fileno() >= 0:  # a closed socket's settimeout is EBADF
            self.sock.settimeout(left)
        try:
            data = self.resp.read1(READ_SIZE)
        except TimeoutError:
            raise _timeout(self.where, why, run) from None
        self.size += len(data)
        if self.size > self.max_body:
            raise TooLarge(f"{self.where}: the answer is larger than {_size(self.max_body)} (the client's cap)")
        return data

    def body(self) -> bytes:
        parts = []
        idle = (time.monotonic() + self.idle_s, f"no byte for {_s(self.idle_s)} (idle deadline)")
        while data := self._read(idle):
            parts.append(data)
            idle = (time.monotonic() + self.idle_s, idle[1])
        return b"".join(parts)

    def lines(self, first_s: float) -> Iterator[tuple[float, bytes]]:
        """(time.perf_counter() when it arrived, line) per line; `first_s` bounds the wait for the first `data:`
        line, idle_s every later wait for the next one."""
        buf = b""
        idle_why = f"no data for {_s(self.idle_s)} after the last event (idle deadline, --request-timeouts)"
        wait = (time.monotonic() + first_s, f"no data within {_s(first_s)} (first-byte deadline, --request-timeouts)")
        while True:
            data = self._read(wait)
            if not data:
                if buf:
                    yield time.perf_counter(), buf
                return
            t = time.perf_counter()
            *whole, buf = (buf + data).split(b"\n")
            for line in whole:
                if line.lstrip().startswith(b"data:"):
                    wait = (time.monotonic() + self.idle_s, idle_why)
                yield t, line
            if len(buf) > MAX_LINE:
                raise TooLarge(f"{self.where}: a line of more than {_size(MAX_LINE)} without a newline (the "
                               "client's cap)")


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n} bytes"


def _timeout(where: str, why: str, run: Deadline) -> Timeout:
    return (RunDeadline if run[1] and why == run[1] else Timeout)(f"{where}: {why}")


def request(req: urllib.request.Request | str, *, first_byte_s: float, total_s: float | None = None,
            idle_s: float | None = None, deadline: Callable[[], Deadline] = NO_DEADLINE,
            max_body: int = MAX_BODY) -> Reply:
    """Open `req` (no redirect followed, no proxy for loopback) within first_byte_s for the headers; the Reply's
    reads keep to idle_s and total_s (default first_byte_s: a small call) and to `deadline()` (when the caller's
    time is up, and why). Raises urllib.error.HTTPError (Redirected for a 3xx) / URLError / Timeout / OSError."""
    url = req.full_url if isinstance(req, urllib.request.Request) else req
    where = f"{req.get_method() if isinstance(req, urllib.request.Request) else 'GET'} {url}"
    t0 = time.monotonic()
    total = first_byte_s if total_s is None else total_s
    total_at = (t0 + total, f"no whole answer within {_s(total)} (total deadline)")
    run = deadline()
    head_at = min((t0 + first_byte_s, f"no answer within {_s(first_byte_s)} (first-byte deadline)"), total_at,
                  run, key=lambda x: x[0])
    left = head_at[0] - t0
    if left <= 0:
        raise _timeout(where, head_at[1], run)
    holder: list[socket.socket] = []
    fired = threading.Event()

    def cut() -> None:  # a server that sends its headers a byte at a time: the socket timeout never fires
        fired.set()
        for s in holder:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    timer = threading.Timer(left, cut)
    timer.daemon = True
    timer.start()
    try:
        resp = _opener(url, holder).open(req, timeout=left)
    except urllib.error.HTTPError:
        raise
    except (OSError, http.client.HTTPException) as e:
        if fired.is_set() or _is_timeout(e):
            raise _timeout(where, head_at[1], run) from None
        raise
    finally:
        timer.cancel()
    if fired.is_set():
        resp.close()
        raise _timeout(where, head_at[1], run)
    return Reply(resp, holder[-1] if holder else None, where, t0, total_at,
                 first_byte_s if idle_s is None else idle_s, deadline, max_body)


def _is_timeout(e: BaseException) -> bool:
    return isinstance(e, TimeoutError) or isinstance(getattr(e, "reason", None), TimeoutError)


def get(url: str, limits: Limits, *, max_body: int = MAX_BODY, headers: dict[str, str] | None = None) -> bytes:
    """The whole body of GET url within `limits` (first byte, idle between bytes, total) and `max_body`; the
    errors of `request` and `Reply.body`, an HTTP error status included."""
    req = urllib.request.Request(url, headers=headers or {})
    with request(req, first_byte_s=limits.first_byte_s, total_s=limits.total_s, idle_s=limits.idle_s,
                 max_body=max_body) as r:
        return r.body()


def why_failed(e: BaseException) -> str:
    """A failed request (any error of `get`) in the words a user reads."""
    if isinstance(e, Redirected):
        return str(e)
    if isinstance(e, urllib.error.HTTPError):
        return f"HTTP {e.code} {e.reason}"
    if isinstance(e, (Timeout, TooLarge)):
        return str(e).split(": ", 1)[-1]
    if isinstance(e, urllib.error.URLError):
        return f"cannot connect ({e.reason})"
    if isinstance(e, http.client.HTTPException):
        return f"not an HTTP answer ({type(e).__name__}: {e})"
    return f"{type(e).__name__}: {e}"


__all__ = ["MAX_BODY", "MAX_LINE", "MAX_SECONDS", "NO_DEADLINE", "READ_SIZE", "Deadline", "Limits", "Redirected",
           "Reply", "RunDeadline", "Timeout", "TooLarge", "get", "is_loopback", "parse_limits", "request",
           "why_failed"]
