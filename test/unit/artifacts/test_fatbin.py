"""The .nv_fatbin reader on real CUDA objects compiled here with nvcc (sm_90a, sm_120a, ...), compiled once
per test session into a temporary directory. Marked slow: nine nvcc runs take 20-40 s on a 2-core machine."""

from __future__ import annotations

import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from sglang_blackwell.artifacts.fatbin import Arch, read_cuda_binary, scan_tree
from sglang_blackwell.errors import UserError

pytestmark = pytest.mark.slow

KERNEL = r"""
__global__ void axpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
"""


def _nvcc() -> str | None:
    return shutil.which("nvcc") or next((p for p in ("/usr/local/cuda/bin/nvcc",) if Path(p).exists()), None)


def gencode(arch: str, code: str | None = None) -> list[str]:
    return ["-gencode", f"arch=compute_{arch},code={code or 'sm_' + arch}"]


@pytest.fixture(scope="session")
def objs(tmp_path_factory) -> dict[str, Path]:
    nvcc = _nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found (CUDA toolkit not installed): the fatbin reader needs real CUDA objects")
    d = tmp_path_factory.mktemp("cuda-objs")
    src = d / "axpy.cu"
    src.write_text(KERNEL)
    builds = {
        "multi.o": ["-c", *gencode("90a"), *gencode("120a"), *gencode("120", "compute_120")],
        "sm120a.cubin": ["-cubin", *gencode("120a")],
        "sm90.cubin": ["-cubin", *gencode("90")],
        "lib.so": ["-shared", "-Xcompiler", "-fPIC", *gencode("90a"), *gencode("120a")],
        "ptx_only.o": ["-c", *gencode("120a", "compute_120a")],
        "plain90.o": ["-c", *gencode("90")],
        "family.o": ["-c", *gencode("120f")],
        "debug.o": ["-c", "-G", *gencode("120")],
        "bundle.fatbin": ["-fatbin", *gencode("120a"), *gencode("90", "compute_90")],
    }
    def build(item):
        name, args = item
        r = subprocess.run([nvcc, *args, str(src), "-o", str(d / name)], capture_output=True, text=True)
        assert r.returncode == 0, f"nvcc {' '.join(args)}: {r.stderr}"
        return name, d / name

    with ThreadPoolExecutor(2) as pool:
        return dict(pool.map(build, builds.items()))


@pytest.mark.parametrize("name, sass, ptx", [
    ("multi.o", ["sm_90a", "sm_120a"], ["compute_120"]),
    ("sm120a.cubin", ["sm_120a"], []),
    ("sm90.cubin", ["sm_90"], []),
    ("lib.so", ["sm_90a", "sm_120a"], []),
    ("ptx_only.o", [], ["compute_120a"]),
    ("plain90.o", ["sm_90"], []),
    ("family.o", ["sm_120f"], []),
    ("debug.o", ["sm_120"], []),
    ("bundle.fatbin", ["sm_120a"], ["compute_90"]),
])
def test_archs_of_nvcc_outputs(objs, name, sass, ptx):
    b = read_cuda_binary(objs[name])
    assert b.sass_names() == sass
    assert b.ptx_names() == ptx


def test_runs_on(objs):
    multi = read_cuda_binary(objs["multi.o"])
    assert multi.has_sass_for(12, 0) and multi.has_sass_for(9, 0)
    assert not multi.has_sass_for(12, 1), "sm_120a is arch-specific: not for 12.1"
    assert multi.has_ptx_for(12, 1), "plain compute_120 PTX JITs on 12.1"
    assert not multi.has_sass_for(10, 0) and not multi.has_ptx_for(10, 0)
    assert read_cuda_binary(objs["family.o"]).has_sass_for(12, 1), "sm_120f runs on the 12.x family"
    assert not read_cuda_binary(objs["plain90.o"]).has_sass_for(12, 0)
    assert not read_cuda_binary(objs["ptx_only.o"]).has_sass_for(12, 0)
    assert read_cuda_binary(objs["ptx_only.o"]).has_ptx_for(12, 0)
    assert Arch(120, "").runs_on(12, 1) and not Arch(121, "").runs_on(12, 0)


def test_scan_tree(objs, tmp_path):
    pkg = tmp_path / "pkg" / "sm100"
    pkg.mkdir(parents=True)
    shutil.copy(objs["lib.so"], pkg / "common_ops.abi3.so")
    found = scan_tree(tmp_path / "pkg")
    assert [b.to_dict()["sass"] for b in found] == [["sm_90a", "sm_120a"]]


def test_host_elf_without_fatbin_is_empty():
    b = read_cuda_binary(Path(sys.executable).resolve())
    assert b.sass == [] and b.ptx == []


def test_not_cuda_and_truncated(objs, tmp_path):
    txt = tmp_path / "x.so"
    txt.write_text("not an ELF")
    with pytest.raises(UserError, match="neither an ELF file nor a fatbin"):
        read_cuda_binary(txt)
    data = objs["lib.so"].read_bytes()
    cut = tmp_path / "cut.so"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(UserError, match="cut.so"):
        read_cuda_binary(cut)
    with pytest.raises(UserError, match="cannot read"):
        read_cuda_binary(tmp_path / "missing.so")
