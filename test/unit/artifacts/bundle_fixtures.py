"""A small base for `bundle` tests: a patched sglang and a patched stand-in FlashInfer (whose JIT module is a
real .cu file that nvcc compiles), a kernel-like wheel served by the local HTTP server as the base's runtime
sglang-kernel, and a PEP 503 index of small dependency wheels. Nothing is downloaded from the internet."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from sglang_blackwell.artifacts.index import build_index
from sglang_blackwell.patchset.bases import load_base
from sglang_blackwell.patchset.labellock import write_lock
from support.fake_base import Patched, Runtime, render_base, wheel_pin
from support.wheel_world import PATCH_TEMPLATE, gate_patch, make_wheel, sha256

KERNEL_FILES = {  # the sglang-kernel 0.4.4 layout, with incompressible stand-in libraries
    "sgl_kernel/__init__.py": b"from sgl_kernel.version import __version__\n",
    "sgl_kernel/version.py": b'__version__ = "0.0.1"\n',
    "sgl_kernel/flash_ops.abi3.so": None,
    "sgl_kernel/flashmla_ops.abi3.so": None,
    "sgl_kernel/spatial_ops.abi3.so": None,
    "sgl_kernel/sm90/common_ops.abi3.so": None,
    "sgl_kernel/sm100/common_ops.abi3.so": None,
}
KERNEL_TAG = "cp310-abi3-manylinux2014_x86_64"

NORM_CU = (b'#include <cuda.h>\n'
           b'extern "C" __global__ void scale(float* x) { x[threadIdx.x] *= 2.0f; }\n'
           b'extern "C" const char* build_tag() { return "UPSTREAM-NORM"; }\n'
           b'extern "C" int driver_version() { int v = 0; cuDriverGetVersion(&v); return v; }\n')

# FlashInfer's JitSpec in miniature: build() compiles csrc/norm.cu of *this* package with nvcc for
# FLASHINFER_CUDA_ARCH_LIST and links -lcuda from the toolkit's stubs or FLASHINFER_EXTRA_LDFLAGS, as flashinfer.jit
# does; the result is at jit_library_path.
NORM_PY = b'''import os, pathlib, subprocess

class Spec:
    name = "norm"

    def __init__(self):
        self.dir = pathlib.Path(os.environ["FLASHINFER_WORKSPACE_BASE"]) / "norm"

    def build(self, verbose=False):
        self.dir.mkdir(parents=True, exist_ok=True)
        src = pathlib.Path(__file__).resolve().parents[1] / "data" / "csrc" / "norm.cu"
        archs = [a.replace(".", "") for a in os.environ["FLASHINFER_CUDA_ARCH_LIST"].split()]
        gencode = ["-gencode=arch=compute_%s,code=sm_%s" % (a, a) for a in archs]
        home = os.environ["CUDA_HOME"]
        nvcc = os.path.join(home, "bin", "nvcc")
        log = pathlib.Path(os.environ["STANDIN_BUILD_LOG"])
        log.write_text(log.read_text() + "norm\\n" if log.exists() else "norm\\n")
        subprocess.run([nvcc, "-shared", "-Xcompiler", "-fPIC", *gencode,
                        "-L" + os.path.join(home, "lib64", "stubs"),
                        *os.environ.get("FLASHINFER_EXTRA_LDFLAGS", "").split(), "-lcuda",
                        "-o", str(self.dir / "norm.so"), str(src)], check=True)

    @property
    def jit_library_path(self):
        return self.dir / "norm.so"


def gen_norm_module():
    return Spec()
'''


def norm_patch() -> str:
    diff = ("diff --git a/csrc/norm.cu b/csrc/norm.cu\n"
            "index 1111111..2222222 100644\n"
            "--- a/csrc/norm.cu\n"
            "+++ b/csrc/norm.cu\n"
            "@@ -1,4 +1,4 @@\n"
            " #include <cuda.h>\n"
            ' extern "C" __global__ void scale(float* x) { x[threadIdx.x] *= 2.0f; }\n'
            '-extern "C" const char* build_tag() { return "UPSTREAM-NORM"; }\n'
            '+extern "C" const char* build_tag() { return "PATCHED-NORM"; }\n'
            ' extern "C" int driver_version() { int v = 0; cuDriverGetVersion(&v); return v; }\n')
    return PATCH_TEMPLATE.format(subject="norm: tag the build", body="Marks the patched build.", lid="P8",
                                 path="csrc/norm.cu", diff=diff)


def kernel_wheel(path: Path, version: str = "0.0.1", lib_size: int = 150_000, tag: str = KERNEL_TAG) -> Path:
    files = {}
    for i, (name, data) in enumerate(KERNEL_FILES.items()):
        files[name] = data if data is not None else _noise(lib_size, seed=i)
    return make_wheel(path / f"sglang_kernel-{version}-{tag}.whl", "sglang_kernel", version, files, tag=tag)


def _noise(n: int, seed: int) -> bytes:
    import random

    return random.Random(seed).randbytes(n)


@dataclass
class BundleWorld:
    base: Path
    index: str  # file:// URL of a PEP 503 simple index of the dependency wheels
    kernel: Path


def dep_wheels(d: Path) -> list[Path]:
    d.mkdir(parents=True, exist_ok=True)
    return [
        make_wheel(d / "depa-1.0-py3-none-any.whl", "depa", "1.0", {"depa/__init__.py": b"V = '1.0'\n"}),
        make_wheel(d / "depa-2.0-py3-none-any.whl", "depa", "2.0", {"depa/__init__.py": b"V = '2.0'\n",
                                                                   "depa/data.bin": _noise(200_000, seed=99)}),
        make_wheel(d / "depb-1.0-py3-none-any.whl", "depb", "1.0", {"depb/__init__.py": b""},
                   requires=["depc>=1.1", "depwin; sys_platform == 'win32'"]),
        make_wheel(d / "depc-1.0-py3-none-any.whl", "depc", "1.0", {"depc/__init__.py": b""}),
        make_wheel(d / "depc-1.1-py3-none-any.whl", "depc", "1.1", {"depc/__init__.py": b""}),
    ]


PY = f"{sys.version_info[0]}.{sys.version_info[1]}"


def make_world(tmp_path: Path, server, lib_size: int = 150_000) -> BundleWorld:
    """patches/9.9.9 with sglang (requires the kernel, flashinfer, depa>=1.0, depb, torch) and flashinfer."""
    sg = make_wheel(server.root / "sglang-0.0.1-py3-none-any.whl", "sglang", "0.0.1",
                    {"sglang/__init__.py": b"", "sglang/gate.py": ORIGINAL_GATE},
                    requires=["sglang-kernel==0.0.1", "flashinfer-python==0.0.2", "depa>=1.0", "depb", "torch"])
    fi = make_wheel(server.root / "flashinfer_python-0.0.2-py3-none-any.whl", "flashinfer_python", "0.0.2",
                    {"flashinfer/__init__.py": b"__version__ = '0.0.2'\n", "flashinfer/jit/__init__.py": b"",
                     "flashinfer/jit/norm.py": NORM_PY, "flashinfer/data/csrc/norm.cu": NORM_CU},
                    requires=["torch"])
    kw = kernel_wheel(server.root, lib_size=lib_size)
    patches = tmp_path / "patches"
    base = patches / "9.9.9"
    (base / "sglang").mkdir(parents=True)
    (base / "flashinfer").mkdir(parents=True)
    (base / "base.toml").write_text(render_base(
        patched=[Patched("sglang", "sglang", "0.0.1", [wheel_pin(sg, server.url)]),
                 Patched("flashinfer", "flashinfer-python", "0.0.2", [wheel_pin(fi, server.url)])],
        runtime=[Runtime("sglang-kernel", "0.0.1", "sglang-kernel==0.0.1", server.url,
                         [{"filename": kw.name, "url": f"{server.url}/{kw.name}", "sha256": sha256(kw)}])]))
    (base / "sglang" / "0001-gate-accepts-12.patch").write_text(gate_patch())
    (base / "sglang" / "series").write_text("0001-gate-accepts-12.patch\n")
    (base / "flashinfer" / "0001-norm-tag.patch").write_text(norm_patch())
    (base / "flashinfer" / "series").write_text("0001-norm-tag.patch\n")
    write_lock(load_base(base))  # the label rule: build (and so bundle) refuse an unlocked label
    # the package index: the dependency wheels, the kernel (a runtime pin it serves) and a stand-in torch, all that
    # the lock's resolution needs
    deps = dep_wheels(tmp_path / "depwheels")
    torch = make_wheel(tmp_path / "depwheels" / "torch-2.11.0-py3-none-any.whl", "torch", "2.11.0",
                       {"torch/__init__.py": b""})
    simple = build_index([*deps, torch, kw], tmp_path / "index")
    return BundleWorld(base, f"file://{simple}", kw)


def lock_world(world: BundleWorld, python: str) -> Path:
    """The base's lock for `python`, made by the real generator (pip, run by this interpreter) from the index."""
    from sglang_blackwell.artifacts.lock import generate, write
    from sglang_blackwell.patchset.bases import get_base

    lock = generate(get_base("9.9.9"), python, python_exe=sys.executable, index_url=world.index)
    return write(lock, f"sglang-blackwell lock --base 9.9.9 --python-version {python} --index-url {world.index}")


def make_locked_world(d: Path, server, python: str) -> None:
    """make_world + lock_world into `d`, with the upstream wheels the bundle fetches (sglang, flashinfer, the
    kernel) downloaded from `server` into d/cache: the per-test world's template (world_copy)."""
    from sglang_blackwell.artifacts.bundle import kernel_artifact
    from sglang_blackwell.patchset.bases import get_base
    from sglang_blackwell.patchset.fetch import fetch

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SGLANG_BLACKWELL_PATCHES", str(d / "patches"))
        mp.setenv("SGLANG_BLACKWELL_CACHE", str(d / "cache"))
        isolated_pip_env(mp)
        w = make_world(d, server)
        lock_world(w, python)  # its build fetches sglang and flashinfer into d/cache
        fetch(kernel_artifact(get_base("9.9.9"), python), d / "cache")


TEMPLATE_PARTS = ("patches", "depwheels", "index", "cache")


def world_copy(template: Path, tmp_path: Path, server) -> BundleWorld:
    """A world of the test's own in tmp_path, laid out as make_world + lock_world make it there: a copy of the
    template (make_locked_world), whose base pins the wheels `server` serves. The test may change any of it (the
    index, the base, the cache). Its cache holds the verified upstream downloads (fetched once, from `server`, for
    the template: fetch's own tests are patchset/test_fetch.py and test_build.py), and no dependency wheels: the
    bundle downloads those from the index, as before. The lock's `lock-index` line names the copy's index, as the
    lock made for this tmp_path would."""
    for name in TEMPLATE_PARTS:
        shutil.copytree(template / name, tmp_path / name, symlinks=True)
    old, new = f"file://{template / 'index'}", f"file://{tmp_path / 'index'}"
    for lock in (tmp_path / "patches" / "9.9.9" / "locks").glob("py*.txt"):
        text = lock.read_text()
        assert f"# lock-index: {old}/" in text, lock
        lock.write_text(text.replace(f"# lock-index: {old}/", f"# lock-index: {new}/"))
    return BundleWorld(tmp_path / "patches" / "9.9.9", f"{new}/simple", server.root / KERNEL_NAME)


KERNEL_NAME = f"sglang_kernel-0.0.1-{KERNEL_TAG}.whl"  # kernel_wheel's name for the defaults


ORIGINAL_GATE = b"def gate(major):\n    return major in (9, 10)\n\n\ndef other():\n    return 1\n"


def isolated_pip_env(monkeypatch) -> None:
    """pip sees no config file and no PIP_* settings of this machine (its own index, find-links, constraints)."""
    for k in list(os.environ):
        if k.startswith("PIP_"):
            monkeypatch.delenv(k)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)


def run_install(bundle_dir: Path, *args: str, python: str = sys.executable) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHON"] = python
    return subprocess.run(["bash", str(bundle_dir / "install.sh"), *args], capture_output=True, text=True, env=env,
                          timeout=300)
