"""Tiny wheels and bases of our own, served by a real HTTP server on localhost: helpers and fixtures of the
patchset and artifacts tests (their conftest.py files register the fixtures)."""

from __future__ import annotations

import hashlib
import http.server
import threading
import urllib.parse
import zipfile
from pathlib import Path

import pytest

from sglang_blackwell.artifacts.wheel import make_record
from support.fake_base import Patched, render_base, wheel_pin

PATCH_TEMPLATE = """From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
From: Test Author <test@example.invalid>
Date: Mon, 30 Nov 2026 00:00:00 +0000
Subject: [PATCH] {subject}

{body}

Origin: vendor, sglang-blackwell tests
Forwarded: no
Upstream-Status: Pending
Logical-Id: {lid}
Last-Update: 2026-11-30
---
 {path} | 2 +-
 1 file changed, 1 insertion(+), 1 deletion(-)

{diff}"""


def make_wheel(path: Path, dist: str, version: str, files: dict[str, bytes], requires: list[str] = (),
               tag: str = "py3-none-any") -> Path:
    """A minimal valid wheel (METADATA, WHEEL, RECORD) holding `files`; a platform `tag` makes it platlib."""
    from sglang_blackwell.artifacts.wheel import Entry

    di = f"{dist.replace('-', '_')}-{version}.dist-info"
    meta = f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n"
    meta += "".join(f"Requires-Dist: {r}\n" for r in requires)
    entries = [Entry(n, d, 0o644 << 16) for n, d in files.items()]
    entries += [Entry(f"{di}/METADATA", (meta + "\n").encode(), 0o644 << 16),
                Entry(f"{di}/WHEEL", (f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: "
                                      f"{'true' if tag.endswith('-any') else 'false'}\nTag: {tag}\n").encode(),
                      0o644 << 16)]
    entries.append(Entry(f"{di}/RECORD", b"", 0o644 << 16))
    entries[-1].data = make_record(entries, f"{di}/RECORD")
    with zipfile.ZipFile(path, "w") as z:
        for e in entries:
            z.writestr(e.name, e.data)
    return path


class Server:
    """A real HTTP server on 127.0.0.1 serving a directory; `truncate` cuts named files short. It is also a PEP 503
    index of the wheels in that directory at {url}/simple/ (no hash fragments: pip's and our checks do the work)."""

    def __init__(self, root: Path):
        self.root = root
        self.truncate: dict[str, int] = {}
        self.hits: list[str] = []
        self.slow: dict[str, float] = {}
        outer = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *a, **k):
                super().__init__(*a, directory=str(root), **k)

            def log_message(self, *a):
                pass

            def do_GET(self):
                name = urllib.parse.unquote(self.path.lstrip("/"))  # pip quotes the "+" of a local version
                outer.hits.append(name)
                if name == "simple" or name.startswith("simple/"):
                    page = outer.simple_page(name)
                    if page is None:
                        self.send_error(404)
                        return
                    self.send_response(200)
                    self.send_header("Content-Type", "text/html")
                    self.send_header("Content-Length", str(len(page)))
                    self.end_headers()
                    self.wfile.write(page)
                    return
                f = root / name
                if not f.is_file():
                    self.send_error(404)
                    return
                data = f.read_bytes()
                cut = outer.truncate.get(name)
                self.send_response(200)
                self.send_header("Content-Length", str(len(data) if cut is None else cut))
                self.end_headers()
                if name in outer.slow:
                    import time

                    for i in range(0, len(data), 1024):
                        self.wfile.write(data[i:i + 1024])
                        self.wfile.flush()
                        time.sleep(outer.slow[name])
                    return
                self.wfile.write(data if cut is None else data[:cut])

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        # close() waits for serve_forever's next look at its shutdown flag: every 0.05 s, not the default 0.5 s
        # that each test's teardown paid (0.45 s a server, two in some tests)
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def simple_page(self, path: str) -> bytes | None:
        from packaging.utils import canonicalize_name, parse_wheel_filename

        projects: dict[str, list[str]] = {}
        for f in sorted(self.root.glob("*.whl")):
            projects.setdefault(canonicalize_name(parse_wheel_filename(f.name)[0]), []).append(f.name)
        parts = [p for p in path.split("/") if p]
        if len(parts) == 1:
            links = [f'<a href="{p}/">{p}</a>' for p in sorted(projects)]
        elif len(parts) == 2 and canonicalize_name(parts[1]) in projects:
            links = [f'<a href="/{f}">{f}</a>' for f in projects[canonicalize_name(parts[1])]]
        else:
            return None
        return ("<!DOCTYPE html><html><body>\n" + "<br/>\n".join(links) + "\n</body></html>\n").encode()

    def close(self):
        self.httpd.shutdown()


@pytest.fixture
def server(tmp_path):
    root = tmp_path / "served"
    root.mkdir()
    s = Server(root)
    yield s
    s.close()


def sha256(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


ORIGINAL = b"def gate(major):\n    return major in (9, 10)\n\n\ndef other():\n    return 1\n"
PATCHED = b"def gate(major):\n    return major in (9, 10, 12)\n\n\ndef other():\n    return 1\n"


def gate_patch(lid: str = "P9") -> str:
    diff = ("diff --git a/python/sglang/gate.py b/python/sglang/gate.py\n"
            "index 1111111..2222222 100644\n"
            "--- a/python/sglang/gate.py\n"
            "+++ b/python/sglang/gate.py\n"
            "@@ -1,5 +1,5 @@\n"
            " def gate(major):\n"
            "-    return major in (9, 10)\n"
            "+    return major in (9, 10, 12)\n"
            " \n"
            " \n"
            " def other():\n")
    return PATCH_TEMPLATE.format(subject="gate: accept 12", body="The gate forgot SM12x; accept it.",
                                 lid=lid, path="python/sglang/gate.py", diff=diff)


def pip_sees_only(monkeypatch, index_url: str | None) -> None:
    """pip reads no config file and none of this machine's PIP_* settings (its index, find-links, constraints),
    and uses `index_url` as its index (None: no index at all)."""
    import os

    for k in list(os.environ):
        if k.startswith("PIP_"):
            monkeypatch.delenv(k)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    if index_url is None:
        monkeypatch.setenv("PIP_NO_INDEX", "1")
    else:
        monkeypatch.setenv("PIP_INDEX_URL", index_url)


def relock(base_dir: Path) -> None:
    """Record the base's current inputs under its label, whatever was recorded before (what a maintainer does
    with a label bump and `label lock`; build refuses a label recorded with other inputs)."""
    from sglang_blackwell.patchset.bases import load_base
    from sglang_blackwell.patchset.labellock import write_lock

    (base_dir / "LABEL.lock").unlink(missing_ok=True)
    write_lock(load_base(base_dir))


@pytest.fixture
def tiny_base(tmp_path, server, monkeypatch):
    """patches/<base> with one patched package (layout sglang) whose wheel is served over HTTP."""
    whl = make_wheel(server.root / "sglang-0.0.1-py3-none-any.whl", "sglang", "0.0.1",
                     {"sglang/__init__.py": b"", "sglang/gate.py": ORIGINAL},
                     requires=["flashinfer_python==0.6.3", "numpy"])
    patches = tmp_path / "patches"
    base = patches / "9.9.9"
    (base / "sglang").mkdir(parents=True)
    (base / "base.toml").write_text(render_base(patched=[Patched(
        "sglang", "sglang", "0.0.1", [wheel_pin(whl, server.url)],
        requires_rewrite={"flashinfer_python": "flashinfer_python==0.6.4"})]))
    (base / "sglang" / "0001-gate-accepts-12.patch").write_text(gate_patch())
    (base / "sglang" / "series").write_text("# test series\n0001-gate-accepts-12.patch\n")
    monkeypatch.setenv("SGLANG_BLACKWELL_PATCHES", str(patches))
    monkeypatch.setenv("SGLANG_BLACKWELL_CACHE", str(tmp_path / "cache"))
    pip_sees_only(monkeypatch, f"{server.url}/simple/")  # fetch downloads through pip: this server is its index
    from sglang_blackwell.patchset.bases import load_base
    from sglang_blackwell.patchset.labellock import write_lock

    write_lock(load_base(base))  # the label rule (labellock.py): +sm120.7 recorded with these inputs
    return base
