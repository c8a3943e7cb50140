"""`build --aot`: FlashInfer modules compiled with nvcc on a CPU machine into the patched flashinfer wheel's AOT
slots. The slow test builds `norm` for 12.0a (about 1-2 min on 2 cores, then cached), checks the wheel holds
sm_120a SASS (fatbin.py) and that FlashInfer's own loader takes the slot instead of compiling. The full
trtllm_comm build (4-5 min) is a release-time job (release.yml). No GPU is used anywhere here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from sglang_blackwell import aot
from sglang_blackwell.aot import AotRequest, build_aot_modules, find_toolchain, parse_archs, parse_modules
from sglang_blackwell.bases import get_base
from sglang_blackwell.build import build
from sglang_blackwell.errors import UserError
from sglang_blackwell.fatbin import read_cuda_binary
from sglang_blackwell.wheels import add_files, check_record

TEST_ROOT = Path(__file__).resolve().parents[1]
if str(TEST_ROOT) not in sys.path:
    sys.path.insert(0, str(TEST_ROOT))

from pyenvs import make_venv  # noqa: E402

from support.cuda_headers import extra_include_dirs  # noqa: E402

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


@needs_nvcc
def test_build_interpreter_without_torch_is_named(tmp_path):
    bare = make_venv(tmp_path / "bare")
    with pytest.raises(UserError, match=rf"{bare}.*cannot import torch.*tvm_ffi.*--aot-python"):
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
    from tooling.conftest import make_wheel

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
    with zipfile.ZipFile(whl) as z:
        info = z.getinfo("flashinfer/data/aot/norm/norm.so")
        marker = json.loads(z.read("flashinfer_python-0.0.1+sm120.1.dist-info/sglang_blackwell.json"))
    assert (info.external_attr >> 16) & 0o777 == 0o755
    assert marker == {"base": "x", "aot": {"archs": ["12.0a"]}}


@needs_nvcc
@pytest.mark.slow
@pytest.mark.network
def test_unpatched_trtllm_comm_is_refused_for_sm120(tmp_path):
    """Without P1, FlashInfer 0.6.4's trtllm_comm spec refuses SM12x: the error says so, nothing is cached."""
    from support.trees import TreeFactory

    tree = TreeFactory(tmp_path / "trees").tree("0.5.9", "flashinfer", 0)
    with pytest.raises(UserError, match=r"trtllm_comm for 12\.0a failed to build.*No supported CUDA architectures"):
        build_aot_modules(tree, ["trtllm_comm"], "12.0a", tmp_path / "cache", python=sys.executable,
                          include_dirs=extra_include_dirs())
    assert not list((tmp_path / "cache").rglob("*.so"))


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

    # the second build is a cache hit and gives the same bytes
    built2, _ = build(base, tmp_path / "dist2", aot=req)
    assert next(w for w in built2 if w.package == "flashinfer").sha256 == fi.sha256
