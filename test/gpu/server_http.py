"""The hostile suite's HTTP client: one request as raw bytes over http.client (a body the `openai` client would
never send: invalid UTF-8, 100k-deep JSON, 64 MiB), every outcome a Reply, never an exception: an answer (status,
body), or no answer (a timeout, a refused or dropped connection). Standard library only."""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any

EXCERPT_CHARS = 300


@dataclass
class Reply:
    status: int | None  # None: no HTTP answer (see error)
    body: bytes = b""
    error: str | None = None  # "timeout after N s", "connection refused", "connection dropped: ..."
    elapsed_s: float = 0.0

    def json(self) -> Any:
        try:
            return json.loads(self.body)
        except ValueError:
            return None

    def message(self) -> str:
        """What the answer says, shortened: an error body's message (sglang's {"error": {"message"}},
        {"message"}, FastAPI's {"detail"}), else the body's text, else the error."""
        if self.status is None:
            return self.error or ""
        doc = self.json()
        msg: Any = None
        if isinstance(doc, dict):
            err = doc.get("error")
            msg = err.get("message") if isinstance(err, dict) else err
            msg = msg or doc.get("message") or doc.get("detail")
        text = msg if isinstance(msg, str) else json.dumps(msg) if msg else self.body.decode(errors="replace")
        return " ".join(text.split())[:EXCERPT_CHARS]


def _conn(base: str, timeout: float) -> http.client.HTTPConnection:
    u = urllib.parse.urlsplit(base)
    return http.client.HTTPConnection(u.hostname or "127.0.0.1", u.port or 80, timeout=timeout)


def headers_for(key: str | None, content_type: str | None = "application/json") -> dict[str, str]:
    h = {"Content-Type": content_type} if content_type else {}
    if key:
        h["Authorization"] = f"Bearer {key}"
    return h


def request(base: str, method: str, path: str, body: bytes | None = None, *, key: str | None = None,
            timeout: float = 30.0, content_type: str | None = "application/json") -> Reply:
    t0 = time.monotonic()
    conn = _conn(base, timeout)
    try:
        conn.request(method, path, body=body, headers=headers_for(key, content_type if body is not None else None))
        r = conn.getresponse()
        data = r.read()
        return Reply(r.status, data, elapsed_s=time.monotonic() - t0)
    except TimeoutError:
        return Reply(None, error=f"timeout after {timeout:.0f} s", elapsed_s=time.monotonic() - t0)
    except ConnectionRefusedError:
        return Reply(None, error="connection refused", elapsed_s=time.monotonic() - t0)
    except (http.client.HTTPException, OSError) as e:
        return Reply(None, error=f"connection dropped: {type(e).__name__}: {e}"[:EXCERPT_CHARS],
                     elapsed_s=time.monotonic() - t0)
    finally:
        conn.close()


def post_json(base: str, path: str, obj: Any, *, key: str | None = None, timeout: float = 30.0) -> Reply:
    return request(base, "POST", path, json.dumps(obj).encode(), key=key, timeout=timeout)


def get(base: str, path: str, *, key: str | None = None, timeout: float = 10.0) -> Reply:
    return request(base, "GET", path, key=key, timeout=timeout)


def open_and_cut(base: str, path: str, obj: Any, *, key: str | None, read_bytes: int, cut_after_s: float,
                 timeout: float = 30.0) -> Reply:
    """Send a request and close the connection mid-answer: after `read_bytes` bytes of the body (0: before any),
    or `cut_after_s` seconds, whichever comes first. The Reply holds the status and what was read before the cut
    (status None: the cut came before the headers)."""
    t0 = time.monotonic()
    conn = _conn(base, timeout)
    status: int | None = None
    got = b""
    sock = None
    resp = None
    try:
        conn.connect()
        sock = conn.sock  # held here: http.client forgets it when a response says it closes the connection
        conn.request("POST", path, body=json.dumps(obj).encode(), headers=headers_for(key))
        if cut_after_s > 0:
            sock.settimeout(cut_after_s)
        resp = conn.getresponse()
        status = resp.status
        while len(got) < read_bytes:
            chunk = resp.read1(read_bytes - len(got))
            if not chunk:
                break
            got += chunk
    except TimeoutError:
        pass  # the cut
    except (http.client.HTTPException, OSError) as e:
        return Reply(status, got, error=f"connection dropped: {type(e).__name__}: {e}"[:EXCERPT_CHARS],
                     elapsed_s=time.monotonic() - t0)
    finally:
        if sock is not None:  # the hang-up the server sees, whoever else holds the socket
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        if resp is not None:
            resp.close()
        conn.close()
    return Reply(status, got, elapsed_s=time.monotonic() - t0)
