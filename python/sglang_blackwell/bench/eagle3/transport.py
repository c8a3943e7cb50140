"""HTTP for `bench eagle3` (stdlib only): JSON calls, plain-text GETs, server-sent-event streams.

Proxies: a request to a loopback address never goes through a proxy, whatever http_proxy / HTTPS_PROXY /
ALL_PROXY / no_proxy say: on lab networks http_proxy is often set, and urllib would otherwise send the harness's
127.0.0.1 requests to it. Loopback is decided from the parsed address, the way the resolver reads it: 127.0.0.0/8
in any spelling inet_aton takes (`127.1`, `2130706433`, `0x7f.0.0.1`), ::1 and IPv4-mapped ::ffff:127.x, the
unspecified address (0.0.0.0, ::: a connection to it reaches this machine), and the names `localhost` and
`*.localhost`, with or without the trailing dot. Other hosts get urllib's usual handling of the environment.

Redirects: never followed, to any host. A 3xx answer is a `Redirected` error (an HTTPError: its code is the 3xx)
that says where it pointed: following one would send a request (a POST turned GET) to a host the user did not
name, past the proxy rule.

Bounds, on every request (defaults in `Limits`, `set_limits` from `bench eagle3 --request-timeouts`):
- first byte: a streamed request's first `data:` event (and its headers) within `first_byte_s`; a small call
  (health, /v1/models, /server_info, /metrics, ...) its answer within the caller's timeout;
- idle: no `data:` event for `idle_s` once a stream has started (comments, blank lines and stray bytes are no
  progress); a body whose bytes stop for that long;
- total: the whole request within `total_s`;
- size: a line of at most MAX_LINE bytes, a response of at most MAX_BODY;
- the run: `set_run_deadline` (`--deadline-s`) ends any request still running at that moment.
A request past a bound raises `Timeout` (`RunDeadline` for the run's) or `TooLarge`, both OSErrors naming the
bound.
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import ipaddress
import json
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

MAX_LINE = 1 << 20  # one SSE line (an event is < 2 KiB)
MAX_BODY = 64 << 20  # one response, streamed or not (a 32k-token stream is ~15 MiB)
READ_SIZE = 1 << 16


@dataclass(frozen=True)
class Limits:
    """Per-request deadlines in seconds (benchmark/README.md says why these)."""

    first_byte_s: float = 300.0
    idle_s: float = 120.0
    total_s: float = 1800.0


LIMITS = Limits()
_RUN: dict[str, float | None] = {"at": None, "seconds": None}  # the run's deadline (time.monotonic()), --deadline-s


def set_limits(limits: Limits) -> None:
    global LIMITS
    LIMITS = limits


def set_run_deadline(seconds: float | None, start: float | None = None) -> None:
    """Every request ends by `start` (default now) + seconds; None: no run deadline."""
    _RUN["seconds"] = seconds
    _RUN["at"] = None if seconds is None else (time.monotonic() if start is None else start) + seconds


class Timeout(OSError):
    """A request ran past one of its bounds (the message says which)."""


class RunDeadline(Timeout):
    """The run's --deadline-s came while a request was still running."""


class TooLarge(OSError):
    """A response (or one line of it) is larger than the client takes."""


class Redirected(urllib.error.HTTPError):
    """A 3xx answer: bench eagle3 follows no redirect."""

    def __init__(self, url: str, code: int, msg: str, hdrs: Any, fp: Any, location: str) -> None:
        super().__init__(url, code, msg, hdrs, fp)
        self.location = location

    def __str__(self) -> str:
        return f"HTTP {self.code} redirect to {self.location}: not followed (bench eagle3 follows no redirect)"


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


class Reply:
    """An open response with its deadlines: read it with `body()` or `sse()`."""

    def __init__(self, resp: http.client.HTTPResponse, sock: socket.socket | None, where: str, t0: float,
                 total_at: tuple[float, str], idle_s: float) -> None:
        self.resp, self.sock, self.where, self.t0 = resp, sock, where, t0
        self.status = resp.status
        self.total_at, self.idle_s = total_at, idle_s
        self.size = 0

    def __enter__(self) -> Reply:
        return self

    def __exit__(self, *exc: object) -> None:
        self.resp.close()

    def _read(self, until: tuple[float, str]) -> bytes:
        """The next bytes, waiting no later than the earliest of `until`, the total and the run deadline."""
        if self.resp.isclosed():  # read to its end: http.client closed it, and the socket with it
            return b""
        at, why = min(until, self.total_at, _run_at(), key=lambda x: x[0])
        left = at - time.monotonic()
        if left <= 0:
            raise _timeout(self.where, why)
        if self.sock is not None and self.sock.fileno() >= 0:  # a closed socket's settimeout is EBADF
            self.sock.settimeout(left)
        try:
            data = self.resp.read1(READ_SIZE)
        except TimeoutError:
            raise _timeout(self.where, why) from None
        self.size += len(data)
        if self.size > MAX_BODY:
            raise TooLarge(f"{self.where}: the answer is larger than {MAX_BODY >> 20} MiB (the client's cap)")
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
                raise TooLarge(f"{self.where}: a line of more than {MAX_LINE >> 20} MiB without a newline (the "
                               "client's cap)")


def _s(v: float) -> str:
    return f"{v:g} s"


def run_deadline_passed() -> str | None:
    """Why no more requests may start (the run's --deadline-s has come), or None."""
    at, why = _run_at()
    return why if time.monotonic() >= at else None


def _run_at() -> tuple[float, str]:
    at = _RUN["at"]
    if at is None:
        return float("inf"), ""
    return at, f"--deadline-s {_RUN['seconds'] or 0:g} reached mid-request: the run's time is up"


def _timeout(where: str, why: str) -> Timeout:
    return (RunDeadline if why.startswith("--deadline-s") else Timeout)(f"{where}: {why}")


def request(req: urllib.request.Request | str, *, first_byte_s: float, total_s: float | None = None,
            idle_s: float | None = None) -> Reply:
    """Open `req` (no redirect followed, no proxy for loopback) within first_byte_s for the headers; the Reply's
    reads keep to idle_s and total_s (default first_byte_s: a small call). Raises urllib.error.HTTPError
    (Redirected for a 3xx) / URLError / Timeout / OSError."""
    url = req.full_url if isinstance(req, urllib.request.Request) else req
    where = f"{req.get_method() if isinstance(req, urllib.request.Request) else 'GET'} {url}"
    t0 = time.monotonic()
    total = first_byte_s if total_s is None else total_s
    total_at = (t0 + total, f"no whole answer within {_s(total)} (total deadline)")
    head_at = min((t0 + first_byte_s, f"no answer within {_s(first_byte_s)} (first-byte deadline)"), total_at,
                  _run_at(), key=lambda x: x[0])
    left = head_at[0] - t0
    if left <= 0:
        raise _timeout(where, head_at[1])
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
            raise _timeout(where, head_at[1]) from None
        raise
    finally:
        timer.cancel()
    if fired.is_set():
        resp.close()
        raise _timeout(where, head_at[1])
    return Reply(resp, holder[-1] if holder else None, where, t0, total_at,
                 first_byte_s if idle_s is None else idle_s)


def _is_timeout(e: BaseException) -> bool:
    return isinstance(e, TimeoutError) or isinstance(getattr(e, "reason", None), TimeoutError)


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
