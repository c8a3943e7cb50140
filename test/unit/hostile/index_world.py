"""A package index of our own for the hostile cases of issue 32: a real HTTP server on loopback (threads of the
test process) that speaks PyPI's JSON API (`/pypi/<name>/json`) and PEP 503 (`/simple/<name>/`, for the pip
downloads fetch makes), over the core world's base 9.9.9 (core_world.py: sglang 0.0.1 pinned and cached). It
serves sglang 0.0.2 (a wheel like the pinned one), and any route can be made hostile: other JSON, an endless body,
a byte every so often, no answer at all, an answer that stops after its headers.

A case's CLI runs against it with pip seeing only this index (no config file, PIP_INDEX_URL here), the index's
JSON API as SGLANG_BLACKWELL_PYPI_URL, and SGLANG_BLACKWELL_OFFLINE off: these cases are about what comes over
the network."""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import os
import tarfile
import threading
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from support.wheel_world import ORIGINAL, make_wheel

from . import core_world as w

NEW = "sglang-0.0.2-py3-none-any.whl"
JSON_PATH = "/pypi/sglang/json"
PWNED = "pwned"  # what the hostile sdist's build backend writes when pip runs it

Behaviour = Callable[[http.server.BaseHTTPRequestHandler, "Index"], None]


class Index:
    """The server; `routes` maps a request path to what the server does there (files under `root` otherwise)."""

    def __init__(self, root: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        self.routes: dict[str, Behaviour] = {}
        self.closing = threading.Event()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: object) -> None:
                pass

            def do_GET(self) -> None:
                path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
                try:
                    if path in outer.routes:
                        outer.routes[path](self, outer)
                    elif path.startswith("/simple/"):
                        send(self, outer.simple_page(path), "text/html")
                    elif (outer.root / path.lstrip("/")).is_file():
                        send(self, (outer.root / path.lstrip("/")).read_bytes(), "application/octet-stream")
                    else:
                        send(self, b"not found", "text/plain", code=404)
                except OSError:  # the client gave up (a deadline of ours): nothing to answer
                    pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        # shutdown() waits for serve_forever's next look at its flag: every 0.5 s by default, half a second of every
        # test's teardown; 20 ms here (an idle server's wake-ups only)
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()

    def simple_page(self, path: str) -> bytes:
        """PEP 503: the wheels under root of the project the path names (with their sha256, as PyPI links them)."""
        from packaging.utils import canonicalize_name, parse_wheel_filename

        want = canonicalize_name(path.strip("/").split("/")[-1])
        links = [f'<a href="/{f.name}#sha256={sha256(f.read_bytes())}">{f.name}</a>'
                 for f in sorted(self.root.glob("*.whl")) if canonicalize_name(parse_wheel_filename(f.name)[0]) == want]
        return ("<!DOCTYPE html><html><body>\n" + "<br/>\n".join(links) + "\n</body></html>\n").encode()

    def close(self) -> None:
        self.closing.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def send(h: http.server.BaseHTTPRequestHandler, body: bytes, ctype: str = "application/json", code: int = 200) -> None:
    h.send_response(code)
    h.send_header("Content-Type", ctype)
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    h.wfile.write(body)


# ---- what a route does -----------------------------------------------------------------------------------------

def body(data: bytes | str, ctype: str = "application/json") -> Behaviour:
    raw = data.encode() if isinstance(data, str) else data
    return lambda h, idx: send(h, raw, ctype)


def doc(obj: Any) -> Behaviour:
    return body(json.dumps(obj))


def _open_stream(h: http.server.BaseHTTPRequestHandler, length: int | None = None) -> None:
    h.send_response(200)
    h.send_header("Content-Type", "application/json")
    if length is not None:
        h.send_header("Content-Length", str(length))
    h.send_header("Connection", "close")
    h.end_headers()
    h.close_connection = True
    h.wfile.flush()


def endless(chunk: bytes = b"[0," * 65536, every_s: float = 0.0) -> Behaviour:
    """Headers, then `chunk` after `chunk` for as long as the client reads (JSON that never ends)."""
    def run(h: http.server.BaseHTTPRequestHandler, idx: Index) -> None:
        _open_stream(h)
        while not idx.closing.is_set():
            h.wfile.write(chunk)
            if every_s:
                h.wfile.flush()
                time.sleep(every_s)
    return run


def trickle(data: bytes, every_s: float) -> Behaviour:
    """Headers, then `data` a byte at a time, one every `every_s` seconds (no socket timeout ever fires)."""
    def run(h: http.server.BaseHTTPRequestHandler, idx: Index) -> None:
        _open_stream(h, len(data))
        for i in range(len(data)):
            if idx.closing.wait(every_s):
                return
            h.wfile.write(data[i:i + 1])
            h.wfile.flush()
    return run


def silent(h: http.server.BaseHTTPRequestHandler, idx: Index) -> None:
    """The request is read, no byte of an answer ever comes."""
    idx.closing.wait(600)


def headers_then_silent(h: http.server.BaseHTTPRequestHandler, idx: Index) -> None:
    _open_stream(h)
    idx.closing.wait(600)


# ---- the release the index serves --------------------------------------------------------------------------------

def entry(idx: Index, name: str, **over: Any) -> dict[str, Any]:
    """The JSON API's entry of a file under root (PyPI's fields), with `over` replacing fields."""
    data = (idx.root / name).read_bytes() if (idx.root / name).is_file() else b""
    e = {"filename": name, "url": f"{idx.url}/{name}", "size": len(data), "digests": {"sha256": sha256(data)},
         "yanked": False, "packagetype": "bdist_wheel"}
    e.update(over)
    return e


def project(idx: Index, new: list[dict[str, Any]] | Any = None, **top: Any) -> dict[str, Any]:
    """sglang's JSON document: releases 0.0.1 (the pinned wheel) and 0.0.2 (`new`: its files; default the served
    wheel), `info` and `urls`; `top` replaces top-level fields."""
    new = [entry(idx, NEW)] if new is None else new
    d = {"info": {"name": "sglang", "version": "0.0.2"},
         "releases": {"0.0.1": [entry(idx, w.WHEEL)], "0.0.2": new}, "urls": new}
    d.update(top)
    return d


def serve(idx: Index, tmp: Path) -> None:
    """The pinned 0.0.1 wheel (the cached one's bytes) and a new 0.0.2 one under root; the JSON document as is."""
    (idx.root / w.WHEEL).write_bytes(w.cached_wheel(tmp).read_bytes())
    make_wheel(idx.root / NEW, "sglang", "0.0.2", {"sglang/__init__.py": b"", "sglang/gate.py": ORIGINAL})
    idx.routes.setdefault(JSON_PATH, doc(project(idx)))


def evil_sdist(idx: Index, tmp: Path) -> tuple[str, str]:
    """An sdist whose in-tree build backend (no build requirements: pip runs it offline) writes {tmp}/pwned the
    moment pip imports it; served under root. Returns (its URL, its sha256)."""
    backend = (f"open({str(tmp / PWNED)!r}, 'w').write('the index ran code')\n"
               "def get_requires_for_build_wheel(config_settings=None):\n    return []\n")
    pyproject = ('[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n'
                 '[project]\nname = "sglang"\nversion = "0.0.2"\n')
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        for name, text in (("pyproject.toml", pyproject), ("backend.py", backend),
                           ("PKG-INFO", "Metadata-Version: 2.1\nName: sglang\nVersion: 0.0.2\n")):
            data = text.encode()
            ti = tarfile.TarInfo(f"sglang-0.0.2/{name}")
            ti.size = len(data)
            t.addfile(ti, io.BytesIO(data))
    (idx.root / "sglang-0.0.2.tar.gz").write_bytes(buf.getvalue())
    return f"{idx.url}/sglang-0.0.2.tar.gz", sha256(buf.getvalue())


def env(idx: Index, **extra: str) -> dict[str, str]:
    """A case's environment: the core world's, pip and the JSON API on this index only, online."""
    return dict(w.ENV, SGLANG_BLACKWELL_OFFLINE="0", SGLANG_BLACKWELL_PYPI_URL=idx.url, PIP_CONFIG_FILE=os.devnull,
                PIP_INDEX_URL=f"{idx.url}/simple/", PIP_NO_INPUT="1", PYTHONDONTWRITEBYTECODE="1", **extra)


# ---- a case's world ------------------------------------------------------------------------------------------------

Step = Callable[[Index, Path], None]


def world(idx: Index, *steps: Step) -> Callable[[Path], None]:
    """setup: the core world (base 9.9.9, its cache with the .partial/ directory every download of ours keeps),
    the index serving sglang 0.0.1 and 0.0.2, then each step(idx, tmp)."""
    def setup(tmp: Path) -> None:
        w.make(tmp)
        (tmp / "cache" / ".partial").mkdir()
        serve(idx, tmp)
        for s in steps:
            s(idx, tmp)
    return setup


def json_doc(make: Callable[[Index, Path], Any]) -> Step:
    """A step: the JSON API answers the document make(idx, tmp) (after the files are served)."""
    def step(idx: Index, tmp: Path) -> None:
        idx.routes[JSON_PATH] = doc(make(idx, tmp))
    return step


def route(path: str, behaviour: Behaviour) -> Step:
    def step(idx: Index, tmp: Path) -> None:
        idx.routes[path] = behaviour
    return step


def bump_argv(idx: Index, *extra: str) -> list[str]:
    return ["base", "bump", "--base", w.BASE, "sglang==0.0.2", "--index-url", idx.url, *extra]


UPSTREAM = ["check", "--upstream", "latest", "--base", w.BASE]

# the CLI with its progress lines ("pip download ... from ...", the indented lines of commands.progress) on
# stdout: stderr keeps the error alone, so the yardstick's one-line rule judges the error line itself (a download
# that fails has started, and said so)
PROGRESS_TO_STDOUT = r'''
import sys

class ProgressToStdout:
    def write(self, text):
        progress = text.startswith("  ") or text.startswith(("pip download ", "cached "))  # commands.progress: "  ..."
        return (sys.stdout if progress else sys.__stderr__).write(text)

    def flush(self):
        sys.stdout.flush()
        sys.__stderr__.flush()

    def isatty(self):
        return False


sys.stderr = ProgressToStdout()
from sglang_blackwell.cli import main
sys.exit(main(sys.argv[1:]))
'''


def progress_to_stdout_cli() -> tuple[str, ...]:
    import sys

    return (sys.executable, "-B", "-c", PROGRESS_TO_STDOUT)


@pytest.fixture
def index(tmp_path: Path):
    idx = Index(tmp_path / "served")
    yield idx
    idx.close()


__all__ = ["JSON_PATH", "NEW", "PWNED", "UPSTREAM", "Index", "body", "bump_argv", "doc", "endless", "entry", "env",
           "evil_sdist", "headers_then_silent", "index", "json_doc", "progress_to_stdout_cli", "project", "route",
           "serve", "sha256", "silent", "trickle", "world"]
