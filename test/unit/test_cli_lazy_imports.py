"""A verb imports only what it needs (issue 25): the real CLI, in a fresh interpreter, loads a verb's modules
for `<verb> --help` and for running it, not every verb's. `check --help` loaded 59 of the package's modules
(both bench harnesses, qualify's plan and steps, box's topology) because the parser imported every verb's
arguments; now the arguments of qualify, bench and each benchmark come from their modules only when that verb is
parsed."""

from __future__ import annotations

import subprocess
import sys

import pytest
from pyenvs import REPO, clean_env

# cli.main(argv) as the entry point runs it, its output swallowed; then every module of the package it loaded
WRAPPER = """\
import contextlib, io, sys
from sglang_blackwell import cli
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    try:
        rc = cli.main(sys.argv[1:])
    except SystemExit as e:
        rc = e.code
print(rc)
print("\\n".join(sorted(m for m in sys.modules if m.startswith("sglang_blackwell."))))
"""
OTHER_VERBS = ("sglang_blackwell.bench", "sglang_blackwell.qualify", "sglang_blackwell.box")


def loaded(*argv: str) -> set[str]:
    """The sglang_blackwell.* modules `sglang-blackwell ARGV` loads (it must exit 0)."""
    r = subprocess.run([sys.executable, "-c", WRAPPER, *argv], capture_output=True, text=True,
                       env=clean_env(PYTHONPATH=str(REPO / "python")), timeout=120)
    assert r.returncode == 0, r.stderr
    rc, *mods = r.stdout.split()
    assert rc == "0", f"sglang-blackwell {' '.join(argv)} exited {rc}"
    return set(mods)


def under(mods: set[str], *packages: str) -> set[str]:
    return {m for m in mods if m in packages or m.startswith(tuple(f"{p}." for p in packages))}


@pytest.mark.parametrize("argv", [["check", "--help"], ["--help"], ["build", "--help"], ["report", "--help"]])
def test_a_verb_without_bench_qualify_or_box_loads_none_of_them(argv):
    mods = loaded(*argv)
    assert "sglang_blackwell.cli" in mods
    assert under(mods, *OTHER_VERBS) == set(), f"{' '.join(argv)} loads what it does not need"


def test_bench_help_lists_the_benchmarks_without_loading_them():
    mods = loaded("bench", "--help")
    assert "sglang_blackwell.bench" in mods
    assert under(mods, "sglang_blackwell.bench") == {"sglang_blackwell.bench"}
    assert under(mods, "sglang_blackwell.qualify") == set()


def test_a_benchmark_loads_its_own_harness_and_no_other():
    mods = loaded("bench", "eagle3", "--help")
    assert "sglang_blackwell.bench.eagle3.harness" in mods
    assert under(mods, "sglang_blackwell.bench.allreduce", "sglang_blackwell.bench.setup",
                 "sglang_blackwell.bench.readme_blocks", "sglang_blackwell.qualify") == set()
    mods = loaded("bench", "allreduce", "--help")
    assert "sglang_blackwell.bench.allreduce.harness" in mods
    assert under(mods, "sglang_blackwell.bench.eagle3", "sglang_blackwell.bench.setup") == set()


def test_qualify_loads_its_arguments_module_and_no_benchmark():
    mods = loaded("qualify", "--help")
    assert "sglang_blackwell.qualify.run" in mods
    assert under(mods, "sglang_blackwell.bench") == set()
