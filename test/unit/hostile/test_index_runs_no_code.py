"""Issue 32, class 1: a hostile package index runs no code on the user's machine. `base bump` and `check
--upstream` against an index of our own (index_world.py: a real HTTP server on loopback, real pip) that answers
what an index, a mirror or a proxy in between could: a sha256 that carries a pip option, a URL that points at an
sdist whose build backend writes {tmp}/pwned, file names with a path or a control character in them, strings that
break base.toml, and every level of the JSON document of the wrong type. Each is one line naming the index URL
and the field, exit 2; nothing is written (base.toml, the cache), and pip never builds anything.

Each case runs the real CLI in a fresh process and is classified by support/hostile.py; only clean passes."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from sglang_blackwell.patchset.bases import load_base
from support import hostile
from support.hostile import Case
from support.wheel_world import ORIGINAL, make_wheel

from . import core_world as w
from . import index_world as iw
from .index_world import Index, index  # noqa: F401 - the fixture

ITEM = "32.1"
BT = "patches/9.9.9/base.toml"
WATCH = (BT, "cache", iw.PWNED)


def url(idx: Index) -> str:
    return idx.url + iw.JSON_PATH


def bump(id: str, idx: Index, *steps: iw.Step, names: tuple[str, ...] = (), rc: int = 2,
         extra: tuple[str, ...] = (), **kw) -> Case:
    return Case(id, ITEM, iw.bump_argv(idx, *extra), names=(url(idx), *names) if rc == 2 else names, rc=rc,
                setup=iw.world(idx, *steps),
                watch=kw.pop("watch", WATCH), env=iw.env(idx), timeout=90, **kw)


def upstream(id: str, idx: Index, *steps: iw.Step, names: tuple[str, ...] = (), rc: int = 2, **kw) -> Case:
    return Case(id, ITEM, list(iw.UPSTREAM), names=(url(idx), *names) if rc == 2 else names, rc=rc,
                setup=iw.world(idx, *steps),
                watch=kw.pop("watch", WATCH), env=iw.env(idx), timeout=90, **kw)


def new_file(**over) -> iw.Step:
    """The JSON API's 0.0.2 file with `over` replacing its fields (values may be functions of (idx, tmp))."""
    def make(idx: Index, tmp: Path):
        fields = {k: (v(idx, tmp) if callable(v) else v) for k, v in over.items()}
        return iw.project(idx, [iw.entry(idx, iw.NEW, **fields)])
    return iw.json_doc(make)


def top(**over) -> iw.Step:
    return iw.json_doc(lambda idx, tmp: iw.project(idx, **over))


def sdist_url(idx: Index, tmp: Path) -> str:
    return iw.evil_sdist(idx, tmp)[0]


def sdist_digests(extra: str = ""):
    return lambda idx, tmp: {"sha256": iw.evil_sdist(idx, tmp)[1] + extra}


def only_current(**info_over) -> iw.Step:
    """An index that lists no release with files but the current one (`info`, `urls`), `info_over` replacing."""
    def make(idx: Index, tmp: Path):
        d = iw.project(idx, releases={})
        d.update(info_over)
        return d
    return iw.json_doc(make)


def base_toml_reads_url(want: Callable[[Index], str]):
    def after(tmp: Path, r: subprocess.CompletedProcess) -> str | None:
        (art,) = load_base(w.base_dir(tmp)).package("sglang").files
        return None if art.url == want(IDX[0]) and art.filename == iw.NEW else f"base.toml pins {art}"
    return after


IDX: list[Index] = []  # the running test's index (base_toml_reads_url reads it)
Builder = Callable[[Index], Case]

CASES: list[tuple[str, Builder]] = [
    # ---- strings the index gives, into pip's requirement file and base.toml --------------------------------------
    ("sha256-carries-a-pip-option", lambda idx: bump(
        "index-sha256-carries-a-pip-option", idx,
        new_file(url=sdist_url, digests=sdist_digests("\n--no-binary :all:")),
        names=('releases["0.0.2"][0].digests.sha256', "64 hex digits"))),
    ("url-points-at-an-sdist", lambda idx: bump(
        "index-url-points-at-an-sdist", idx, new_file(url=sdist_url, digests=sdist_digests()),
        names=('releases["0.0.2"][0].url', "does not end with the file name"))),
    ("upstream-url-points-at-an-sdist", lambda idx: upstream(
        "upstream-url-points-at-an-sdist", idx, new_file(url=sdist_url, digests=sdist_digests()),
        names=('releases["0.0.2"][0].url', "does not end with the file name"))),
    ("filename-with-a-path", lambda idx: bump(
        "index-filename-with-a-path", idx, new_file(filename="../../" + iw.NEW),
        names=('releases["0.0.2"][0].filename', "path separator"))),
    ("filename-with-a-newline", lambda idx: bump(
        "index-filename-with-a-newline", idx, new_file(filename=iw.NEW[:-4] + "\n.whl"),
        names=('releases["0.0.2"][0].filename', "control character"))),
    ("sha256-too-short", lambda idx: bump(
        "index-sha256-too-short", idx, new_file(digests={"sha256": "abc"}),
        names=('releases["0.0.2"][0].digests.sha256', "64 hex digits"))),
    ("url-with-a-fragment", lambda idx: bump(
        "index-url-with-a-fragment", idx, new_file(url=lambda idx, tmp: f"{idx.url}/{iw.NEW}#egg=evil"),
        names=('releases["0.0.2"][0].url', "fragment"))),
    ("url-of-another-scheme", lambda idx: bump(
        "index-url-of-another-scheme", idx, new_file(url=f"ftp://192.0.2.1/{iw.NEW}"),
        names=('releases["0.0.2"][0].url', "http or https"))),
    ("url-with-a-quote-is-escaped", lambda idx: bump(
        "index-url-with-a-quote-is-escaped", idx, new_file(url=lambda idx, tmp: f'{idx.url}/a"b/{iw.NEW}'),
        rc=0, extra=("--write",), watch=("cache/artifacts/" + w.WHEEL, iw.PWNED),
        after=base_toml_reads_url(lambda idx: f'{idx.url}/a"b/{iw.NEW}'))),
    # ---- every level of the document, of the wrong type ---------------------------------------------------------
    ("document-is-an-array", lambda idx: bump(
        "index-document-is-an-array", idx, iw.json_doc(lambda idx, tmp: []),
        names=("the document", "expected an object, not an array"))),
    ("releases-is-an-array", lambda idx: bump(
        "index-releases-is-an-array", idx, top(releases=[]), names=("releases", "expected an object"))),
    ("release-is-an-object", lambda idx: bump(
        "index-release-is-an-object", idx, iw.json_doc(lambda idx, tmp: iw.project(idx, {})),
        names=('releases["0.0.2"]', "expected an array"))),
    ("file-is-a-string", lambda idx: bump(
        "index-file-is-a-string", idx, iw.json_doc(lambda idx, tmp: iw.project(idx, [iw.NEW])),
        names=('releases["0.0.2"][0]', "expected an object, not a string"))),
    ("filename-is-a-number", lambda idx: bump(
        "index-filename-is-a-number", idx, new_file(filename=5), names=('releases["0.0.2"][0].filename',))),
    ("digests-is-a-string", lambda idx: bump(
        "index-digests-is-a-string", idx, new_file(digests="abc"), names=('releases["0.0.2"][0].digests',))),
    ("sha256-is-a-number", lambda idx: bump(
        "index-sha256-is-a-number", idx, new_file(digests={"sha256": 5}),
        names=('releases["0.0.2"][0].digests.sha256',))),
    ("url-is-an-array", lambda idx: bump(
        "index-url-is-an-array", idx, new_file(url=["x"]), names=('releases["0.0.2"][0].url',))),
    ("size-is-a-string", lambda idx: bump(
        "index-size-is-a-string", idx, new_file(size="1024"), names=('releases["0.0.2"][0].size',))),
    ("yanked-is-a-number", lambda idx: bump(
        "index-yanked-is-a-number", idx, new_file(yanked=2), names=('releases["0.0.2"][0].yanked',))),
    ("info-is-a-string", lambda idx: upstream(
        "upstream-info-is-a-string", idx, only_current(info="sglang"), names=("info", "expected an object"))),
    ("info-version-is-a-number", lambda idx: upstream(
        "upstream-info-version-is-a-number", idx, only_current(info={"version": 2}), names=("info.version",))),
    ("urls-is-an-object", lambda idx: upstream(
        "upstream-urls-is-an-object", idx, only_current(urls={}), names=("urls", "expected an array"))),
    ("upstream-releases-is-a-string", lambda idx: upstream(
        "upstream-releases-is-a-string", idx, top(releases="0.0.2"), names=("releases", "expected an object"))),
]


@pytest.mark.parametrize("which", [c for c, _ in CASES])
def test_hostile(which: str, index: Index, tmp_path: Path):  # noqa: F811 - the fixture
    IDX[:] = [index]
    hostile.assert_clean(dict(CASES)[which](index), tmp_path)


def said(*words: str):
    def after(tmp: Path, r: subprocess.CompletedProcess) -> str | None:
        missing = [x for x in words if x not in r.stdout]
        return f"stdout lacks {missing}: {r.stdout[-600:]}" if missing else None
    return after


def test_a_good_index_still_bumps(index: Index, tmp_path: Path):  # noqa: F811 - the fixture
    """The world is sound: the same index, untouched, gives the new entry."""
    hostile.assert_clean(bump("index-good-bump", index, rc=0, watch=(BT, iw.PWNED),
                              after=said(f'filename = "{iw.NEW}"', "(not written: --write rewrites")), tmp_path)


def test_a_good_index_still_reports_drift(index: Index, tmp_path: Path):  # noqa: F811 - the fixture
    hostile.assert_clean(upstream("index-good-upstream", index, rc=0, watch=(BT, iw.PWNED),
                                  after=said("sglang 0.0.2 (newer than the pin)", "applies")), tmp_path)


def test_case_ids_unique():
    assert len({c for c, _ in CASES}) == len(CASES)
    assert json.dumps([c for c, _ in CASES])  # plain names (pytest ids)


# ---- lock: what pip's report hands over from the index ------------------------------------------------------------

PY = f"{sys.version_info.major}.{sys.version_info.minor}"


def needs_depa(idx: Index, tmp: Path) -> None:
    """The pinned sglang wheel requires depa (the cache entry and the pin rewritten to it, the label relocked); the
    index serves depa 1.0 with PEP 658 metadata (so pip's resolver never downloads it and its report passes the
    index's hash on as given) and a page whose hash fragment carries a pip option after the digest."""
    old = w.cached_wheel(tmp)
    data = old.read_bytes()
    make_wheel(old, "sglang", "0.0.1", {"sglang/__init__.py": b"", "sglang/gate.py": ORIGINAL}, requires=["depa"])
    new = old.read_bytes()
    w.edit_toml(tmp, iw.sha256(data), iw.sha256(new))
    w.edit_toml(tmp, f"size = {len(data)}", f"size = {len(new)}")
    w.relock(tmp)
    depa = make_wheel(idx.root / "depa-1.0-py3-none-any.whl", "depa", "1.0", {"depa/__init__.py": b""})
    meta = b"Metadata-Version: 2.1\nName: depa\nVersion: 1.0\n\n"
    (idx.root / (depa.name + ".metadata")).write_bytes(meta)
    mh = iw.sha256(meta)
    page = (f'<html><body><a href="/{depa.name}#sha256={iw.sha256(depa.read_bytes())} --no-binary :all:" '
            f'data-dist-info-metadata="sha256={mh}" data-core-metadata="sha256={mh}">{depa.name}</a></body></html>')
    idx.routes["/simple/depa/"] = iw.body(page, "text/html")


def test_lock_refuses_a_hash_that_carries_a_pip_option(index: Index, tmp_path: Path):  # noqa: F811 - the fixture
    c = Case("lock-sha256-carries-a-pip-option", ITEM,
             ["lock", "--base", w.BASE, "--python-version", PY, "--index-url", f"{index.url}/simple/"],
             names=("depa 1.0", "not 64 hex digits", "no lock was written"), setup=iw.world(index, needs_depa),
             watch=("patches/9.9.9/locks",), env=iw.env(index), timeout=180, cli=iw.progress_to_stdout_cli())
    hostile.assert_clean(c, tmp_path)
