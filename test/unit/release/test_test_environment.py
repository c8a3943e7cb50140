"""The test environment is declared, not inherited from the machine's pip configuration: torch is PyTorch's CPU
build because test/constraints.txt pins its +cpu label (PyPI cannot satisfy it) and the Makefile names its one
source; ruff is pinned, and the ruff that lints is that one; every third-party module the tests import is a
declared requirement."""

from __future__ import annotations

import ast
import importlib.metadata as md
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from sglang_blackwell import tomlio

REPO = Path(__file__).resolve().parents[3]
TEST = REPO / "test"
PYPROJECT = tomlio.loads((REPO / "pyproject.toml").read_text())
# built by this repository's tests from the pinned upstream wheels + patches (test trees), never pip-installed
BUILT_TREES = {"sglang", "flashinfer"}


def requirement_lines(path: Path) -> list[Requirement]:
    return [Requirement(ln.split("#")[0].strip()) for ln in path.read_text().splitlines()
            if ln.split("#")[0].strip()]


def torch_pin() -> Requirement:
    (pin,) = [r for r in requirement_lines(TEST / "constraints.txt") if r.name == "torch"]
    return pin


def declared() -> set[str]:
    proj = PYPROJECT["project"]
    reqs = [Requirement(r) for r in proj["dependencies"]]
    reqs += [Requirement(r) for extra in proj["optional-dependencies"].values() for r in extra]
    reqs += requirement_lines(TEST / "requirements-upstream.txt")
    return {canonicalize_name(r.name) for r in reqs}


def test_torch_is_the_pinned_cpu_build():
    import torch

    (spec,) = torch_pin().specifier
    assert spec.operator == "==" and spec.version.endswith("+cpu")
    assert torch.__version__ == spec.version and torch.version.cuda is None


def make_dry_run(tmp_path: Path, *args: str) -> list[str]:
    venv = tmp_path / "venv"
    r = subprocess.run(["make", "-n", "-C", str(REPO), f"VENV={venv}", *args, f"{venv}/.test-deps"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return [ln for ln in r.stdout.splitlines() if "pip install" in ln]


def test_the_makefile_names_the_one_torch_source(tmp_path):
    (torch_line,) = [ln for ln in make_dry_run(tmp_path) if re.search(r"\btorch\b", ln)]
    assert torch_line.endswith("-c test/constraints.txt torch")
    here = Path("/opt/wheels")
    if any(here.glob("torch-*+cpu-*.whl")):  # this machine kind's copy of PyTorch's CPU wheel
        assert f"--find-links {here} " in torch_line
    (elsewhere,) = [ln for ln in make_dry_run(tmp_path, f"TORCH_CPU_WHEELS={tmp_path}/none")
                    if re.search(r"\btorch\b", ln)]
    assert "--extra-index-url https://download.pytorch.org/whl/cpu " in elsewhere
    others = [ln for ln in make_dry_run(tmp_path) if ln != torch_line]
    assert others and not any("--find-links" in ln or "index-url" in ln for ln in others)
    test_deps = [ln for ln in others if "[test" in ln or "-r test/" in ln]
    assert len(test_deps) == 2 and all("-c test/constraints.txt" in ln for ln in test_deps)


@pytest.mark.network
def test_pypi_alone_cannot_satisfy_the_torch_pin(tmp_path):
    """Without the named source (the machine's pip configuration removed too), pip finds no torch that the
    constraint admits: PyPI's Linux torch is a CUDA build, so no CUDA torch can slip in."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") or k in ("PIP_CERT", "PIP_DEFAULT_TIMEOUT")}
    env["PIP_CONFIG_FILE"] = os.devnull
    r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(tmp_path), "-c",
                        str(TEST / "constraints.txt"), "torch"], capture_output=True, text=True, env=env, timeout=300)
    out = r.stdout + r.stderr
    if "Network is unreachable" in out or "Name or service not known" in out:
        pytest.skip("PyPI is unreachable")
    assert r.returncode != 0 and f"torch{torch_pin().specifier}" in out, out
    assert not list(tmp_path.iterdir())


def test_ruff_is_pinned_and_is_the_one_that_lints():
    (ruff,) = [Requirement(r) for r in PYPROJECT["project"]["optional-dependencies"]["test"]
               if Requirement(r).name == "ruff"]
    (spec,) = ruff.specifier
    assert spec.operator == "=="
    assert md.version("ruff") == spec.version


def local_modules() -> set[str]:
    """Modules of this repository the tests import by name: under test/, and the scripts under benchmark/ that
    tests put on sys.path (the lab generator and its tokenizer)."""
    here = {p.stem for p in TEST.rglob("*.py")} | {p.name for p in TEST.rglob("*") if p.is_dir()}
    return here | {p.stem for p in (REPO / "benchmark").rglob("*.py")}


def test_every_third_party_import_of_the_tests_is_declared():
    """Each top-level module the tests import is the standard library's, a file or package under test/, a tree
    the tests build (sglang, flashinfer), or a distribution pyproject.toml or test/requirements-upstream.txt
    declares (module -> distribution as installed here)."""
    dist_of = md.packages_distributions()
    local, want = local_modules(), declared()
    undeclared = {}
    for f in sorted(TEST.rglob("*.py")):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for top in {n.split(".")[0] for n in names}:
                if top in sys.stdlib_module_names or top in local or top in BUILT_TREES or top == "sglang_blackwell":
                    continue
                dists = {canonicalize_name(d) for d in dist_of.get(top, [])}
                if not dists & want:
                    undeclared.setdefault(top, (sorted(dists), str(f.relative_to(REPO))))
    assert undeclared == {}, f"module: (installed distribution, first importer): {undeclared}"
