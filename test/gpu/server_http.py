"""The HTTP client of the GPU suites that send a served sglang requests (hostile/, soak/): one request as raw bytes
over http.client (a body the `openai` client would never send: invalid UTF-8, 100k-deep JSON, 64 MiB), every
outcome a Reply, never an exception: an answer (status, body), or no answer (a timeout, a refused or dropped
connection); a request cut by its client mid-answer (open_and_cut); a streamed completion read event by event with
each event's arrival time, optionally cut by its client after some events (stream). Standard library only."""

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
MAX_EVENT = 1 << 20  # one server-sent-events line at most


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


@dataclass
class Streamed:
    """A streamed (server-sent events) answer: its status, the arrival time of each event that carried output
    text (time.monotonic()), the text, and how it ended: done (`data: [DONE]` came), cut (by us, as asked), or an
    error (no answer, an error event, the stream ended before [DONE], a timeout)."""

    status: int | None
    chunk_t: list[float]
    text: str = ""
    done: bool = False
    cut: bool = False
    error: str | None = None
    body: bytes = b""  # a non-200 answer's body (for its message)

    def message(self) -> str:
        return Reply(self.status, self.body, error=self.error).message()


def _event_text(data: bytes) -> tuple[str, str | None]:
    """(the output text an OpenAI completions stream event carries, the error it reports or None)."""
    try:
        doc = json.loads(data)
    except ValueError:
        return "", f"stream event is not JSON: {data[:120]!r}"
    if not isinstance(doc, dict):
        return "", f"stream event is not an object: {data[:120]!r}"
    if "error" in doc or doc.get("object") == "error":
        return "", f"error event: {json.dumps(doc.get('error', doc))[:200]}"
    choices = doc.get("choices") or []
    return "".join(c.get("text") or "" for c in choices if isinstance(c, dict)), None


def stream(base: str, path: str, obj: Any, *, key: str | None, cut_after_chunks: int | None = None,
           cut_after_s: float | None = None, timeout: float = 120.0) -> Streamed:
    """POST a streamed completion and read its events as they come. cut_after_chunks / cut_after_s: hang up (as
    open_and_cut does) once that many output events have come, or that many seconds after sending, whichever comes
    first (None: read to the end). `timeout` bounds each read (a server that stops sending is an error)."""
    t0 = time.monotonic()
    conn = _conn(base, timeout)
    out = Streamed(None, [])
    sock = resp = None
    pieces: list[str] = []
    cut_at = None if cut_after_s is None else t0 + cut_after_s

    def cut_now() -> bool:
        return (cut_after_chunks is not None and len(out.chunk_t) >= cut_after_chunks) or \
            (cut_at is not None and time.monotonic() >= cut_at)
    try:
        conn.connect()
        sock = conn.sock
        conn.request("POST", path, body=json.dumps(obj).encode(), headers=headers_for(key))
        if cut_at is not None:
            sock.settimeout(max(0.001, cut_at - time.monotonic()))
        resp = conn.getresponse()
        out.status = resp.status
        if resp.status != 200:
            out.body = resp.read()
            out.error = f"HTTP {resp.status}"
            return out
        while not cut_now():
            if cut_at is not None:
                sock.settimeout(max(0.001, min(timeout, cut_at - time.monotonic())))
            line = resp.readline(MAX_EVENT)
            if not line:
                out.error = "the stream ended before data: [DONE]"
                break
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                out.done = True
                break
            text, err = _event_text(data)
            if err:
                out.error = err
                break
            if text:
                out.chunk_t.append(time.monotonic())
                pieces.append(text)
        out.cut = not out.done and out.error is None
    except TimeoutError:
        if cut_at is not None and time.monotonic() >= cut_at - 0.001:
            out.cut = True  # the cut came while waiting
        else:
            out.error = f"timeout after {timeout:.0f} s"
    except ConnectionRefusedError:
        out.error = "connection refused"
    except (http.client.HTTPException, OSError) as e:
        out.error = f"connection dropped: {type(e).__name__}: {e}"[:EXCERPT_CHARS]
    finally:
        out.text = "".join(pieces)
        if sock is not None and (out.cut or out.error):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        if resp is not None:
            resp.close()
        conn.close()
    return out
