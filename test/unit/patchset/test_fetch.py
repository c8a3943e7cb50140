"""The download cache, through pip: verified before it enters the cache, atomic, offline once warm; pip's index
(a mirror) is asked first, the pinned URL second. pip runs for real against real HTTP servers on 127.0.0.1: the
`server` of the tiny base (its wheels, and a PEP 503 index of them) and, standing in for a user's mirror, a stock
http.server serving an index written by our `index` command."""

from __future__ import annotations

import functools
import http.server
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from sglang_blackwell.artifacts.index import build_index
from sglang_blackwell.errors import IntegrityError, UserError
from sglang_blackwell.patchset.bases import Artifact, get_base
from sglang_blackwell.patchset.fetch import cached_path, fetch, record_path, tag_flags
from support.wheel_world import pip_sees_only

REPO = Path(__file__).resolve().parents[3]
DEAD = "http://127.0.0.1:9"  # the discard port: connection refused


def _art(tiny_base):
    return get_base("9.9.9").package("sglang").files[0]


def _cache_entries(tmp_path):
    root = tmp_path / "cache"
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


class Mirror:
    """A PEP 503 index (our `index` command's output) behind a stock http.server on 127.0.0.1, like a user's
    mirror; `hits` are the request paths."""

    def __init__(self, root: Path, wheels: list[Path]):
        self.hits: list[str] = []
        build_index(wheels, root)
        hits = self.hits

        class Handler(http.server.SimpleHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                hits.append(self.path)
                super().do_GET()

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=root))
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/simple/"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()


@pytest.fixture
def mirror_only(tiny_base, server, tmp_path, monkeypatch):
    """The tiny base's pinned URL is dead; the only way to the wheel is a mirror named in a pip.conf."""
    toml = tiny_base / "base.toml"
    toml.write_text(toml.read_text().replace(server.url, DEAD))
    m = Mirror(tmp_path / "mirror", [server.root / _art(tiny_base).filename])
    conf = tmp_path / "pip.conf"
    conf.write_text(f"[global]\nindex-url = {m.url}\n")
    pip_sees_only(monkeypatch, None)
    monkeypatch.delenv("PIP_NO_INDEX")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    yield m
    m.close()


def test_fetch_verifies_caches_and_goes_offline(tiny_base, server, tmp_path, monkeypatch):
    art = _art(tiny_base)
    p = fetch(art)
    assert p == cached_path(art) and p.read_bytes() == (server.root / art.filename).read_bytes()
    assert "simple/sglang/" in server.hits  # pip asked the index by name first
    hits = len(server.hits)
    monkeypatch.setenv("SGLANG_BLACKWELL_OFFLINE", "1")
    assert fetch(art) == p
    monkeypatch.delenv("SGLANG_BLACKWELL_OFFLINE")
    assert fetch(art) == p
    assert len(server.hits) == hits  # warm cache: no network


def test_hash_mismatch_refused_and_cache_stays_clean(tiny_base, server, tmp_path):
    art = _art(tiny_base)
    (server.root / art.filename).write_bytes(b"X" * art.size)  # same size, other bytes
    with pytest.raises(IntegrityError, match=r"sglang-0.0.1-py3-none-any.whl: pip download failed from the "
                                             r"configured index: pip refused the file: its sha256 is not the pin"):
        fetch(art)
    assert _cache_entries(tmp_path) == []


def test_truncated_download_refused_and_cache_stays_clean(tiny_base, server, tmp_path):
    art = _art(tiny_base)
    server.truncate[art.filename] = art.size // 2
    with pytest.raises(UserError, match=r"sglang-0.0.1-py3-none-any.whl: pip download failed .*nothing was cached"):
        fetch(art)
    assert _cache_entries(tmp_path) == []


def test_our_own_size_check_refuses_what_pip_accepted(tiny_base, server, tmp_path):
    good = _art(tiny_base)
    art = Artifact(good.filename, good.url, good.sha256, good.size + 1)  # pip checks the hash, we the size too
    with pytest.raises(IntegrityError, match=r"does not match the pin \(size \d+ != pinned \d+; truncated"):
        fetch(art)
    assert _cache_entries(tmp_path) == []


def test_corrupt_cache_entry_is_replaced(tiny_base, server, tmp_path):
    art = _art(tiny_base)
    p = fetch(art)
    p.write_bytes(b"bitrot")
    messages = []
    assert fetch(art, progress=messages.append).read_bytes() == (server.root / art.filename).read_bytes()
    assert any("corrupt" in m for m in messages)


def test_partial_as_a_link_is_refused_for_downloads_and_never_swept(tiny_base, tmp_path):
    """<cache>/.partial linked to another disk: what is there is not ours; no download goes there, nothing is
    deleted there (old files, names that read as dead pids); a download directory of ours that died is swept
    only from a .partial that is a directory of its own."""
    from sglang_blackwell.patchset.fetch import sweep_partials

    disk = tmp_path / "disk"
    (disk / "dl.99999999.abc").mkdir(parents=True)
    (disk / "dl.99999999.abc" / "request.txt").write_text("x")
    (disk / "x.99999999.ext").write_text("mine")
    os.utime(disk / "x.99999999.ext", (0, 0))
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / ".partial").symlink_to(disk)
    with pytest.raises(UserError, match=r"\.partial: is a symbolic link to .*nothing was downloaded"):
        fetch(_art(tiny_base))
    assert sorted(p.name for p in disk.iterdir()) == ["dl.99999999.abc", "x.99999999.ext"]
    (cache / ".partial").unlink()
    (disk / "x.99999999.ext").unlink()
    disk.rename(cache / ".partial")
    sweep_partials(cache)
    assert list((cache / ".partial").iterdir()) == []


def test_offline_with_cold_cache_names_the_file(tiny_base, monkeypatch):
    monkeypatch.setenv("SGLANG_BLACKWELL_OFFLINE", "1")
    with pytest.raises(UserError, match="sglang-0.0.1-py3-none-any.whl: not in the cache"):
        fetch(_art(tiny_base))


def test_the_mirror_in_pip_conf_serves_the_pin(mirror_only, tiny_base, tmp_path):
    art = get_base("9.9.9").package("sglang").files[0]
    assert art.url.startswith(DEAD)
    assert fetch(art).read_bytes() == (tmp_path / "mirror" / "files" / art.filename).read_bytes()
    assert "/simple/sglang/" in mirror_only.hits and f"/files/{art.filename}" in mirror_only.hits


def test_pinned_url_when_the_index_lacks_the_file(tiny_base, server, tmp_path, monkeypatch):
    art = _art(tiny_base)
    pip_sees_only(monkeypatch, None)  # no index at all: the name lookup fails, the URL works
    assert fetch(art).read_bytes() == (server.root / art.filename).read_bytes()
    assert art.filename in server.hits and "simple/sglang/" not in server.hits


def test_both_ways_failing_are_both_named(tiny_base, server, tmp_path, monkeypatch):
    (server.root / _art(tiny_base).filename).unlink()
    with pytest.raises(UserError) as e:
        fetch(_art(tiny_base))
    msg = str(e.value)
    assert "from the configured index: pip exited 1" in msg and "from the pinned URL http://127.0.0.1" in msg
    assert not isinstance(e.value, IntegrityError) and _cache_entries(tmp_path) == []


def test_pinned_wheel_for_another_python_is_asked_for_with_its_tags():
    assert tag_flags("sglang-0.5.14-cp312-cp312-manylinux_2_34_x86_64.whl") == [
        "--only-binary=:all:", "--ignore-requires-python", "--platform", "manylinux_2_34_x86_64", "--abi", "cp312",
        "--python-version", "3.12", "--implementation", "cp"]
    assert tag_flags("sglang_kernel-0.4.4-cp310-abi3-manylinux2014_x86_64.whl")[2:] == [
        "--platform", "manylinux2014_x86_64", "--abi", "abi3", "--python-version", "3.10", "--implementation", "cp"]
    assert tag_flags("flashinfer_python-0.6.4-py3-none-any.whl") == ["--only-binary=:all:", "--ignore-requires-python"]


@pytest.mark.network
def test_a_cp313_pin_is_found_by_name_from_another_interpreter(tmp_path, monkeypatch):
    """sglang 0.5.14 for CPython 3.13 through PyPI's index, whatever Python runs the tool (12 MB)."""
    monkeypatch.delenv("SGLANG_BLACKWELL_PATCHES", raising=False)
    pip_sees_only(monkeypatch, "https://pypi.org/simple")
    base = get_base("0.5.14")
    art = next(a for a in base.package("sglang").files if "cp313" in a.filename)
    dead = Artifact(art.filename, DEAD + "/" + art.filename, art.sha256, art.size)
    assert fetch(dead, tmp_path / "cache").stat().st_size == art.size


def test_make_builds_with_pip_pointed_at_the_mirror_only(mirror_only, tiny_base, tmp_path):
    """`make` runs `sglang-blackwell build`: the real CLI, in its own process, pip configured by a pip.conf."""
    r = subprocess.run([sys.executable, "-m", "sglang_blackwell.cli", "build", "--out", str(tmp_path / "dist")],
                       capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO / "python")})
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "dist" / "sglang-0.0.1+sm120.7-py3-none-any.whl").is_file()
    assert any(h.startswith("/files/sglang-0.0.1") for h in mirror_only.hits)


def test_no_pip_is_one_clear_line(tiny_base, tmp_path):
    """An interpreter without pip: `build` with a cold cache exits 2 with one line naming the interpreter."""
    import packaging

    venv = tmp_path / "nopip"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    libs = tmp_path / "libs"
    libs.mkdir()
    (libs / "packaging").symlink_to(Path(packaging.__file__).parent)
    py = venv / "bin" / "python"
    r = subprocess.run([str(py), "-m", "sglang_blackwell.cli", "build", "--out", str(tmp_path / "dist")],
                       capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "python"), str(libs)])})
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{py} has no pip" in lines[0] and "ensurepip" in lines[0], r.stderr


def test_a_wrong_pin_never_deletes_the_verified_entry_nor_downloads(tiny_base, server, tmp_path):
    """Issue 18 item 3: the cache records what it verified, so a pin that now disagrees is named as the pin that
    changed; nothing is downloaded (a 615 MB kernel wheel would be) and the good file stays."""
    art = _art(tiny_base)
    p = fetch(art)
    good = p.read_bytes()
    rec = json.loads(record_path(art).read_text())
    assert (rec["sha256"], rec["size"]) == (art.sha256, art.size) and rec["verified"]
    hits = len(server.hits)
    for wrong in (Artifact(art.filename, art.url, "0" * 64, art.size, origin="base.toml [[patched]] #1 file #1"),
                  Artifact(art.filename, art.url, art.sha256, art.size + 1, origin="base.toml [[patched]] #1 file #1")):
        with pytest.raises(IntegrityError, match=r"base.toml \[\[patched\]\] #1 file #1: the pin changed: "
                                                 r"(sha256 = '0{64}'|size = \d+) .* nothing was downloaded or deleted"):
            fetch(wrong)
        assert p.read_bytes() == good
    assert len(server.hits) == hits, "a disagreeing pin made a download"
    assert fetch(art) == p  # the right pin still finds it


def test_a_changed_entry_is_replaced_only_by_a_file_matching_the_pin(tiny_base, server, tmp_path, monkeypatch):
    art = _art(tiny_base)
    p = fetch(art)
    p.write_bytes(b"bitrot")
    monkeypatch.setenv("SGLANG_BLACKWELL_OFFLINE", "1")
    with pytest.raises(IntegrityError, match=r"changed since it was verified on .*the cache entry was kept"):
        fetch(art)
    assert p.read_bytes() == b"bitrot"  # offline: nothing can replace it, so it is not deleted either
    monkeypatch.delenv("SGLANG_BLACKWELL_OFFLINE")
    (server.root / art.filename).write_bytes(b"X" * art.size)  # the index now serves other bytes too
    with pytest.raises(IntegrityError, match=r"the cache entry .* was kept"):
        fetch(art)
    assert p.read_bytes() == b"bitrot"


def test_an_entry_without_a_record_is_kept_when_the_download_disagrees(tiny_base, server, tmp_path):
    art = _art(tiny_base)
    p = fetch(art)
    record_path(art).unlink()  # a cache from before records
    wrong = Artifact(art.filename, art.url, "1" * 64, art.size)
    with pytest.raises(IntegrityError, match="the cache entry .* was kept"):
        fetch(wrong)
    assert p.is_file() and fetch(art) == p and record_path(art).is_file()


@pytest.mark.parametrize("change, words", [
    ({"sha256": "a" * 64 + "\n--no-binary :all:"}, "is not 64 lowercase hex digits"),
    ({"url": "http://127.0.0.1:9/sglang-0.0.1.tar.gz"}, "does not end with the file name"),
    ({"url": "http://127.0.0.1:9/x/sglang-0.0.1-py3-none-any.whl --no-binary :all:"}, "whitespace"),
    ({"filename": "../sglang-0.0.1-py3-none-any.whl"}, "path separator"),
    ({"filename": "sglang-0.0.1.tar.gz", "url": "http://127.0.0.1:9/sglang-0.0.1.tar.gz"}, "not a wheel file name"),
])
def test_a_pin_pip_could_misread_is_refused_before_pip_runs(tiny_base, tmp_path, change, words):
    """What becomes a cache path and a line of pip's requirement file is checked first: an sdist URL (pip builds
    one, whatever --only-binary says), an option smuggled into the sha256, a path in the file name."""
    import dataclasses

    art = dataclasses.replace(_art(tiny_base), **change)
    with pytest.raises(UserError, match=words) as e:
        fetch(art, tmp_path / "cache")
    assert "nothing was downloaded" in str(e.value)
    assert not (tmp_path / "cache").exists()  # refused before the cache (and pip) was touched
