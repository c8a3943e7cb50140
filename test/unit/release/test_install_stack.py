"""docker/install-stack.sh, the image's one install script, run for real in a venv on this CPU machine: the same
steps the Dockerfile's builder stage runs, with the CUDA wheels skipped (SGLANG_BLACKWELL_SKIP_CUDA_WHEELS=1;
torch +cu130 and the kernel wheel are gigabytes of GPU code, and the CPU test suite must not pull a CUDA torch).
The venv is made from Debian's python3 where there is one (as in the Ubuntu-based image, whose system
sitecustomize makes the NCCL block a .pth hook); the tool is installed from a copy of the docker build context.
The FlashInfer AOT step builds `norm` for 12.0a with the test environment's interpreter (shared cache with
test_aot.py)."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

TEST_ROOT = Path(__file__).resolve().parents[2]
if str(TEST_ROOT) not in sys.path:
    sys.path.insert(0, str(TEST_ROOT))

from pyenvs import PCIE_LL, clean_env, debian_python, fresh_env  # noqa: E402

from sglang_blackwell.artifacts import aot  # noqa: E402
from sglang_blackwell.artifacts.fatbin import read_cuda_binary  # noqa: E402
from sglang_blackwell.artifacts.install import hashes_path, pip_commands  # noqa: E402
from sglang_blackwell.artifacts.lock import load_lock  # noqa: E402
from sglang_blackwell.patchset.bases import get_base  # noqa: E402
from support.cuda_headers import extra_include_dirs  # noqa: E402
from support.docker_context import copy_context  # noqa: E402
from support.wheel_check import installer_problems  # noqa: E402

REPO = TEST_ROOT.parent
SCRIPT = REPO / "docker" / "install-stack.sh"


def run_script(tmp_path: Path, timeout: int = 1800, **env: str) -> subprocess.CompletedProcess:
    # PIP_NO_COMPILE: pip skips writing .pyc for the ~5,800 files of our two wheels (installed twice: before and
    # after the AOT build); about a minute here, and nothing the test checks depends on bytecode
    e = clean_env(SRC=str(tmp_path / "src"), VENV=str(tmp_path / "venv"), DIST=str(tmp_path / "dist"),
                  PIP_NO_COMPILE="1", **env)
    return subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, env=e, timeout=timeout)


def base_python() -> str:
    py, _ = debian_python()
    return str(py or sys.executable)


@pytest.fixture
def src(tmp_path) -> Path:
    return copy_context(REPO, tmp_path / "src")


def test_context_holds_what_the_builder_needs(src):
    for rel in ("pyproject.toml", "README.md", "python/sglang_blackwell/cli.py", "patches/0.5.9/base.toml",
                "docker/install-stack.sh"):
        assert (src / rel).is_file(), rel
    assert not (src / ".venv").exists() and not (src / ".git").exists()


def test_auto_profile_is_refused_and_nothing_is_created(tmp_path, src):
    r = run_script(tmp_path, NCCL_PROFILE="auto")
    assert r.returncode == 2
    assert "NCCL_PROFILE=auto resolves against this machine's GPUs and an image build sees none" in r.stderr
    assert not (tmp_path / "venv").exists()


def test_an_existing_venv_is_never_touched(tmp_path, src):
    (tmp_path / "venv").mkdir()
    (tmp_path / "venv" / "keep").write_text("mine")
    r = run_script(tmp_path)
    assert r.returncode == 2 and f"VENV={tmp_path / 'venv'} exists; refusing to install over it" in r.stderr
    assert (tmp_path / "venv" / "keep").read_text() == "mine"


@pytest.mark.slow
@pytest.mark.network
def test_a_failing_step_removes_the_venv(tmp_path, src):
    r = run_script(tmp_path, BASE="7.7", PYTHON=base_python(), timeout=600)
    assert r.returncode != 0
    assert "unknown base '7.7'" in r.stderr and "removed" in r.stderr
    assert not (tmp_path / "venv").exists()


@pytest.mark.slow
@pytest.mark.network
def test_install_stack_in_a_venv(tmp_path, src):
    try:
        aot.find_cuda_home()
    except Exception as e:  # the AOT step needs nvcc
        pytest.skip(f"no CUDA toolkit: {e}")
    includes = os.pathsep.join(map(str, extra_include_dirs()))
    r = run_script(tmp_path, PYTHON=base_python(), CUDA_ARCHS="12.0a", AOT_MODULES="norm",
                   AOT_PYTHON=sys.executable, NCCL_PROFILE="pcie-ll", SGLANG_BLACKWELL_SKIP_CUDA_WHEELS="1",
                   SGLANG_BLACKWELL_AOT_INCLUDE=includes)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    venv, dist = tmp_path / "venv", tmp_path / "dist"
    py = venv / "bin" / "python"
    base = get_base(None)
    assert f"install-stack: done: {venv} (base {base.name})" in r.stdout

    # the tool and our wheels, from the manifest the script's build wrote
    ver = subprocess.run([str(venv / "bin" / "sglang-blackwell"), "--version"], capture_output=True, text=True)
    assert ver.stdout.startswith("sglang-blackwell ")
    manifest = json.loads((dist / f"manifest-{base.name}.json").read_text())
    got = json.loads(subprocess.run(
        [str(py), "-c", "import importlib.metadata as m, json; print(json.dumps({d: m.version(d) for d in "
                        "('sglang', 'flashinfer-python')}))"], capture_output=True, text=True, check=True).stdout)
    assert got == {p["distribution"]: p["local_version"] for p in manifest["packages"]}

    # in full mode the script installs exactly what base.toml says (the command it recorded)
    wheels = [dist / w["output"]["filename"] for p in manifest["packages"] for w in p["wheels"]]
    assert [installer_problems(w) for w in wheels] == [[] for _ in wheels]  # an independent RECORD reader
    pyver = subprocess.run([str(py), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                           capture_output=True, text=True, check=True).stdout.strip()
    lock = load_lock(base, pyver)
    got = [shlex.split(ln) for ln in (dist / "install-command.txt").read_text().splitlines()]
    used = Path(got[0][got[0].index("-r") + 1])  # the image reads the lock shipped inside our package
    assert used.parts[-5:] == ("_data", "patches", base.name, "locks", lock.path.name), used
    assert used.read_bytes() == lock.path.read_bytes()
    lock.path = used
    expected = pip_commands(lock, wheels, python_exe=str(py), hashes=hashes_path(base, dist, pyver))
    assert got == expected and "--require-hashes" in expected[0]
    torch = base.runtime_artifact("torch")
    if any(o.name == "torch" for o in lock.outside):  # 0.5.9: torch +cu130 from PyTorch's index, after the lock
        assert torch.requirement in expected[-1] and expected[-1][expected[-1].index("--extra-index-url") + 1] == \
            torch.index_url
    else:  # 0.5.14 (the default), 0.5.23: PyPI's CUDA 13 torch, hash-pinned in the one locked command
        assert len(expected) == 1 and f"torch=={torch.version}" in {e.requirement for e in lock.entries}

    # FlashInfer's AOT slot in the installed package holds sm_120a SASS
    fi = subprocess.run([str(py), "-c", "import importlib.metadata as m; "
                                        "print(m.distribution('flashinfer-python').locate_file(''))"],
                        capture_output=True, text=True, check=True).stdout.strip()
    assert "sm_120a" in read_cuda_binary(Path(fi) / "flashinfer/data/aot/norm/norm.so").sass_names()

    # the NCCL profile reaches a fresh interpreter of the environment
    env = fresh_env(py)
    assert {k: env.get(k) for k in PCIE_LL} == PCIE_LL

    # the labels the image gets: base versions, series hashes, the manifest's sha256
    labels = dict(line.split("=", 1) for line in (dist / "labels.txt").read_text().splitlines())
    ns = "io.github.sglang-blackwell"
    assert labels[f"{ns}.manifest-sha256"] == hashlib.sha256(
        (dist / f"manifest-{base.name}.json").read_bytes()).hexdigest()
    for p in manifest["packages"]:
        assert labels[f"{ns}.{p['distribution']}.version"] == p["local_version"]
        assert labels[f"{ns}.{p['distribution']}.series-sha256"] == p["series_sha256"]
    assert labels[f"{ns}.flashinfer-python.aot"] == "norm@12.0a"
    assert labels[f"{ns}.runtime.torch"] == torch.version

    # and `image verify` notices when the environment stops matching the manifest
    (Path(fi) / "flashinfer/data/aot/norm/norm.so").unlink()
    subprocess.run([str(venv / "bin" / "sglang-blackwell"), "nccl", "uninstall", "--python", str(py)], check=True,
                   capture_output=True)
    v = subprocess.run([str(venv / "bin" / "sglang-blackwell"), "image", "verify", "--base", base.name, "--dist",
                        str(dist), "--python", str(py), "--nccl-profile", "pcie-ll", "--skip-cuda-wheels"],
                       capture_output=True, text=True)
    assert v.returncode == 1
    assert f"AOT module norm missing at {Path(fi) / 'flashinfer/data/aot/norm/norm.so'}" in v.stderr
    assert "NCCL: no managed startup block active" in v.stderr


def test_runtime_pins_accept_the_local_build_pip_prefers():
    from sglang_blackwell.release.image import _satisfies

    assert _satisfies("2.11.0+cu130", "2.11.0")  # torch==2.11.0 + the cu130 index
    assert _satisfies("2.9.1+cu130", "2.9.1+cu130")
    assert not _satisfies("2.9.1", "2.9.1+cu130") and not _satisfies("2.9.1+cu128", "2.9.1+cu130")
    assert not _satisfies("2.11.1", "2.11.0")
