"""One meaning per flag name (issue 24 item 7), pip's: `--python PATH` is an interpreter wherever it appears,
`--python-version X.Y` a CPython version. The old spellings (`--python X.Y` on build/bundle/lock, `--python-exe
PATH` on install/lock) parse to the same values with one deprecation line each; the real CLI then does the same
thing with either spelling. And every `bench` sub-verb's --help description is whole sentences."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest
from pyenvs import REPO, clean_env

from sglang_blackwell.cli import build_parser


def parse(capsys, *argv: str) -> tuple[argparse.Namespace, list[str]]:
    """The parsed arguments and the deprecation lines main() prints once the command has run."""
    a = build_parser().parse_args(list(argv))
    assert capsys.readouterr().err == "", "nothing is printed while parsing"
    return a, list(getattr(a, "deprecations", []))


def subparser(*names: str) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = build_parser()
    for n in names:
        p = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction)).choices[n]
    return p


def same(a: argparse.Namespace, b: argparse.Namespace) -> bool:
    """Equal but for the spelling the user typed (kept only to name it in errors)."""
    strip = ("python_flag", "python_version_flag", "fn", "deprecations")
    def kept(n: argparse.Namespace) -> dict:
        return {k: v for k, v in vars(n).items() if k not in strip}

    return kept(a) == kept(b)


@pytest.mark.parametrize("cmd", ["build", "bundle", "lock"])
def test_python_version_and_its_old_spelling(capsys, cmd):
    new, err = parse(capsys, cmd, "--python-version", "3.12")
    assert new.python_version == "3.12" and new.python is None and err == []
    old, err = parse(capsys, cmd, "--python", "3.12")
    assert err == [f"sglang-blackwell {cmd}: warning: --python 3.12 is deprecated here: use --python-version 3.12"]
    assert same(old, new) and old.python_version_flag == "--python"
    old, err = parse(capsys, cmd, "--python=3.12")
    assert same(old, new) and len(err) == 1


@pytest.mark.parametrize("cmd", ["build", "bundle"])
def test_python_on_a_command_without_an_interpreter_is_only_the_version(capsys, cmd):
    with pytest.raises(SystemExit) as e:
        parse(capsys, cmd, "--python", "/usr/bin/python3")
    assert e.value.code == 2
    assert "argument --python: '/usr/bin/python3' is not a CPython MAJOR.MINOR" in capsys.readouterr().err


def test_install_python_is_the_interpreter_and_python_exe_its_old_name(capsys):
    default, err = parse(capsys, "install")
    assert default.python == sys.executable and err == []
    new, err = parse(capsys, "install", "--python", "/opt/venv/bin/python")
    assert new.python == "/opt/venv/bin/python" and err == []
    old, err = parse(capsys, "install", "--python-exe", "/opt/venv/bin/python")
    assert same(old, new)
    assert err == ["sglang-blackwell install: warning: --python-exe /opt/venv/bin/python is deprecated here: use "
                   "--python /opt/venv/bin/python"]


def test_lock_takes_both_the_version_and_the_interpreter(capsys):
    new, err = parse(capsys, "lock", "--python-version", "3.12", "--python", "/usr/bin/python3.12")
    assert (new.python_version, new.python, err) == ("3.12", "/usr/bin/python3.12", [])
    old, err = parse(capsys, "lock", "--python", "3.12", "--python-exe", "/usr/bin/python3.12")
    assert same(old, new) and len(err) == 2 and all("is deprecated here" in ln for ln in err)


@pytest.mark.parametrize("cmd", [["nccl", "show"], ["doctor"], ["image", "verify"]])
def test_python_is_an_interpreter_elsewhere_whatever_it_looks_like(capsys, cmd):
    a, err = parse(capsys, *cmd, "--python", "3.12")
    assert a.python == "3.12" and err == [] and not hasattr(a, "python_version")


def cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sglang_blackwell.cli", *argv], capture_output=True, text=True,
                          env=clean_env(PYTHONPATH=str(REPO / "python")), timeout=120)


def test_both_spellings_reach_the_same_code_path(tmp_path):
    """The real CLI: lock --check (offline) answers the same; build names the spelling given when the version is
    not pinned; install reports the same interpreter problem."""
    new, old = cli("lock", "--check", "--python-version", "3.12"), cli("lock", "--check", "--python", "3.12")
    assert new.returncode == old.returncode == 0 and new.stdout == old.stdout and "Python 3.12: fresh" in new.stdout
    assert new.stderr == ""
    assert old.stderr == "sglang-blackwell lock: warning: --python 3.12 is deprecated here: use --python-version 3.12\n"
    # bad input: still the one line naming it (in the spelling given), no deprecation line beside it
    new = cli("build", "--base", "0.5.14", "--python-version", "3.99", "--out", str(tmp_path / "dist"))
    old = cli("build", "--base", "0.5.14", "--python", "3.99", "--out", str(tmp_path / "dist"))
    assert new.returncode == old.returncode == 2 and not (tmp_path / "dist").exists()
    assert new.stderr.replace("--python-version 3.99", "--python 3.99") == old.stderr and old.stderr.count("\n") == 1
    new = cli("install", "--python", str(tmp_path / "nope"), "--dry-run", "--no-deps")
    old = cli("install", "--python-exe", str(tmp_path / "nope"), "--dry-run", "--no-deps")
    assert new.returncode == old.returncode == 2 and "no such interpreter" in new.stderr
    assert new.stderr.replace("--python ", "--python-exe ") == old.stderr  # each names the spelling typed


# ---- bench sub-verbs: --help says whole sentences -----------------------------------------------------------

def test_every_bench_description_is_whole_sentences():
    """`bench table --help` was cut mid-sentence ("generated from the receipts in"): each description is its
    module docstring's first paragraph, whole (or, for a module that sets its own, that text), ending a sentence."""
    from sglang_blackwell.bench import BENCHES

    for name, (load, _) in BENCHES.items():
        desc, mod = subparser("bench", name).description or "", load()
        first = " ".join((mod.__doc__ or "").strip().split("\n\n")[0].split())
        assert desc == first or desc == (mod.__doc__ or "").strip(), (name, desc)
        assert desc.strip().rstrip(")").endswith((".", "?", "!")), f"bench {name}: {desc[-60:]!r}"
