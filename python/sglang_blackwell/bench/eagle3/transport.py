"""HTTP for `bench eagle3` (stdlib only): JSON calls, plain-text GETs, server-sent-event streams.

Proxies: a request to a loopback address (127.0.0.0/8, ::1 and IPv4-mapped ::ffff:127.x, `localhost` and
`*.localhost`) never goes through a proxy, whatever http_proxy / HTTPS_PROXY / ALL_PROXY / no_proxy say: on lab
networks http_proxy is often set, and urllib would otherwise send the harness's 127.0.0.1 requests to it. Other
hosts get urllib's usual handling of the environment (proxies, no_proxy).
"""

from __future__ import annotations

import ipaddress
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from http.client import HTTPResponse
from typing import Any

_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def is_loopback(url: str) -> bool:
    host = (urllib.parse.urlsplit(url).hostname or "").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def urlopen(req: urllib.request.Request | str, timeout: float) -> HTTPResponse:
    """urllib's urlopen, without a proxy for loopback URLs (raises urllib.error.HTTPError / URLError / OSError)."""
    url = req.full_url if isinstance(req, urllib.request.Request) else req
    opener = _DIRECT if is_loopback(url) else urllib.request.build_opener()  # reads the proxy env now
    return opener.open(req, timeout=timeout)


def post_request(url: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> urllib.request.Request:
    return urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                  headers={"Content-Type": "application/json", **(headers or {})})


def http_json(url: str, body: dict[str, Any] | None = None, timeout: float = 30.0,
              method: str | None = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method or ("POST" if data is not None else "GET"),
                                 headers={"Content-Type": "application/json"})
    with urlopen(req, timeout=timeout) as r:
        raw = r.read()
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except ValueError:  # some endpoints (/start_profile, /flush_cache) answer plain text
        return raw.decode(errors="replace")


def get_text(url: str, timeout: float = 10.0) -> str:
    with urlopen(url, timeout=timeout) as r:
        return r.read().decode(errors="replace")


def status(url: str, timeout: float = 5.0) -> int | str:
    """The HTTP status of GET url, or why there was none (a short string)."""
    try:
        with urlopen(url, timeout=timeout) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except (OSError, ValueError) as e:
        return f"{type(e).__name__}: {getattr(e, 'reason', e)}"[:200]


class StreamCut(OSError):
    """The server closed a server-sent-events stream before `data: [DONE]`."""


def sse_events(resp: HTTPResponse) -> Iterator[tuple[float, bytes]]:
    """(time.perf_counter() when the line arrived, payload) for each `data:` line of a server-sent-events
    stream, until `data: [DONE]` (not yielded; SGLang and vLLM end every stream with it, so a stream that ends
    without it was cut off: StreamCut). Comment lines (`: ...`), `event:`/`id:` lines and the blank lines
    between events are skipped; servers send one `data:` line per event."""
    for raw in resp:
        t = time.perf_counter()
        line = raw.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            return
        yield t, data
    raise StreamCut("the stream ended before data: [DONE]")
