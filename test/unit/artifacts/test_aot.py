"""Prebuilt FlashInfer JIT modules (aot.py), compiled with nvcc on a CPU machine. No GPU is used anywhere here.

`build --aot`: into the patched flashinfer wheel's AOT slots. The slow test builds the real `norm` for 12.0a
(about 1-2 min on 2 cores, then cached), checks the wheel holds sm_120a SASS (fatbin.py) and that FlashInfer's own
loader takes the slot instead of compiling. The full trtllm_comm build (4-5 min) is a release-time job
(release.yml).

`bundle --jit-archs`: the same modules carried as aot/<name>/<name>.so, built with a separate interpreter
(--jit-python) from the *patched* sources, cached, imported from --jit-cache (marked `imported`, SASS-checked) and
installed into flashinfer's AOT slot by install.sh. The FlashInfer there is a stand-in whose `norm` module is a
small .cu file built the way flashinfer.jit builds (nvcc, FLASHINFER_CUDA_ARCH_LIST, -lcuda against a libcuda stub
generated from cuda.h where the toolkit has none); the GPU's capability is simulated with an `nvidia-smi` script
on PATH."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from sglang_blackwell.artifacts import aot
from sglang_blackwell.artifacts.aot import AotRequest, build_aot_modules, find_toolchain, parse_archs, parse_modules
from sglang_blackwell.artifacts.build import build
from sglang_blackwell.artifacts.bundle import BundleOptions, make_bundle
from sglang_blackwell.artifacts.fatbin import read_cuda_binary
from sglang_blackwell.artifacts.wheel import add_files, check_record
from sglang_blackwell.errors import UserError
from sglang_blackwell.patchset.bases import get_base
from support.wheel_world import make_wheel, sha256

from .bundle_fixtures import NORM_CU, isolated_pip_env, make_world, run_install

TEST_ROOT = Path(__file__).resolve().parents[2]
if str(TEST_ROOT) not in sys.path:
    sys.path.insert(0, str(TEST_ROOT))

from pyenvs import make_venv  # noqa: E402

from support.cuda_headers import extra_include_dirs  # noqa: E402
from support.wheel_check import installer_problems  # noqa: E402

PY = f"{sys.version_info[0]}.{sys.version_info[1]}"
try:
    aot.find_cuda_home()
    NVCC_WHY = ""
except UserError as e:
    NVCC_WHY = str(e)
needs_nvcc = pytest.mark.skipif(bool(NVCC_WHY), reason=f"no CUDA toolkit: {NVCC_WHY}")


def test_arch_and_module_lists_are_validated():
    assert parse_archs("12.0a,9.0a") == ("12.0a", "9.0a")
    assert parse_archs("12.0a 12.0a") == ("12.0a",)
    for bad in ("sm_120a", "12", "12.0", ""):
        with pytest.raises(UserError, match="--aot"):
            parse_archs(bad)
    assert parse_modules("norm") == ("norm",)
    with pytest.raises(UserError, match="unknown module.*'attention'.*known: trtllm_comm, norm"):
        parse_modules("norm,attention")
    # bundle's flags are named in its errors
    with pytest.raises(UserError, match=r"^--jit-archs: '9\.0': .*use 9\.0a"):
        parse_archs("9.0", "--jit-archs")
    with pytest.raises(UserError, match="^--jit-modules: unknown"):
        parse_modules("attention", "--jit-modules")


@needs_nvcc
def test_build_interpreter_without_torch_is_named(tmp_path):
    bare = make_venv(tmp_path / "bare")
    with pytest.raises(UserError, match=rf"{bare}.*cannot import torch.*tvm_ffi.*--aot-python, bundle --jit-python"):
        find_toolchain(str(bare))


@needs_nvcc
def test_toolkit_without_the_cublas_headers_is_named(tmp_path, monkeypatch):
    """A CUDA home with the real nvcc but no library headers (as a pip-installed nvcc has)."""
    home = tmp_path / "cuda"
    (home / "bin").mkdir(parents=True)
    (home / "include").mkdir()
    real = aot.find_cuda_home()
    (home / "bin" / "nvcc").symlink_to(real / "bin" / "nvcc")
    (home / "include" / "cuda_runtime.h").symlink_to(real / "include" / "cuda_runtime.h")
    monkeypatch.delenv(aot.INCLUDE_ENV, raising=False)
    with pytest.raises(UserError, match=r"cublasLt\.h not found.*nvidia-cublas nvidia-curand"):
        find_toolchain(sys.executable, home)


def test_add_files_keeps_the_wheel_valid(tmp_path):
    whl = make_wheel(tmp_path / "flashinfer_python-0.0.1+sm120.1-py3-none-any.whl", "flashinfer_python",
                     "0.0.1+sm120.1", {"flashinfer/__init__.py": b""})
    # a wheel of ours carries the marker; add it the way build does
    add_marker = {"flashinfer_python-0.0.1+sm120.1.dist-info/sglang_blackwell.json": b'{"base": "x"}\n'}
    with zipfile.ZipFile(whl, "a") as z:
        for n, d in add_marker.items():
            z.writestr(n, d)
    with pytest.raises(UserError, match="refusing to add"):
        add_files(whl, {"flashinfer_python-0.0.1+sm120.1.dist-info/RECORD": b""}, {})
    add_files(whl, {"flashinfer/data/aot/norm/norm.so": b"\x7fELF"}, {"aot": {"archs": ["12.0a"]}}, mode=0o755)
    assert check_record(whl) == []
    assert installer_problems(whl) == []  # an independent reader agrees
    with zipfile.ZipFile(whl) as z:
        info = z.getinfo("flashinfer/data/aot/norm/norm.so")
        marker = json.loads(z.read("flashinfer_python-0.0.1+sm120.1.dist-info/sglang_blackwell.json"))
    assert (info.external_attr >> 16) & 0o777 == 0o755
    assert marker == {"base": "x", "aot": {"archs": ["12.0a"]}}


@needs_nvcc
@pytest.mark.slow
@pytest.mark.network
def test_unpatched_trtllm_comm_is_refused_for_sm120(tmp_path, tree_factory):
    """Without P1, FlashInfer 0.6.4's trtllm_comm spec refuses SM12x: the error says so, nothing is cached."""
    tree = tree_factory.tree("0.5.9", "flashinfer", 0)  # the run's upstream tree (read-only: the build reads it)
    with pytest.raises(UserError, match=r"trtllm_comm for 12\.0a failed to build.*No supported CUDA architectures"):
        build_aot_modules(tree, ["trtllm_comm"], "12.0a", tmp_path / "cache", python=sys.executable,
                          include_dirs=extra_include_dirs())
    assert not list((tmp_path / "cache" / "aot").rglob("*"))  # nothing cached (the libcuda stub is, in stubs/)


@needs_nvcc
@pytest.mark.slow
@pytest.mark.network
def test_patched_flashinfer_wheel_built_with_aot_holds_sm120a_modules(tmp_path):
    base = get_base("0.5.9")
    req = AotRequest(archs=("12.0a",), modules=("norm",), python=sys.executable,
                     include_dirs=tuple(map(str, extra_include_dirs())))
    built, manifest = build(base, tmp_path / "dist", aot=req)
    fi = next(w for w in built if w.package == "flashinfer")
    assert check_record(fi.path) == []
    assert installer_problems(fi.path) == []  # an independent reader agrees
    unpacked = tmp_path / "site"
    with zipfile.ZipFile(fi.path) as z:
        z.extractall(unpacked)
        marker = json.loads(z.read(f"flashinfer_python-0.6.4+{base.local_label}.dist-info/sglang_blackwell.json"))
    so = unpacked / "flashinfer/data/aot/norm/norm.so"
    assert "sm_120a" in read_cuda_binary(so).sass_names()
    assert marker["aot"]["archs"] == ["12.0a"] and marker["aot"]["modules"]["norm"]["sass"] == ["sm_120a"]
    entry = json.loads(manifest.read_text())["packages"][1]["wheels"][0]
    assert entry["aot"]["modules"]["norm"]["path"] == "flashinfer/data/aot/norm/norm.so"
    assert entry["output"]["sha256"] == fi.sha256

    # FlashInfer's own loader takes the slot (no compile: FLASHINFER_DISABLE_JIT makes any compile an error)
    # and tvm-ffi loads the module with its functions (no GPU needed to load it)
    probe = ("from flashinfer.jit.norm import gen_norm_module; s = gen_norm_module(); "
             "m = s.build_and_load(); print(s.is_aot, s.get_library_path(), m.get_function('rmsnorm') is not None)")
    cuda_lib = str(aot.find_cuda_home() / "lib64")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLASHINFER_")}
    env.update(PYTHONPATH=str(unpacked), FLASHINFER_CUDA_ARCH_LIST="12.0a", FLASHINFER_DISABLE_JIT="1",
               FLASHINFER_WORKSPACE_BASE=str(tmp_path / "ws"),
               LD_LIBRARY_PATH=os.pathsep.join(filter(None, [cuda_lib, os.environ.get("LD_LIBRARY_PATH")])))
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["True", str(so), "True"]

    # the second build is a cache hit and gives the same bytes (a second real build of base 0.5.9, ~4 s: the
    # cache hit is what is tested; the first build's nvcc run of norm for sm_120a, 1-2 min cold, is cached per
    # user, so only a cold cache pays it)
    built2, _ = build(base, tmp_path / "dist2", aot=req)
    assert next(w for w in built2 if w.package == "flashinfer").sha256 == fi.sha256


@needs_nvcc
def test_libcuda_stub_is_generated_from_cuda_h_and_cached(tmp_path):
    """Where the toolkit has no lib64/stubs/libcuda.so (a pip-installed nvcc), -lcuda links against a stub that
    exports the driver API of the toolkit's cuda.h under the soname of the driver's library."""
    d = aot.stub_libcuda_dir(aot.find_cuda_home(), tmp_path)
    so = d / "libcuda.so"
    assert d.parent == tmp_path / "stubs" and so.is_file()
    dyn = subprocess.run(["readelf", "-d", "--dyn-syms", str(so)], capture_output=True, text=True, check=True).stdout
    assert "Library soname: [libcuda.so.1]" in dyn
    assert " cuDriverGetVersion\n" in dyn and " cuMemAlloc_v2\n" in dyn  # the names cuda.h maps calls to
    mtime = so.stat().st_mtime_ns
    assert aot.stub_libcuda_dir(aot.find_cuda_home(), tmp_path) == d and so.stat().st_mtime_ns == mtime


@pytest.fixture
def world(tmp_path, server, monkeypatch):
    w = make_world(tmp_path, server, lib_size=1000)
    monkeypatch.setenv("SGLANG_BLACKWELL_PATCHES", str(w.base.parent))
    monkeypatch.setenv("SGLANG_BLACKWELL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("STANDIN_BUILD_LOG", str(tmp_path / "builds.log"))
    # the stand-in includes no cuBLAS / cuRAND header, but the toolchain check wants them somewhere
    headers = tmp_path / "headers"
    headers.mkdir()
    for h in aot.REQUIRED_HEADERS:
        (headers / h).write_text("")
    monkeypatch.setenv(aot.INCLUDE_ENV, str(headers))
    isolated_pip_env(monkeypatch)
    return w


def _bundle(out: Path, **kw):
    msgs: list[str] = []
    opts = BundleOptions(python=PY, no_kernel=True, jit_modules=["norm"], **kw)
    return make_bundle(get_base("9.9.9"), out, opts, progress=msgs.append).manifest, msgs


def _jit(manifest: dict) -> dict:
    (jit,) = [f for f in manifest["files"] if f["kind"] == "jit"]
    return jit


def _fake_nvidia_smi(d: Path, cap: str) -> dict[str, str]:
    d.mkdir(parents=True, exist_ok=True)
    (d / "nvidia-smi").write_text(f"#!/bin/sh\necho {cap}\necho {cap}\n")
    (d / "nvidia-smi").chmod(0o755)
    return {"PATH": f"{d}:{os.environ['PATH']}"}


def _build_venv(path: Path) -> Path:
    """A build interpreter other than this one (--jit-python): its own venv, seeing this environment's packages
    (torch, apache-tvm-ffi, ninja, numpy) through a .pth file."""
    py = make_venv(path)
    site = next((path / "lib").glob("python3*/site-packages"))
    mine = subprocess.run([sys.executable, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    (site / "this-env.pth").write_text(mine + "\n")
    return py


def _nvcc_module(so: Path, arch: str, tmp: Path) -> Path:
    """The stand-in's norm module compiled elsewhere, for one arch only."""
    (tmp / "norm.cu").write_bytes(NORM_CU)
    so.parent.mkdir(parents=True, exist_ok=True)
    num = arch.replace(".", "")
    subprocess.run([str(aot.find_cuda_home() / "bin" / "nvcc"), "-shared", "-Xcompiler", "-fPIC",
                    f"-gencode=arch=compute_{num},code=sm_{num}", "-o", str(so), str(tmp / "norm.cu")], check=True)
    return so


@needs_nvcc
@pytest.mark.slow
def test_bundle_jit_module_built_from_patched_sources_cached_and_installed(world, tmp_path, monkeypatch):
    # slow on purpose (~10 s): three real nvcc runs (norm for 9.0a and for 12.0a by the bundle, one for the import
    # directory), each of which an assertion below counts (builds.log) or reads the SASS of
    jit_python = str(_build_venv(tmp_path / "jit-venv"))
    m, msgs = _bundle(tmp_path / "b", jit_archs=["9.0a"], jit_python=jit_python)
    jit = _jit(m)
    assert jit["path"] == "aot/norm/norm.so" and jit["archs"] == ["9.0a"] and jit["origin"] == "built"
    assert jit["slot"] == "flashinfer/data/aot/norm/norm.so" and jit["sass"] == ["sm_90a"] and jit["key"]
    assert any("AOT compiling norm for 9.0a" in s and jit_python in s for s in msgs)
    so = tmp_path / "b" / jit["path"]
    data = so.read_bytes()
    assert b"PATCHED-NORM" in data and b"UPSTREAM-NORM" not in data  # built from the series, not upstream
    assert read_cuda_binary(so).sass_names() == ["sm_90a"]
    assert (tmp_path / "builds.log").read_text() == "norm\n"
    assert m["jit"] == {"archs": ["9.0a"], "modules": ["norm"]}

    # same inputs: from the cache, no nvcc run, even with an import directory at hand (the cache wins)
    other = _nvcc_module(tmp_path / "elsewhere" / "norm" / "norm.so", "9.0a", tmp_path)
    m2, msgs = _bundle(tmp_path / "b2", jit_archs=["9.0a"], jit_python=jit_python, jit_cache=tmp_path / "elsewhere")
    assert any("AOT norm for 9.0a: cached" in s for s in msgs)
    assert _jit(m2)["origin"] == "cached" and _jit(m2)["sha256"] == jit["sha256"] and _jit(m2)["key"] == jit["key"]
    assert (tmp_path / "builds.log").read_text() == "norm\n"
    # another arch, not cached: the import directory comes before compiling (here its module lacks the arch) ...
    with pytest.raises(UserError, match=r"AOT module norm .*holds SASS for \['sm_90a'\], not \['sm_120a'\]"):
        _bundle(tmp_path / "b3", jit_archs=["12.0a"], jit_python=jit_python, jit_cache=tmp_path / "elsewhere")
    assert (tmp_path / "builds.log").read_text() == "norm\n"
    # ... and without one it is built
    _bundle(tmp_path / "b3", jit_archs=["12.0a"], jit_python=jit_python)
    assert (tmp_path / "builds.log").read_text() == "norm\nnorm\n"
    assert sha256(other) != jit["sha256"]

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


@needs_nvcc
@pytest.mark.slow
def test_bundle_jit_cache_import_and_missing_builder(world, tmp_path):
    with pytest.raises(UserError, match="no --jit-python to build the modules with .* nor --jit-cache DIR"):
        _bundle(tmp_path / "b", jit_archs=["9.0a"])
    assert not (tmp_path / "b").exists()
    with pytest.raises(UserError, match=r"AOT module norm: not in .*empty as norm/norm\.so.*--jit-python"):
        _bundle(tmp_path / "b", jit_archs=["9.0a"], jit_cache=tmp_path / "empty")
    assert not (tmp_path / "b").exists()

    lab = _nvcc_module(tmp_path / "fi_aot" / "norm" / "norm.so", "12.0a", tmp_path)
    m, msgs = _bundle(tmp_path / "b", jit_archs=["12.0a"], jit_cache=tmp_path / "fi_aot")
    jit = _jit(m)
    assert jit["origin"] == "imported" and jit["key"] == "" and jit["sass"] == ["sm_120a"]
    assert jit["sha256"] == sha256(lab) == sha256(tmp_path / "b" / jit["path"])
    assert any("WARNING: AOT norm: imported from" in s for s in msgs)
    assert not (tmp_path / "builds.log").exists()
    # the layout of an aot/<key>/ cache entry (DIR/<name>.so) is importable too
    flat = tmp_path / "flat"
    flat.mkdir()
    shutil.copyfile(lab, flat / "norm.so")
    assert _jit(_bundle(tmp_path / "b", jit_archs=["12.0a"], jit_cache=flat)[0])["sha256"] == jit["sha256"]
    # an imported module must hold SASS for the archs asked for: nothing half-written when it does not
    shutil.rmtree(tmp_path / "b")
    with pytest.raises(UserError, match=r"holds SASS for \['sm_120a'\], not \['sm_90a'\]"):
        _bundle(tmp_path / "b", jit_archs=["9.0a"], jit_cache=tmp_path / "fi_aot")
    assert not (tmp_path / "b").exists()
    garbage = tmp_path / "garbage" / "norm"
    garbage.mkdir(parents=True)
    (garbage / "norm.so").write_bytes(b"\x7fELF prebuilt elsewhere")
    with pytest.raises(UserError, match="norm.so"):
        _bundle(tmp_path / "b", jit_archs=["9.0a"], jit_cache=tmp_path / "garbage")
