"""P1 (flashinfer), compiled: the patched headers give real sm_120a kernels (nvcc 13, device code only).

Only what P1 touches is compiled (test/support/p1_probe.cu, ~15 s per variant on 2 cores); cubins are cached by
the hash of everything that goes into them, so reruns are instant.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from sglang_blackwell.artifacts.fatbin import cubin_kernel_sizes, read_cuda_binary
from sglang_blackwell.paths import cache_dir

from .conftest import TEST_ROOT, absorbed, carrying

PROBE_CU = TEST_ROOT / "support" / "p1_probe.cu"
NVCC = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").exists() else None)
pytestmark = [pytest.mark.slow, pytest.mark.skipif(NVCC is None, reason="nvcc not installed")]

LAMPORT = "lamport_style_one_shot_all_reduce_norm_kernel"
ONESHOT = "allreduce_fusion_kernel_oneshot_lamport"


def _tvm_ffi_include() -> Path:
    import tvm_ffi

    return Path(tvm_ffi.__file__).parent / "include"


def compile_probe(fi_root: Path) -> Path:
    """nvcc -cubin the probe against the FlashInfer headers under fi_root (an unpacked wheel)."""
    data = fi_root / "flashinfer" / "data"
    flags = ["-std=c++17", "-gencode", "arch=compute_120a,code=sm_120a", "--expt-relaxed-constexpr",
             "-DFLASHINFER_ENABLE_BF16", f"-I{data / 'include'}", f"-I{data / 'csrc'}", f"-I{_tvm_ffi_include()}",
             f"-I{data / 'cutlass' / 'include'}", f"-I{data / 'spdlog' / 'include'}"]
    h = hashlib.sha256(PROBE_CU.read_bytes() + " ".join(flags[:5]).encode())
    for f in sorted((data / "include" / "flashinfer" / "comm").glob("trtllm_allreduce*.cuh")):
        h.update(f.read_bytes())
    out = cache_dir() / "nvcc" / f"p1-{h.hexdigest()[:24]}.cubin"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(f".{os.getpid()}.tmp")
        r = subprocess.run([NVCC, "-cubin", *flags, "-o", str(tmp), str(PROBE_CU)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr[-4000:]
        os.replace(tmp, out)
    return out


def _size(sizes: dict[str, int], needle: str) -> int:
    return max(s for name, s in sizes.items() if needle in name)


@pytest.mark.parametrize("base", carrying("P1"))
def test_patched_headers_compile_to_real_sm120a_kernels(base, patch_trees):
    patched = compile_probe(patch_trees.f.built_tree(base, "flashinfer"))
    binary = read_cuda_binary(patched)
    assert binary.sass_names() == ["sm_120a"]
    sizes = cubin_kernel_sizes(patched)
    assert _size(sizes, LAMPORT) > 4096, sizes  # the lamport one-shot kernel has a body on SM12x
    assert _size(sizes, ONESHOT) > 4096, sizes  # the fused AR+residual+RMSNorm kernel

    upstream = compile_probe(patch_trees.f.tree(base, "flashinfer", 0))
    up_sizes = cubin_kernel_sizes(upstream)
    assert _size(up_sizes, LAMPORT) < 512, up_sizes  # upstream: compiled to an empty kernel on SM12x


@pytest.mark.parametrize("base", absorbed("P1"))
def test_absorbed_upstream_headers_compile_to_real_sm120a_kernels(base, patch_trees):
    """Upstream FlashInfer >= 0.6.17 dropped the `< 1200` guards itself: its own headers give real kernels."""
    upstream = compile_probe(patch_trees.f.tree(base, "flashinfer", 0))
    assert read_cuda_binary(upstream).sass_names() == ["sm_120a"]
    sizes = cubin_kernel_sizes(upstream)
    assert _size(sizes, LAMPORT) > 4096, sizes
    assert _size(sizes, ONESHOT) > 4096, sizes
