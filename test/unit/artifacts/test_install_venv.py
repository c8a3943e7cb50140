"""The built wheels install into a fresh venv (pip --no-deps) and report their local version; `install
--upstream` rolls back; a PEP 503 index of the wheels works with pip; the full install is the base's lock with
--require-hashes, then the CUDA 13 runtime pins the index cannot serve."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_blackwell.artifacts.build import build
from sglang_blackwell.artifacts.index import build_index
from sglang_blackwell.artifacts.install import dist_state, install
from sglang_blackwell.patchset.bases import get_base, load_base

pytestmark = [pytest.mark.slow, pytest.mark.network]

# our wheels' local label (sm120.N): bumped whenever the series changes, so read, never typed
LABEL = load_base(Path(__file__).resolve().parents[3] / "patches" / "0.5.9").local_label
VERSIONS = ("import importlib.metadata as m, json; "
            "print(json.dumps({d: m.version(d) for d in ('sglang', 'flashinfer-python')}))")


def _versions(py):
    r = subprocess.run([str(py), "-c", VERSIONS], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def ours(base) -> dict[str, str]:
    """Our wheels' versions: the label comes from base.toml (bumped when the series changes, LABEL.lock)."""
    return {"sglang": f"0.5.9+{base.local_label}", "flashinfer-python": f"0.6.4+{base.local_label}"}


@pytest.fixture(scope="module")
def real_build(tmp_path_factory):
    os.environ.pop("SGLANG_BLACKWELL_PATCHES", None)
    d = tmp_path_factory.mktemp("dist")
    base = get_base("0.5.9")
    build(base, d)
    return base, d


@pytest.fixture(autouse=True)
def no_bytecode(monkeypatch):
    """pip installs without compiling bytecode (its --no-compile, read from PIP_COMPILE=0 by the pip that
    `install` runs too): no test here is about .pyc files, and compiling sglang's ~1400 modules took ~4 s of each
    of these installs on 2 cores (0.8 s without)."""
    monkeypatch.setenv("PIP_COMPILE", "0")


@pytest.fixture
def fresh_venv(tmp_path, pip_venv):
    return pip_venv(tmp_path / "venv")  # a venv with pip, as venv.EnvBuilder(with_pip=True) makes it


def test_wheels_install_and_report_local_version_then_roll_back(real_build, fresh_venv):
    base, dist = real_build
    (cmd,) = install(base, dist, python_exe=str(fresh_venv), no_deps=True)
    assert "--no-deps" in cmd and "--require-hashes" not in cmd
    assert _versions(fresh_venv) == {"sglang": f"0.5.9+{LABEL}", "flashinfer-python": f"0.6.4+{LABEL}"}
    marker = subprocess.run(
        [str(fresh_venv), "-c", "import importlib.metadata as m; print(m.distribution('sglang')"
                                ".read_text('sglang_blackwell.json'))"], capture_output=True, text=True).stdout
    assert json.loads(marker)["base"] == "0.5.9"
    install(base, dist, python_exe=str(fresh_venv), upstream=True)
    assert _versions(fresh_venv) == {"sglang": "0.5.9", "flashinfer-python": "0.6.4"}


def test_pep503_index_serves_the_wheels_to_pip(real_build, fresh_venv, tmp_path):
    base, dist = real_build
    simple = build_index(sorted(dist.glob("*.whl")), tmp_path / "index")
    r = subprocess.run([str(fresh_venv), "-m", "pip", "install", "-q", "--no-deps", "--no-cache-dir", "--no-compile",
                        "--index-url", f"file://{simple}", f"sglang==0.5.9+{LABEL}", "flashinfer-python"],
                       capture_output=True, text=True, env={**os.environ, "PIP_CONFIG_FILE": os.devnull})
    assert r.returncode == 0, r.stderr
    assert _versions(fresh_venv) == {"sglang": f"0.5.9+{LABEL}", "flashinfer-python": f"0.6.4+{LABEL}"}


def test_full_install_is_the_lock_with_require_hashes_then_the_cuda13_runtime(real_build):
    base, dist = real_build
    py = f"{sys.version_info[0]}.{sys.version_info[1]}"
    hashed, outside = install(base, dist, python_exe=sys.executable, dry_run=True)
    lock = base.dir / "locks" / f"py{py.replace('.', '')}.txt"
    hashes = dist / f"hashes-0.5.9-py{py.replace('.', '')}.txt"
    assert hashed == [sys.executable, "-m", "pip", "install", "--require-hashes", "--no-deps", "-r", str(lock),
                      "-r", str(hashes)]
    assert not hashes.exists(), "a dry run writes nothing (install writes the hashes file first)"
    ours = dist_state(base, dist, py).wheels  # what the hashes file will list
    assert sorted(p.name for p in ours) == [f"flashinfer_python-0.6.4+{LABEL}-py3-none-any.whl",
                                            f"sglang-0.5.9+{LABEL}-py3-none-any.whl"]
    # the pins the index cannot serve come after the hashed set, from their own index
    assert "torch==2.9.1+cu130" in outside and "torchaudio==2.9.1+cu130" in outside
    assert any(c.startswith("sgl-kernel @ https://github.com/sgl-project/whl/releases/download/v0.3.21/")
               for c in outside)
    assert outside[outside.index("--extra-index-url") + 1] == "https://download.pytorch.org/whl/cu130"
