"""`bundle --jit-archs`: FlashInfer JIT modules prebuilt with the real nvcc from the *patched* FlashInfer sources,
cached by (wheel, series, module, archs, nvcc), imported from --jit-cache, installed into flashinfer's AOT slot.
The FlashInfer here is a stand-in whose `norm` module is a small .cu file built the way flashinfer.jit builds
(nvcc, FLASHINFER_CUDA_ARCH_LIST, -lcuda via FLASHINFER_EXTRA_LDFLAGS); the real trtllm_comm takes minutes and is
not compiled in CI. The GPU's capability is simulated with an `nvidia-smi` script on PATH."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from sglang_blackwell.bases import get_base
from sglang_blackwell.bundle import BundleOptions, make_bundle
from sglang_blackwell.errors import UserError
from sglang_blackwell.fatbin import read_cuda_binary

from .bundle_fixtures import isolated_pip_env, make_world, run_install
from .conftest import sha256

NVCC = Path(os.environ.get("CUDA_HOME") or "/usr/local/cuda") / "bin" / "nvcc"
pytestmark = [pytest.mark.slow, pytest.mark.skipif(not NVCC.exists(), reason=f"no nvcc at {NVCC}")]
PY = f"{sys.version_info[0]}.{sys.version_info[1]}"


@pytest.fixture
def world(tmp_path, server, monkeypatch):
    w = make_world(tmp_path, server, lib_size=1000)
    monkeypatch.setenv("SGLANG_BLACKWELL_PATCHES", str(w.base.parent))
    monkeypatch.setenv("SGLANG_BLACKWELL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("STANDIN_BUILD_LOG", str(tmp_path / "builds.log"))
    isolated_pip_env(monkeypatch)
    return w


def _bundle(out: Path, **kw):
    msgs: list[str] = []
    opts = BundleOptions(python=PY, no_kernel=True, jit_modules=["norm"], **kw)
    return make_bundle(get_base("9.9.9"), out, opts, progress=msgs.append).manifest, msgs


def _fake_nvidia_smi(d: Path, cap: str) -> dict[str, str]:
    d.mkdir(parents=True, exist_ok=True)
    (d / "nvidia-smi").write_text(f"#!/bin/sh\necho {cap}\necho {cap}\n")
    (d / "nvidia-smi").chmod(0o755)
    return {"PATH": f"{d}:{os.environ['PATH']}"}


def test_jit_module_built_from_patched_sources_cached_and_installed(world, tmp_path, monkeypatch):
    m, msgs = _bundle(tmp_path / "b", jit_archs=["9.0a"], jit_python=sys.executable)
    (jit,) = [f for f in m["files"] if f["kind"] == "jit"]
    assert jit["path"] == "aot/norm/norm.so" and jit["archs"] == ["9.0a"] and jit["origin"] == "built"
    so = tmp_path / "b" / jit["path"]
    data = so.read_bytes()
    assert b"PATCHED-NORM" in data and b"UPSTREAM-NORM" not in data  # built from the series, not upstream
    assert read_cuda_binary(so).sass_names() == ["sm_90a"]
    assert (tmp_path / "builds.log").read_text() == "norm\n"

    # same inputs: from the cache, no nvcc run; another arch: a new build
    m2, msgs = _bundle(tmp_path / "b2", jit_archs=["9.0a"], jit_python=sys.executable)
    assert any("FlashInfer norm: cached" in s for s in msgs)
    assert next(f for f in m2["files"] if f["kind"] == "jit")["sha256"] == jit["sha256"]
    assert (tmp_path / "builds.log").read_text() == "norm\n"
    _bundle(tmp_path / "b3", jit_archs=["12.0a"], jit_python=sys.executable)
    assert (tmp_path / "builds.log").read_text() == "norm\nnorm\n"

    # install on a (simulated) SM90 GPU: the .so lands in flashinfer's AOT slot
    monkeypatch.setenv("PATH", _fake_nvidia_smi(tmp_path / "bin90", "9.0")["PATH"])
    r = run_install(tmp_path / "b", "--target", str(tmp_path / "site"))
    assert r.returncode == 0, r.stdout + r.stderr
    slot = tmp_path / "site/flashinfer/data/aot/norm/norm.so"
    assert sha256(slot) == jit["sha256"] and "FlashInfer AOT (9.0a): norm" in r.stdout
    # on a (simulated) SM120 GPU an sm_90a module would not run: not installed, FlashInfer compiles instead
    monkeypatch.setenv("PATH", _fake_nvidia_smi(tmp_path / "bin120", "12.0")["PATH"])
    r = run_install(tmp_path / "b", "--target", str(tmp_path / "site120"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "skipped: GPU capability 12.0" in r.stdout
    assert not (tmp_path / "site120/flashinfer/data/aot").exists()


def test_jit_cache_import_and_missing_builder(world, tmp_path):
    with pytest.raises(UserError, match="norm not cached and no --jit-python"):
        _bundle(tmp_path / "b", jit_archs=["9.0a"])
    assert not (tmp_path / "b").exists()
    lab = tmp_path / "fi_aot" / "norm"
    lab.mkdir(parents=True)
    (lab / "norm.so").write_bytes(b"\x7fELF prebuilt elsewhere")
    m, msgs = _bundle(tmp_path / "b", jit_archs=["9.0a"], jit_cache=tmp_path / "fi_aot")
    (jit,) = [f for f in m["files"] if f["kind"] == "jit"]
    assert jit["origin"] == "imported" and jit["sha256"] == sha256(lab / "norm.so")
    assert any("WARNING: FlashInfer norm: imported" in s for s in msgs)
    assert not (tmp_path / "builds.log").exists()
    shutil.rmtree(tmp_path / "b")
