"""Issue 32, class 6 (its parts here): check everything, then write; refuse targets we do not own or that are
links. `install.sh --target` refuses a planted link and another user's world-writable directory (as `--stage`
refuses its directory); `index` refuses a requirements/ it cannot write before it publishes files/ and simple/;
`base bump --write` keeps a symlinked base.toml a link (the file it names is rewritten).

Each case runs the real command in a fresh process (the bundle's install.sh, the CLI) in the worlds of
test_installer_index.py and index_world.py, and is classified by support/hostile.py; only clean passes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_blackwell.patchset.bases import load_base
from support import hostile
from support.hostile import Case

from . import core_world as w
from . import index_world as iw
from . import test_installer_index as ii
from .index_world import Index, index  # noqa: F401 - the fixture

ITEM = "32.6"
PY = f"{sys.version_info.major}.{sys.version_info.minor}"
LOCK_COPY = f"9.9.9-py{PY.replace('.', '')}-lock.txt"  # requirements/ of the index: the lock's copy


# ---- install.sh --target ----------------------------------------------------------------------------------------

def test_target_that_is_a_planted_link_is_refused(tmp_path: Path):
    c = ii.case("target-is-a-planted-link", ITEM, ["--target", "{tmp}/site"], cli=ii.INSTALL_SH,
                watch=(ii.OUTSIDE_DIR, "site"), setup=ii.world(ii.symlink("site", ii.OUTSIDE_DIR)),
                names=("--target", "{tmp}/site", "symbolic link"))
    hostile.assert_clean(c, tmp_path)


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                    reason="a directory of another user is made with chown, which needs root")
def test_target_of_another_user_world_writable_is_refused(tmp_path: Path):
    def planted(tmp: Path) -> None:
        d = tmp / "site"
        d.mkdir()
        os.chown(d, 4242, 4242)
        d.chmod(0o777)

    c = ii.case("target-another-users-world-writable-dir", ITEM, ["--target", "{tmp}/site"], cli=ii.INSTALL_SH,
                watch=("site",), setup=ii.world(planted), names=("--target", "{tmp}/site", "another user (uid 4242)"))
    hostile.assert_clean(c, tmp_path)


def test_a_target_of_ones_own_still_installs(tmp_path: Path):
    c = ii.case("target-own-dir-installs", ITEM, ["--target", "{tmp}/site"], rc=0, cli=ii.INSTALL_SH,
                setup=ii.world(lambda tmp: (tmp / "site").mkdir()), after=ii.installed_with_gate(b"10, 12"))
    hostile.assert_clean(c, tmp_path)


# ---- index: requirements/ checked before files/ and simple/ are published -----------------------------------------

def lock_file(tmp: Path) -> None:
    """A (hand-made, empty) lock for this Python: the index then writes its two requirement files."""
    d = w.base_dir(tmp) / "locks"
    d.mkdir(exist_ok=True)
    (d / f"py{PY.replace('.', '')}.txt").write_text(
        f"# lock-schema: sglang-blackwell/lock/1\n# lock-base: 9.9.9\n# lock-python: {PY}\n"
        f"# lock-platform: manylinux_2_34_x86_64\n# lock-inputs: {'0' * 64}\n")


def requirements_link(rel: str):
    def step(tmp: Path) -> None:
        p = tmp / "idx" / "requirements" / rel if rel else tmp / "idx" / "requirements"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.symlink_to(tmp / (ii.OUTSIDE if rel else ii.OUTSIDE_DIR))
    return step


def with_outside(tmp: Path) -> None:
    (tmp / ii.OUTSIDE).write_text("precious\n")
    (tmp / ii.OUTSIDE_DIR).mkdir()


def test_index_requirements_dir_a_link_publishes_nothing(tmp_path: Path):
    c = ii.case("index-requirements-dir-is-a-link", ITEM, ii.INDEX, watch=("idx", ii.OUTSIDE_DIR, "dist"),
                setup=ii.index_world(with_outside, requirements_link("")),
                names=("{tmp}/idx/requirements", "symbolic link", "nothing was indexed"), after=ii.not_published)
    hostile.assert_clean(c, tmp_path)


def test_index_requirements_file_a_link_publishes_nothing(tmp_path: Path):
    c = ii.case("index-requirements-file-is-a-link", ITEM, ii.INDEX, watch=("idx", ii.OUTSIDE, "dist"),
                setup=ii.index_world(with_outside, lock_file, requirements_link(LOCK_COPY)),
                names=(LOCK_COPY, "symbolic link", "nothing was indexed"),
                after=ii.not_published)
    hostile.assert_clean(c, tmp_path)


def test_index_with_a_lock_still_writes_its_install_command(tmp_path: Path):
    def written(tmp: Path, r: subprocess.CompletedProcess) -> str | None:
        got = sorted(p.name for p in (tmp / "idx" / "requirements").iterdir())
        tag = PY.replace(".", "")
        want = [f"9.9.9-py{tag}-lock.txt", f"9.9.9-py{tag}-wheels.txt"]
        return None if got == want and f"-r {tmp}/idx/requirements/9.9.9-py{tag}-lock.txt" in r.stdout \
            else f"requirements/ holds {got}; stdout: {r.stdout[-400:]}"
    c = ii.case("index-with-a-lock", ITEM, ii.INDEX, rc=0, watch=("dist",), setup=ii.index_world(lock_file),
                after=written)
    hostile.assert_clean(c, tmp_path)


# ---- base bump --write: a symlinked base.toml stays a link ----------------------------------------------------------

def test_base_bump_write_keeps_a_symlinked_base_toml_a_link(index: Index, tmp_path: Path):  # noqa: F811
    def linked(idx: Index, tmp: Path) -> None:
        real = tmp / "elsewhere" / "base.toml"
        real.parent.mkdir()
        os.replace(w.base_toml(tmp), real)
        w.base_toml(tmp).symlink_to(real)

    def still_a_link(tmp: Path, r: subprocess.CompletedProcess) -> str | None:
        p = w.base_toml(tmp)
        if not p.is_symlink():
            return f"{p} is no longer a symbolic link"
        got = load_base(w.base_dir(tmp)).package("sglang")
        return None if got.version == "0.0.2" and (tmp / "elsewhere/base.toml").read_text().count('"0.0.2"') \
            else f"the file it names was not rewritten: {got}"

    c = Case("bump-write-through-a-symlinked-base-toml", ITEM, iw.bump_argv(index, "--write"), rc=0,
             setup=iw.world(index, linked), env=iw.env(index), after=still_a_link, timeout=90)
    hostile.assert_clean(c, tmp_path)
