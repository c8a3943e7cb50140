"""Download, verify and cache pinned upstream artifacts.

A file enters the cache only after its size and sha256 match the pin: it is downloaded to a temporary file in
<cache>/.partial/ and renamed into <cache>/artifacts/ atomically. A cached file is re-verified on every use;
a corrupt one is removed and fetched again. With a warm cache nothing touches the network.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from ..errors import IntegrityError, UserError
from ..paths import cache_dir
from .bases import Artifact

CHUNK = 1 << 20
Progress = Callable[[str], None]


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _verify(path: Path, art: Artifact) -> str | None:
    """None if `path` matches the pin, else why not."""
    size = path.stat().st_size
    if art.size is not None and size != art.size:
        return f"size {size} != pinned {art.size}"
    digest = sha256_file(path)
    if digest != art.sha256:
        return f"sha256 {digest} != pinned {art.sha256}"
    return None


def cached_path(art: Artifact, cache: Path | None = None) -> Path:
    return (cache or cache_dir()) / "artifacts" / art.filename


def fetch(art: Artifact, cache: Path | None = None, progress: Progress | None = None) -> Path:
    """Return a verified local copy of `art`, downloading it if the cache lacks it."""
    cache = cache or cache_dir()
    dest = cached_path(art, cache)
    if dest.exists():
        problem = _verify(dest, art)
        if problem is None:
            return dest
        if progress:
            progress(f"cached {art.filename} is corrupt ({problem}); fetching again")
        dest.unlink()
    if os.environ.get("SGLANG_BLACKWELL_OFFLINE") == "1":
        raise UserError(f"{art.filename}: not in the cache {cache} and SGLANG_BLACKWELL_OFFLINE=1")
    if not art.url:
        raise UserError(f"{art.filename}: no download URL pinned")
    partial = cache / ".partial"
    partial.mkdir(parents=True, exist_ok=True)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=art.filename + ".", dir=partial)
    tmp = Path(tmp_name)
    try:
        if progress:
            progress(f"downloading {art.url}")
        h = hashlib.sha256()
        n = 0
        with os.fdopen(fd, "wb") as out:
            try:
                with urllib.request.urlopen(art.url, timeout=60) as resp:
                    while chunk := resp.read(CHUNK):
                        out.write(chunk)
                        h.update(chunk)
                        n += len(chunk)
            except (urllib.error.URLError, OSError) as e:
                raise UserError(f"{art.filename}: download from {art.url} failed: {e}") from None
        if art.size is not None and n != art.size:
            raise IntegrityError(
                f"{art.filename}: downloaded {n} bytes, pinned size is {art.size} (truncated or wrong file); "
                "nothing was cached")
        if h.hexdigest() != art.sha256:
            raise IntegrityError(
                f"{art.filename}: sha256 {h.hexdigest()} does not match the pin {art.sha256}; nothing was cached")
        os.replace(tmp, dest)
        return dest
    finally:
        if tmp.exists():
            tmp.unlink()


def clean_partials(cache: Path | None = None) -> None:
    """Remove leftovers of killed downloads (never visible as cache entries)."""
    partial = (cache or cache_dir()) / ".partial"
    if partial.is_dir():
        shutil.rmtree(partial, ignore_errors=True)
