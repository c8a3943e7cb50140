"""Prebuilt FlashInfer JIT modules for a bundle (`bundle --jit-archs 9.0a`): compiled with nvcc on the build
machine from the patched FlashInfer wheel, for the named archs, in FlashInfer's AOT slot layout
(`flashinfer/data/aot/<name>/<name>.so`: FlashInfer loads a module from there instead of compiling it).

A build needs an interpreter (`--jit-python`) whose environment has the target's torch, apache-tvm-ffi and
FlashInfer's other dependencies; the patched FlashInfer is unpacked and put first on its PYTHONPATH, so the
modules are built from the patched sources. nvcc comes from CUDA_HOME (default /usr/local/cuda); `-lcuda` links
against the toolkit's stub libcuda, or one generated from cuda.h when the toolkit has none (CPU machines).

Results are cached in <cache>/fi_aot/<key>/<name>/<name>.so, key = sha256 of (patched FlashInfer wheel sha256,
FlashInfer series sha256, module, generator, archs, nvcc version): trtllm_comm takes ~260 s on 2 cores, once.
`--jit-cache DIR` imports modules already built elsewhere (DIR/<name>/<name>.so, e.g. ~/.cache/sglang-lab/fi_aot):
their provenance cannot be checked, so the manifest marks them `imported` and the bundle warns.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .errors import UserError
from .fetch import sha256_file

# module name -> the FlashInfer function that returns its JitSpec (flashinfer 0.6.x)
GENERATORS = {
    "trtllm_comm": "flashinfer.jit.comm:gen_trtllm_comm_module",
    "norm": "flashinfer.jit.norm:gen_norm_module",
}
DEFAULT_MODULES = ("trtllm_comm", "norm")
ARCH_RE = re.compile(r"^\d+\.\d+[af]?$")
BUILDER = Path(__file__).with_name("flashinfer_aot_builder.py")


@dataclass(frozen=True)
class AotModule:
    name: str
    path: Path
    sha256: str
    archs: tuple[str, ...]
    origin: str  # built / cached / imported
    key: str = ""
    info: dict | None = None


def parse_archs(spec: str | None) -> list[str]:
    if not spec:
        return []
    archs = sorted({a.strip() for a in spec.split(",") if a.strip()})
    bad = [a for a in archs if not ARCH_RE.match(a)]
    if bad:
        raise UserError(f"--jit-archs {spec}: {', '.join(bad)} is not a CUDA arch like 9.0a or 12.0a")
    return archs


def parse_modules(spec: str | None) -> list[str]:
    names = sorted({m.strip() for m in spec.split(",") if m.strip()}) if spec else list(DEFAULT_MODULES)
    unknown = [m for m in names if m not in GENERATORS]
    if unknown:
        raise UserError(f"--jit-modules: unknown module(s) {', '.join(unknown)} (known: {', '.join(GENERATORS)})")
    return names


def cuda_home() -> Path:
    return Path(os.environ.get("CUDA_HOME") or "/usr/local/cuda")


def nvcc_version(home: Path) -> str:
    nvcc = home / "bin" / "nvcc"
    if not nvcc.exists():
        raise UserError(f"--jit-archs: no nvcc at {nvcc} (set CUDA_HOME to a CUDA 13 toolkit)")
    r = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True)
    line = next((ln for ln in r.stdout.splitlines() if "release" in ln), r.stdout.strip())
    return line.strip()


def cache_key(fi_wheel_sha256: str, series_sha256: str, name: str, archs: list[str], nvcc: str) -> str:
    blob = json.dumps({"flashinfer_wheel_sha256": fi_wheel_sha256, "series_sha256": series_sha256, "module": name,
                       "generator": GENERATORS[name], "archs": sorted(archs), "nvcc": nvcc}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def stub_libcuda_dir(home: Path, cache: Path) -> Path:
    """A directory with a libcuda.so to link against: the toolkit's stub, else one generated from cuda.h."""
    for d in (home / "lib64" / "stubs", home / "lib" / "stubs", home / "targets" / "x86_64-linux" / "lib" / "stubs"):
        if (d / "libcuda.so").exists():
            return d
    header = home / "include" / "cuda.h"
    if not header.exists():
        raise UserError(f"--jit-archs: {header} missing (CUDA_HOME is not a CUDA toolkit)")
    d = cache / "stubs" / f"libcuda-{sha256_file(header)[:16]}"
    if (d / "libcuda.so").exists():
        return d
    pre = subprocess.run(["gcc", "-E", "-P", "-I", str(home / "include"), str(header)], capture_output=True, text=True)
    if pre.returncode != 0:
        raise UserError(f"--jit-archs: gcc -E {header} failed (gcc is needed to make a stub libcuda): "
                        f"{pre.stderr.strip()[-300:]}")
    names = sorted(set(re.findall(r"\bCUresult\s+(cu[A-Za-z0-9_]+)\s*\(", pre.stdout)))
    d.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".libcuda-", dir=d.parent))
    try:
        (tmp / "stub.c").write_text("".join(f"int {n}(void) {{ return 0; }}\n" for n in names))
        r = subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(tmp / "libcuda.so"),
                            str(tmp / "stub.c")], capture_output=True, text=True)
        if r.returncode != 0:
            raise UserError(f"--jit-archs: building a stub libcuda failed: {r.stderr.strip()[-300:]}")
        (tmp / "stub.c").unlink()
        with contextlib.suppress(OSError):  # another build made it first
            os.replace(tmp, d)
        return d
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _build(fi_wheel: Path, names: list[str], archs: list[str], jit_python: str, home: Path, cache: Path,
           work: Path, progress: Callable[[str], None]) -> tuple[Path, dict[str, dict]]:
    src = work / "flashinfer-src"
    with zipfile.ZipFile(fi_wheel) as z:
        z.extractall(src)
    out = work / "aot-out"
    site = subprocess.run([jit_python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True)
    if site.returncode != 0:
        raise UserError(f"--jit-python {jit_python}: cannot run it: {site.stderr.strip()[-300:]}")
    cudaflags = os.environ.get("FLASHINFER_EXTRA_CUDAFLAGS", "")
    cu13 = Path(site.stdout.strip()) / "nvidia" / "cu13" / "include"
    if cu13.is_dir():  # cublasLt / curand headers of the nvidia-* wheels torch depends on
        cudaflags = f"{cudaflags} -isystem {cu13}".strip()
    env = {**os.environ, "CUDA_HOME": str(home), "FLASHINFER_CUDA_ARCH_LIST": " ".join(archs),
           "FLASHINFER_WORKSPACE_BASE": str(work / "workspace"),
           "FLASHINFER_EXTRA_LDFLAGS": f"-L{stub_libcuda_dir(home, cache)} "
                                       + os.environ.get("FLASHINFER_EXTRA_LDFLAGS", ""),
           "FLASHINFER_EXTRA_CUDAFLAGS": cudaflags,
           "PYTHONPATH": os.pathsep.join([str(src), *filter(None, [os.environ.get("PYTHONPATH")])]),
           "MAX_JOBS": os.environ.get("MAX_JOBS", str(os.cpu_count() or 1))}
    progress(f"nvcc: building FlashInfer {', '.join(names)} for {' '.join(archs)} (trtllm_comm takes minutes)")
    r = subprocess.run([jit_python, str(BUILDER), str(out), *(f"{n}={GENERATORS[n]}" for n in names)],
                       capture_output=True, text=True, env=env, cwd=work)
    if r.returncode != 0:
        raise UserError(f"building FlashInfer JIT modules {', '.join(names)} with {jit_python} failed:\n"
                        + "\n".join((r.stderr or r.stdout).strip().splitlines()[-25:]))
    info = {}
    for line in r.stdout.splitlines():
        if line.startswith("{"):
            d = json.loads(line)
            info[d["name"]] = d
            progress(f"built {d['name']}.so ({d['size']} bytes) in {d['seconds']} s")
    return out, info


def aot_modules(fi_wheel: Path, series_sha256: str, archs: list[str], names: list[str], *, cache: Path, work: Path,
                jit_python: str | None = None, jit_cache: Path | None = None,
                progress: Callable[[str], None] | None = None) -> list[AotModule]:
    """The .so of every named module: from the cache, else imported from jit_cache, else built (and cached)."""
    say = progress or (lambda s: None)
    fi_sha = sha256_file(fi_wheel)
    home = cuda_home()
    try:
        nvcc = nvcc_version(home)
    except UserError:
        if jit_python:
            raise
        nvcc = "none"  # only cached or imported modules can be used
    result: dict[str, AotModule] = {}
    to_build = []
    for name in names:
        key = cache_key(fi_sha, series_sha256, name, archs, nvcc)
        cached = cache / "fi_aot" / key / name / f"{name}.so"
        if cached.exists():
            meta = json.loads((cache / "fi_aot" / key / "meta.json").read_text())
            result[name] = AotModule(name, cached, sha256_file(cached), tuple(archs), "cached", key, meta)
            say(f"FlashInfer {name}: cached ({key})")
            continue
        imported = jit_cache / name / f"{name}.so" if jit_cache else None
        if imported is not None and imported.exists():
            say(f"WARNING: FlashInfer {name}: imported from {imported}; its sources, patches and archs are "
                f"unchecked (build it here with --jit-python to be sure)")
            result[name] = AotModule(name, imported, sha256_file(imported), tuple(archs), "imported", "",
                                     {"imported_from": str(imported)})
            continue
        to_build.append((name, key))
    if to_build:
        if not jit_python:
            raise UserError(f"--jit-archs: {', '.join(n for n, _ in to_build)} not cached and no --jit-python to "
                            "build with (a venv with the target's torch, apache-tvm-ffi and FlashInfer's "
                            "dependencies: see benchmark/lab/README.md) nor --jit-cache DIR holding "
                            "<name>/<name>.so")
        build_dir = work / "aot-build"
        build_dir.mkdir(parents=True, exist_ok=True)
        out, info = _build(fi_wheel, [n for n, _ in to_build], archs, jit_python, home, cache, build_dir, say)
        for name, key in to_build:
            so = out / name / f"{name}.so"
            if not so.exists():
                raise UserError(f"FlashInfer build of {name} wrote no {so.name}")
            meta = {**info.get(name, {}), "key": key, "archs": archs, "nvcc": nvcc, "series_sha256": series_sha256,
                    "flashinfer_wheel": fi_wheel.name, "flashinfer_wheel_sha256": fi_sha}
            meta.pop("flashinfer", None)
            final = cache / "fi_aot" / key
            tmp = Path(tempfile.mkdtemp(prefix=".aot-", dir=_mkdir(cache / "fi_aot")))
            (tmp / name).mkdir()
            shutil.copyfile(so, tmp / name / f"{name}.so")
            (tmp / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
            p = final / name / f"{name}.so"
            result[name] = AotModule(name, p, sha256_file(p), tuple(archs), "built", key, meta)
    return [result[n] for n in names]


def _mkdir(p: Path) -> Path:
    p.mkdir(parents=True, exist_ok=True)
    return p
