"""The shared block path of nccl_hook.py (put_block / strip_block / without_block) for every file kind it edits:
sitecustomize.py, the pth hook's module and .pth file, an NCCL config file. End-to-end cases through the CLI and
real venvs are in test/unit/hostile/test_core.py (items 2 and 6); these are the direct ones."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from pyenvs import cli, make_venv, site_packages

from sglang_blackwell.box.nccl_block import render_block, render_conf_block, render_pth_block
from sglang_blackwell.box.nccl_edit import put_block, python_problem, strip_block
from sglang_blackwell.errors import UserError

META = {"schema": 1, "profile": "pcie-ll", "requested": "pcie-ll", "class": "pcie", "topology": "t",
        "env": [["NCCL_PROTO", "LL"]], "tool": "test"}
KINDS = {
    "sitecustomize.py": (lambda j, c: render_block(dict(META, joined_newline=j, created_file=c), {"NCCL_PROTO": "LL"}),
                         b"import os\nA = 1", b"B = 2"),
    "_sglang_blackwell_nccl.py": (lambda j, c: render_block(dict(META, joined_newline=j, created_file=c),
                                                            {"NCCL_PROTO": "LL"}), b"A = 1", b"B = 2\n"),
    "sglang_blackwell_nccl.pth": (lambda j, c: render_pth_block(dict(META, joined_newline=j, created_file=c)),
                                  b"import os", b"import sys\n"),
    "nccl.conf": (lambda j, c: render_conf_block(dict(META, hook="nccl-conf", joined_newline=j, created_file=c),
                                                 "NCCL_PROTO=LL\n"), b"NCCL_DEBUG=WARN", b"NCCL_SOCKET_IFNAME=eth0"),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_uninstall_removes_exactly_what_install_added_and_keeps_the_users_lines_apart(tmp_path, kind):
    block_for, mine, later = KINDS[kind]
    p = tmp_path / kind
    p.write_bytes(mine)  # no trailing newline: install puts one before its block
    assert put_block(p, block_for)
    p.write_bytes(p.read_bytes() + later)  # the user appends after our block
    assert strip_block(p) == "written"
    assert p.read_bytes() == mine + b"\n" + later, "the user's lines were joined (A = 1B = 2)"
    # with nothing appended the round trip is byte-exact, the added newline included
    p.write_bytes(mine)
    put_block(p, block_for)
    strip_block(p)
    assert p.read_bytes() == mine
    # and where the user's own bytes bring their newline, none is added
    put_block(p, block_for)
    p.write_bytes(p.read_bytes() + b"\n" + later)
    strip_block(p)
    assert p.read_bytes() == mine + b"\n" + later


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_file_install_created_goes_only_while_it_holds_nothing_else(tmp_path, kind):
    block_for, _, later = KINDS[kind]
    p = tmp_path / kind
    put_block(p, block_for)
    assert strip_block(p) == "removed" and not p.exists()
    put_block(p, block_for)
    p.write_bytes(p.read_bytes() + later)
    assert strip_block(p) == "written" and p.read_bytes() == later


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_symlinks_are_written_through_and_read_only_files_refused(tmp_path, kind):
    block_for, mine, _ = KINDS[kind]
    real = tmp_path / "elsewhere" / kind
    real.parent.mkdir()
    real.write_bytes(mine)
    link = tmp_path / kind
    link.symlink_to(real)
    put_block(link, block_for)
    assert link.is_symlink() and os.readlink(link) == str(real) and b"sglang-blackwell nccl >>>" in real.read_bytes()
    strip_block(link)
    assert link.is_symlink() and real.read_bytes() == mine
    real.chmod(0o444)
    with pytest.raises(UserError, match="is read-only"):
        put_block(link, block_for)
    assert real.read_bytes() == mine and sorted(os.listdir(real.parent)) == [kind]


def _other_python(newer_than: tuple[int, int]) -> str | None:
    for c in sorted(Path.home().glob(".pyenv/versions/3.*/bin/python3.[0-9]*")) + [Path(p) for p in (
            shutil.which("python3.13"), shutil.which("python3.12")) if p]:
        if not c.name.replace("python", "").replace(".", "").isdigit() or not os.access(c, os.X_OK):
            continue
        r = subprocess.run([str(c), "-c", "import sys; print('%d %d' % sys.version_info[:2])"], capture_output=True,
                           text=True)
        if r.returncode == 0 and tuple(map(int, r.stdout.split())) >= newer_than:
            return str(c)
    return None


def test_the_target_interpreter_judges_the_syntax(tmp_path):
    """`type X = int` is Python 3.12 syntax: fine in a 3.12 environment's sitecustomize.py, whatever Python runs
    sglang-blackwell; a syntax error there is refused with its line."""
    src = b"type Alias = int\n"
    ours = python_problem(src)
    if sys.version_info >= (3, 12) or ours is None:
        pytest.skip("this interpreter knows 3.12 syntax: nothing to tell apart")
    py = _other_python((3, 12))
    if py is None:
        pytest.skip("no Python >= 3.12 on this machine")
    assert python_problem(src, py) is None and "line 1" in ours
    venv = make_venv(tmp_path / "venv", py)
    sc = site_packages(venv) / "sitecustomize.py"
    sc.write_bytes(src)
    cli("nccl", "install", "--python", str(venv), "--profile", "pcie-ll")
    assert sc.read_bytes().startswith(src) and b"sglang-blackwell nccl >>>" in sc.read_bytes()
    sc.write_bytes(b"type = \n")
    r = cli("nccl", "install", "--python", str(venv), "--profile", "none", check=False)
    assert r.returncode == 2 and "syntax error at line 1" in r.stderr and sc.read_bytes() == b"type = \n"
