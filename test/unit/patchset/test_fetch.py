"""The download cache: verified before it enters the cache, atomic, offline once warm."""

from __future__ import annotations

import pytest

from sglang_blackwell.errors import IntegrityError, UserError
from sglang_blackwell.patchset.bases import get_base
from sglang_blackwell.patchset.fetch import cached_path, fetch


def _art(tiny_base):
    return get_base("9.9.9").package("sglang").files[0]


def _cache_entries(tmp_path):
    root = tmp_path / "cache"
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def test_fetch_verifies_caches_and_goes_offline(tiny_base, server, tmp_path, monkeypatch):
    art = _art(tiny_base)
    p = fetch(art)
    assert p == cached_path(art) and p.read_bytes() == (server.root / art.filename).read_bytes()
    hits = len(server.hits)
    monkeypatch.setenv("SGLANG_BLACKWELL_OFFLINE", "1")
    assert fetch(art) == p
    assert len(server.hits) == hits  # warm cache: no network


def test_hash_mismatch_refused_and_cache_stays_clean(tiny_base, server, tmp_path):
    art = _art(tiny_base)
    (server.root / art.filename).write_bytes(b"X" * art.size)  # same size, other bytes
    with pytest.raises(IntegrityError, match="does not match the pin"):
        fetch(art)
    assert _cache_entries(tmp_path) == []


def test_truncated_download_refused_and_cache_stays_clean(tiny_base, server, tmp_path):
    art = _art(tiny_base)
    server.truncate[art.filename] = art.size // 2
    with pytest.raises(IntegrityError, match="truncated"):
        fetch(art)
    assert _cache_entries(tmp_path) == []


def test_corrupt_cache_entry_is_replaced(tiny_base, server, tmp_path):
    art = _art(tiny_base)
    p = fetch(art)
    p.write_bytes(b"bitrot")
    messages = []
    assert fetch(art, progress=messages.append).read_bytes() == (server.root / art.filename).read_bytes()
    assert any("corrupt" in m for m in messages)


def test_offline_with_cold_cache_names_the_file(tiny_base, monkeypatch):
    monkeypatch.setenv("SGLANG_BLACKWELL_OFFLINE", "1")
    with pytest.raises(UserError, match="sglang-0.0.1-py3-none-any.whl: not in the cache"):
        fetch(_art(tiny_base))
