"""Issue 32, class 8 (its parts here): still tracebacks. An index's JSON nested deeper than the reader takes, or
larger than the client's cap, and a disk that fills while a wheel is written: each one line naming what was at
fault (the index URL; the wheel), exit 2, and nothing half-written left (no temporary file, no file under the
wheel's name).

The full disk is RLIMIT_FSIZE below the wheel's size (test_installer_index's full_disk_cli): every write past it
fails with EFBIG, the errno a quota or a file-size limit gives; ENOSPC takes the same path (any OSError of the
write), and a real full file system needs a mount this suite cannot make. Each case runs the real CLI in a fresh
process and is classified by support/hostile.py; only clean passes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from support import hostile
from support.hostile import Case

from . import core_world as w
from . import index_world as iw
from . import test_installer_index as ii
from .index_world import Index, index  # noqa: F401 - the fixture

ITEM = "32.8"
WATCH = ("patches/9.9.9/base.toml", "cache")


def url(idx: Index) -> str:
    return idx.url + iw.JSON_PATH


def bump(id: str, idx: Index, answer: iw.Behaviour, *names: str) -> Case:
    return Case(id, ITEM, iw.bump_argv(idx), names=(url(idx), *names), setup=iw.world(idx, iw.route(iw.JSON_PATH,
                answer)), watch=WATCH, env=iw.env(idx), timeout=90)


def upstream(id: str, idx: Index, answer: iw.Behaviour, *names: str) -> Case:
    return Case(id, ITEM, list(iw.UPSTREAM), names=(url(idx), *names),
                setup=iw.world(idx, iw.route(iw.JSON_PATH, answer)), watch=WATCH, env=iw.env(idx), timeout=90)


DEEP = b'{"releases": {"0.0.2": ' + b"[" * 200_000 + b"]" * 200_000 + b"}}"
HUGE = b'{"releases": {"0.0.2": [' + b"0, " * (24 << 20) + b"0]}}"  # 72 MiB of a valid document

Builder = Callable[[Index], Case]
CASES: list[tuple[str, Builder]] = [
    ("index-nested-200000-deep", lambda idx: bump(
        "index-nested-200000-deep", idx, iw.body(DEEP), "nested deeper than the reader takes")),
    ("upstream-nested-200000-deep", lambda idx: upstream(
        "upstream-nested-200000-deep", idx, iw.body(DEEP), "nested deeper than the reader takes")),
    ("index-72-mib-document", lambda idx: bump(
        "index-72-mib-document", idx, iw.body(HUGE), "larger than 64 MiB")),
]


@pytest.mark.parametrize("which", [c for c, _ in CASES])
def test_hostile(which: str, index: Index, tmp_path: Path):  # noqa: F811 - the fixture
    hostile.assert_clean(dict(CASES)[which](index), tmp_path)


def test_a_disk_that_fills_while_a_wheel_is_written(tmp_path: Path):
    """build with the file-size limit at half the upstream wheel's size (the patched one is as large, give or take
    the label): one line naming the wheel, exit 2, dist/ as it was (no .partial, nothing under the wheel's name)."""
    (tmp_path / "probe").mkdir()
    w.make(tmp_path / "probe", lock=False)
    limit = w.cached_wheel(tmp_path / "probe").stat().st_size // 2
    wheel = w.WHEEL.replace("0.0.1", "0.0.1+" + load_label(tmp_path / "probe"))

    def setup(tmp: Path) -> None:
        w.make(tmp)
        (tmp / "dist").mkdir()

    c = ii.case("build-disk-full-mid-wheel", ITEM, ["build", "--out", "{tmp}/dist"], cli=ii.full_disk_cli(limit),
                setup=setup, watch=("dist",),
                names=(f"{{tmp}}/dist/{wheel}", "cannot write the wheel", "File too large", "nothing was built"))
    hostile.assert_clean(c, tmp_path)


def load_label(tmp: Path) -> str:
    from sglang_blackwell.patchset.bases import load_base

    return load_base(w.base_dir(tmp)).local_label


def test_case_ids_unique():
    assert len({c for c, _ in CASES}) == len(CASES)
