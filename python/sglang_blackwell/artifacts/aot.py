"""Prebuilt FlashInfer JIT modules ("AOT modules"), compiled with nvcc on a machine without a GPU.

FlashInfer loads `flashinfer/data/aot/<name>/<name>.so` instead of compiling a JIT module when that file exists
(`JitSpec.aot_path` / `is_aot`). Shipping the fused all-reduce path's modules there (trtllm_comm, norm) saves
the 2-4 minute compile of the first server start on SM12x. Two commands use this module: `build --aot` puts the
modules into the patched flashinfer wheel's AOT slots (add_aot_modules), `bundle --jit-archs` carries them as
aot/<name>/<name>.so next to the wheels (aot_modules; the bundle's install.sh copies them into the slots).

The entry point:

    build_aot_modules(flashinfer_tree_or_wheel, modules=("trtllm_comm", "norm"), archs=("12.0a",),
                      cache=None, *, python=None, cuda_home=None, include_dirs=()) -> {name: Path to .so}

and, with where each module came from (built / cached / imported), aot_modules(...) -> [AotModule].
It runs FlashInfer's own JIT spec (the patched tree's `flashinfer.jit.*.gen_*_module`) in a fresh interpreter
with FLASHINFER_CUDA_ARCH_LIST set, checks that every requested arch is in the result as SASS (fatbin.py), and
caches the .so under <cache>/aot/<key>/ where key = (FlashInfer tree, module, archs, nvcc, tvm-ffi). A cached
module costs nothing; a fresh one takes ~1-2 min (norm) to ~4-5 min (trtllm_comm) per arch on 2 cores.
`import_dir` takes modules built elsewhere (DIR/<name>/<name>.so or DIR/<name>.so) where the cache has none:
only their SASS is checked, their sources cannot be, so they are marked `imported`.

The build interpreter (`python`, default this one; `build --aot-python`, `bundle --jit-python`) needs what
importing flashinfer's JIT needs: torch (a CPU build is enough: nothing links against it), apache-tvm-ffi (its
headers are compiled in: use the version the runtime will have), ninja, numpy. The CUDA toolkit (nvcc) must have
the cuBLAS and cuRAND headers FlashInfer's trtllm headers include (a CUDA devel image has them; a torch +cu130
install or the nvidia-cublas / nvidia-curand wheels ship them under nvidia/cu13/include, which is searched).
Where the toolkit has no libcuda stub to link `-lcuda` against (a pip-installed nvcc), one is generated from
cuda.h with gcc and cached under <cache>/stubs/.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import zipfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from .. import procs
from ..errors import UserError
from ..paths import cache_dir
from .fatbin import read_cuda_binary

# module name -> (flashinfer module, generator). The fused all-reduce path: the trtllm all-reduce(+residual+RMSNorm)
# kernels and FlashInfer's norm kernels.
MODULES: dict[str, tuple[str, str]] = {
    "trtllm_comm": ("flashinfer.jit.comm", "gen_trtllm_comm_module"),
    "norm": ("flashinfer.jit.norm", "gen_norm_module"),
}
DEFAULT_MODULES = ("trtllm_comm", "norm")
AOT_DIR = "flashinfer/data/aot"
# headers FlashInfer's trtllm common headers include (norm.cuh, trtllm_allreduce*.cuh) beyond the core toolkit
REQUIRED_HEADERS = ("cublasLt.h", "curand_kernel.h")
INCLUDE_ENV = "SGLANG_BLACKWELL_AOT_INCLUDE"  # extra header dirs, os.pathsep-separated
ARCH_RE = re.compile(r"^(\d+)\.(\d)([af]?)$")
KEY_SCHEMA = "sglang-blackwell/aot/1"
WORKER = Path(__file__).with_name("aot_worker.py")
# FLASHINFER_* variables of the caller that are passed on (everything else FLASHINFER_* is ours to set)
PASS_THROUGH = ("FLASHINFER_NVCC_THREADS",)
Progress = Callable[[str], None]


def aot_slot(name: str) -> str:
    """Where FlashInfer looks for a prebuilt module, as a wheel path."""
    return f"{AOT_DIR}/{name}/{name}.so"


def parse_archs(spec: str | Iterable[str], flag: str = "--aot") -> tuple[str, ...]:
    """'12.0a,9.0a' or '12.0a 9.0a' or ['12.0a'] -> ('12.0a', '9.0a'), validated, duplicates dropped.
    flag: the option named in errors (bundle: --jit-archs)."""
    items = re.split(r"[,\s]+", spec.strip()) if isinstance(spec, str) else [str(s).strip() for s in spec]
    out: list[str] = []
    for a in filter(None, items):
        m = ARCH_RE.match(a)
        if not m:
            raise UserError(f"{flag}: {a!r} is not a CUDA arch like 12.0a or 9.0a (major.minor, optional a/f)")
        if int(m[1]) >= 9 and not m[3]:
            raise UserError(f"{flag}: {a!r}: FlashInfer's SM90+ kernels need the arch-specific target: use {a}a")
        if a not in out:
            out.append(a)
    if not out:
        raise UserError(f"{flag}: no architectures given (e.g. {flag} 12.0a or {flag} 12.0a,9.0a)")
    return tuple(out)


def sass_name(arch: str) -> str:
    major, minor, suffix = ARCH_RE.match(arch).groups()  # type: ignore[union-attr]
    return f"sm_{major}{minor}{suffix}"


def parse_modules(spec: str | Iterable[str], flag: str = "--aot-modules") -> tuple[str, ...]:
    items = re.split(r"[,\s]+", spec.strip()) if isinstance(spec, str) else list(spec)
    mods = tuple(dict.fromkeys(filter(None, items)))
    bad = [m for m in mods if m not in MODULES]
    if bad or not mods:
        raise UserError(f"{flag}: unknown module(s) {bad or '(none given)'} (known: {', '.join(MODULES)})")
    return mods


@dataclass(frozen=True)
class Toolchain:
    """What goes into an AOT build besides the FlashInfer sources (part of the cache key)."""

    python: str
    cuda_home: str
    nvcc: str  # nvcc's version, e.g. "13.0.88"
    tvm_ffi: str
    torch: str
    include_dirs: tuple[str, ...]  # extra -isystem dirs (headers the toolkit lacks)
    stub_libcuda: bool  # the toolkit has no libcuda stub: we link against our own

    def key_facts(self) -> dict:
        return {"nvcc": self.nvcc, "tvm_ffi": self.tvm_ffi}

    def record(self) -> dict:
        return {"nvcc": self.nvcc, "tvm_ffi": self.tvm_ffi, "torch": self.torch}


@dataclass(frozen=True)
class AotModule:
    """One prebuilt module and where it came from: `built` (compiled now), `cached` (compiled earlier from the
    same inputs), `imported` (taken from an import directory: SASS checked, sources and patches unchecked)."""

    name: str
    path: Path
    archs: tuple[str, ...]
    origin: str
    sha256: str
    size: int
    sass: tuple[str, ...]
    key: str = ""  # the cache key ("" when imported)

    @classmethod
    def of(cls, name: str, so: Path, archs: Sequence[str], origin: str, key: str = "", hint: str = "") -> AotModule:
        """Reads and checks the .so: it must hold SASS for every arch (hint: why it might not)."""
        have = read_cuda_binary(so).sass_names()
        missing = [sass_name(a) for a in archs if sass_name(a) not in have]
        if missing:
            raise UserError(f"AOT module {name} ({so}) holds SASS for {have or 'nothing'}, not {missing}{hint}")
        data = so.read_bytes()
        return cls(name, so, tuple(archs), origin, hashlib.sha256(data).hexdigest(), len(data), tuple(have), key)

    def bundle_entry(self) -> dict:
        """The bundle manifest's entry (bundle.py adds size and sha256 of the carried file)."""
        return {"path": f"aot/{self.name}/{self.name}.so", "kind": "jit", "module": self.name,
                "archs": list(self.archs), "origin": self.origin, "slot": aot_slot(self.name), "key": self.key,
                "sass": list(self.sass)}


_PROBE = """
import json, sys, sysconfig, pathlib
out = {"python": sys.executable, "missing": []}
for mod in ("torch", "tvm_ffi", "ninja", "numpy"):
    try:
        m = __import__(mod)
        out[mod] = getattr(m, "__version__", "?")
    except Exception as e:
        out["missing"].append(f"{mod} ({type(e).__name__}: {e})")
site = pathlib.Path(sysconfig.get_paths()["purelib"])
out["nvidia_include"] = sorted(str(p) for p in site.glob("nvidia/*/include") if p.is_dir())
print(json.dumps(out))
"""


def _nvcc_version(nvcc: Path) -> str:
    r = procs.run([str(nvcc), "--version"], capture_output=True, text=True)
    m = re.search(r"\bV(\d+\.\d+\.\d+)", r.stdout)
    if r.returncode != 0 or not m:
        raise UserError(f"{nvcc}: `nvcc --version` failed or did not print a version: {r.stderr.strip()[-300:]}")
    return m[1]


def find_cuda_home(cuda_home: str | os.PathLike | None = None) -> Path:
    """The CUDA toolkit: the argument, else $CUDA_HOME, else /usr/local/cuda, else where `nvcc` on PATH lives.
    It must hold bin/nvcc and include/cuda_runtime.h (a wrapper script's directory does not count)."""
    if cuda_home or os.environ.get("CUDA_HOME"):
        candidates = [Path(cuda_home or os.environ["CUDA_HOME"])]
    else:
        candidates = [Path("/usr/local/cuda")]
        if shutil.which("nvcc"):
            candidates.append(Path(shutil.which("nvcc")).resolve().parent.parent)  # type: ignore[arg-type]
    for home in candidates:
        if (home / "bin" / "nvcc").exists() and (home / "include" / "cuda_runtime.h").is_file():
            return home
    raise UserError(f"no CUDA toolkit at {', '.join(map(str, candidates))} (bin/nvcc + include/cuda_runtime.h): "
                    "install the CUDA 13 toolkit and set CUDA_HOME")


def find_toolchain(python: str | None = None, cuda_home: str | os.PathLike | None = None,
                   include_dirs: Sequence[str | os.PathLike] = ()) -> Toolchain:
    """Check the build interpreter and the CUDA toolkit before any compile; every missing piece is named."""
    import sys

    python = str(python or sys.executable)
    home = find_cuda_home(cuda_home)
    r = procs.run([python, "-c", _PROBE], capture_output=True, text=True, env=_clean_env())
    if r.returncode != 0:
        raise UserError(f"AOT build interpreter {python}: cannot run it: {r.stderr.strip()[-300:]}")
    probe = json.loads(r.stdout.strip().splitlines()[-1])
    if probe["missing"]:
        raise UserError(f"AOT build interpreter {python} cannot import {', '.join(probe['missing'])}: install "
                        "torch (a CPU build is enough), apache-tvm-ffi (the version the runtime gets), ninja and "
                        "numpy into it, or pass another interpreter (build --aot-python, bundle --jit-python)")
    extra = [*map(str, include_dirs), *filter(None, os.environ.get(INCLUDE_ENV, "").split(os.pathsep)),
             *probe["nvidia_include"]]
    search = [str(home / "include"), *extra]
    for header in REQUIRED_HEADERS:
        if not any((Path(d) / header).is_file() for d in search):
            raise UserError(
                f"AOT build: {header} not found in {home / 'include'}, ${INCLUDE_ENV} or the build interpreter's "
                "nvidia/*/include: FlashInfer's trtllm headers include it. Use a CUDA devel toolkit (cuBLAS and "
                "cuRAND dev headers), or pip install nvidia-cublas nvidia-curand into the build interpreter")
    used = tuple(dict.fromkeys(d for d in extra if any((Path(d) / h).is_file() for h in REQUIRED_HEADERS)))
    stub = not any((home / d / "libcuda.so").exists() for d in ("lib64/stubs", "lib/stubs", "lib64", "lib"))
    return Toolchain(python=python, cuda_home=str(home), nvcc=_nvcc_version(home / "bin" / "nvcc"),
                     tvm_ffi=probe["tvm_ffi"], torch=probe["torch"], include_dirs=used, stub_libcuda=stub)


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items()
            if not (k.startswith("FLASHINFER_") and k not in PASS_THROUGH) and k not in ("PYTHONPATH", "PYTHONHOME")}


def tree_digest(root: Path) -> str:
    """sha256 over every file of a FlashInfer tree (root/flashinfer/...), AOT slots excluded."""
    h = hashlib.sha256()
    pkg = root / "flashinfer"
    if not (pkg / "jit").is_dir():
        raise UserError(f"{root}: not a FlashInfer tree (no flashinfer/jit/ inside)")
    for p in sorted(pkg.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if not p.is_file() or rel.startswith(AOT_DIR + "/") or "__pycache__" in rel:
            continue
        h.update(rel.encode() + b"\0" + hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest()


def unpack_flashinfer(wheel: Path, dest: Path) -> Path:
    """The flashinfer/ package of a wheel, without AOT slots, under dest. Returns dest."""
    try:
        with zipfile.ZipFile(wheel) as z:
            for info in z.infolist():
                n = info.filename
                if n.startswith("flashinfer/") and not n.startswith(AOT_DIR + "/") and not info.is_dir():
                    z.extract(info, dest)
    except zipfile.BadZipFile as e:
        raise UserError(f"{wheel}: not a readable wheel: {e}") from None
    return dest


def cache_key(tree: str, module: str, archs: Sequence[str], tc: Toolchain) -> str:
    facts = {"schema": KEY_SCHEMA, "tree": tree, "module": module, "archs": sorted(archs), **tc.key_facts()}
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:32]


def stub_libcuda_dir(cuda_home: Path, cache: Path) -> Path:
    """A directory with a libcuda.so to link `-lcuda` against where the toolkit has no stub (pip-installed nvcc):
    every `CUresult cu*(...)` of the toolkit's cuda.h as an empty function, soname libcuda.so.1, so a module that
    calls the driver API keeps libcuda.so.1 as a dependency and gets the driver's library at load time.
    Cached under cache/stubs/libcuda-<cuda.h sha256>."""
    header = cuda_home / "include" / "cuda.h"
    if not header.is_file():
        raise UserError(f"AOT build: {header} missing (CUDA_HOME is not a CUDA toolkit)")
    d = cache / "stubs" / f"libcuda-{hashlib.sha256(header.read_bytes()).hexdigest()[:16]}"
    if (d / "libcuda.so").exists():
        return d
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if not cc:
        raise UserError("AOT build: no C compiler (gcc/cc) to make a libcuda stub; install gcc or a CUDA toolkit "
                        "with lib64/stubs/libcuda.so")
    # preprocessed, so the names are the versioned ones the headers map to (cuMemAlloc -> cuMemAlloc_v2)
    pre = procs.run([cc, "-E", "-P", "-I", str(header.parent), str(header)], capture_output=True, text=True)
    if pre.returncode != 0:
        raise UserError(f"AOT build: {cc} -E {header} failed (making a libcuda stub): {pre.stderr.strip()[-300:]}")
    names = sorted(set(re.findall(r"\bCUresult\s+(cu[A-Za-z0-9_]+)\s*\(", pre.stdout)))
    d.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".libcuda-", dir=d.parent))
    try:
        (tmp / "stub.c").write_text("".join(f"int {n}(void) {{ return 0; }}\n" for n in names))
        r = procs.run([cc, "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(tmp / "libcuda.so"),
                       str(tmp / "stub.c")], capture_output=True, text=True)
        if r.returncode != 0:
            raise UserError(f"AOT build: building a libcuda stub failed: {r.stderr.strip()[-300:]}")
        (tmp / "stub.c").unlink()
        tmp.chmod(0o755)  # mkdtemp's 0700 would keep other users of a shared cache out
        with contextlib.suppress(OSError):  # another build made it first
            os.replace(tmp, d)
        return d
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _worker_env(tree: Path, archs: Sequence[str], tc: Toolchain, workdir: Path, cache: Path) -> dict[str, str]:
    env = _clean_env()
    env.update(PYTHONPATH=str(tree), CUDA_HOME=tc.cuda_home, FLASHINFER_CUDA_ARCH_LIST=" ".join(archs),
               FLASHINFER_WORKSPACE_BASE=str(workdir / "ws"), PYTHONDONTWRITEBYTECODE="1",
               # the build interpreter's own scripts (ninja) first, as if its environment were activated
               PATH=os.pathsep.join([str(Path(tc.python).parent), env.get("PATH", os.defpath)]))
    cuda_flags = [f"-isystem {d}" for d in tc.include_dirs]
    # keep the build directory out of the binary (__FILE__ in FlashInfer's checks): same sources, same bytes
    cuda_flags.append(f"-Xcompiler=-ffile-prefix-map={tree}=flashinfer-src")
    env["FLASHINFER_EXTRA_CUDAFLAGS"] = " ".join(cuda_flags)
    env["FLASHINFER_EXTRA_CFLAGS"] = f"-ffile-prefix-map={tree}=flashinfer-src"
    if tc.stub_libcuda:
        env["FLASHINFER_EXTRA_LDFLAGS"] = f"-L{stub_libcuda_dir(Path(tc.cuda_home), cache)}"
    return env


def _install(src: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.partial")
    shutil.copyfile(src, tmp)
    os.replace(tmp, dest)


def _imported(import_dir: Path | None, name: str) -> Path | None:
    if import_dir is None:
        return None
    return next((p for p in (import_dir / name / f"{name}.so", import_dir / f"{name}.so") if p.is_file()), None)


NOT_TARGETED = ": its JIT spec does not target that arch (for trtllm_comm on SM12x that is patch P1)"


def aot_modules(flashinfer_tree_or_wheel: str | os.PathLike, modules: Sequence[str] = DEFAULT_MODULES,
                archs: Sequence[str] | str = ("12.0a",), cache: Path | None = None, *,
                python: str | None = None, cuda_home: str | os.PathLike | None = None,
                include_dirs: Sequence[str | os.PathLike] = (), import_dir: Path | None = None,
                build: bool = True, timeout_s: int = 3600, progress: Progress | None = None,
                toolchain: Toolchain | None = None) -> list[AotModule]:
    """The modules for `archs` of a FlashInfer tree (a directory holding flashinfer/) or a flashinfer wheel, in
    the order asked: from the cache, else from import_dir (marked imported), else compiled (when `build`) and
    cached. Each .so is checked to hold SASS for every arch. With build=False no build interpreter or toolkit is
    looked at, so only import_dir can supply modules. python/cuda_home/include_dirs: see find_toolchain (or pass
    its result as toolchain)."""
    say = progress or (lambda s: None)
    archs = parse_archs(archs)
    modules = parse_modules(modules)
    src = Path(flashinfer_tree_or_wheel)
    if not src.exists():
        raise UserError(f"{src}: no such FlashInfer tree or wheel")
    root = cache or cache_dir()
    out: dict[str, AotModule] = {}
    if not build:
        for m in modules:
            so = _imported(import_dir, m)
            if so is None:
                raise UserError(f"AOT module {m}: not in {import_dir or '(no import directory)'} as {m}/{m}.so, and "
                                "there is no build interpreter to compile it with (bundle: --jit-python PY)")
            out[m] = _import(m, so, archs, say)
        return [out[m] for m in modules]
    tc = toolchain or find_toolchain(python, cuda_home, include_dirs)
    with tempfile.TemporaryDirectory(prefix="sglang-blackwell-aot-") as td:
        work = Path(td)
        tree = unpack_flashinfer(src, work / "tree") if src.is_file() else src.resolve()
        digest = tree_digest(tree)
        keys = {m: cache_key(digest, m, archs, tc) for m in modules}
        todo: list[str] = []
        for m in modules:
            so = root / "aot" / keys[m] / f"{m}.so"
            if so.is_file():
                out[m] = AotModule.of(m, so, archs, "cached", keys[m], NOT_TARGETED)
                say(f"AOT {m} for {' '.join(archs)}: cached {so}")
            elif (imp := _imported(import_dir, m)) is not None:
                out[m] = _import(m, imp, archs, say)
            else:
                todo.append(m)
        if todo:
            say(f"AOT compiling {', '.join(todo)} for {' '.join(archs)} with nvcc {tc.nvcc} and {tc.python} "
                f"(minutes per module on a small CPU)")
            built = _run_worker(tree, todo, archs, tc, work, root, timeout_s)
            for m in todo:
                checked = AotModule.of(m, built[m], archs, "built", keys[m], NOT_TARGETED)  # before caching
                key_dir = root / "aot" / keys[m]
                _install(built[m], key_dir / f"{m}.so")
                out[m] = dataclasses.replace(checked, path=key_dir / f"{m}.so")
                meta = {"module": m, "archs": list(archs), "tree_sha256": digest, "toolchain": tc.record(),
                        "sha256": out[m].sha256}
                (key_dir / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
                say(f"AOT {m}: {out[m].path}")
    return [out[m] for m in modules]


def _import(name: str, so: Path, archs: Sequence[str], say: Progress) -> AotModule:
    m = AotModule.of(name, so, archs, "imported")
    say(f"WARNING: AOT {name}: imported from {so}; only its SASS ({' '.join(m.sass)}) is checked, not its sources "
        f"or patches (build it here to be sure)")
    return m


def build_aot_modules(flashinfer_tree_or_wheel: str | os.PathLike, modules: Sequence[str] = DEFAULT_MODULES,
                      archs: Sequence[str] | str = ("12.0a",), cache: Path | None = None, *,
                      python: str | None = None, cuda_home: str | os.PathLike | None = None,
                      include_dirs: Sequence[str | os.PathLike] = (), timeout_s: int = 3600,
                      progress: Progress | None = None, toolchain: Toolchain | None = None) -> dict[str, Path]:
    """Compile FlashInfer JIT modules for `archs` from a FlashInfer tree (a directory holding flashinfer/) or a
    flashinfer wheel. Returns {module name: cached .so}; each .so is checked to hold SASS for every arch.
    python/cuda_home/include_dirs: see find_toolchain (or pass its result as toolchain)."""
    mods = aot_modules(flashinfer_tree_or_wheel, modules, archs, cache, python=python, cuda_home=cuda_home,
                       include_dirs=include_dirs, timeout_s=timeout_s, progress=progress, toolchain=toolchain)
    return {m.name: m.path for m in mods}


def _run_worker(tree: Path, modules: Sequence[str], archs: Sequence[str], tc: Toolchain, work: Path, cache: Path,
                timeout_s: int) -> dict[str, Path]:
    env = _worker_env(tree, archs, tc, work, cache)
    outdir = work / "out"
    cmd = [tc.python, str(WORKER), str(outdir), *[f"{m}={':'.join(MODULES[m])}" for m in modules]]
    try:
        r = procs.run(cmd, capture_output=True, text=True, env=env, timeout=timeout_s, cwd=work)
    except subprocess.TimeoutExpired:
        raise UserError(f"AOT build of {', '.join(modules)} did not finish within {timeout_s} s") from None
    results = {}
    for line in r.stdout.splitlines():
        if line.startswith("AOT-RESULT "):
            d = json.loads(line[len("AOT-RESULT "):])
            results[d["name"]] = d
    for m in modules:
        d = results.get(m)
        if d is None or "error" in d:
            why = d["error"] if d else (r.stderr.strip() or f"worker exited {r.returncode}")
            if len(why) > 4000:
                why = why[:600] + "\n[...]\n" + why[-3000:]
            raise UserError(f"AOT module {m} for {' '.join(archs)} failed to build: {why}")
        if not Path(d["flashinfer"]).resolve().is_relative_to(tree):
            raise UserError(f"AOT module {m}: the build imported flashinfer from {d['flashinfer']}, not from the "
                            f"tree {tree} (an installed flashinfer shadows it?)")
    return {m: outdir / m / f"{m}.so" for m in modules}


@dataclass
class AotRequest:
    """What `build --aot` asks for."""

    archs: tuple[str, ...]
    modules: tuple[str, ...] = DEFAULT_MODULES
    python: str | None = None
    cuda_home: str | None = None
    include_dirs: tuple[str, ...] = ()

    @classmethod
    def parse(cls, archs: str, modules: str | None = None, python: str | None = None) -> AotRequest:
        return cls(parse_archs(archs), parse_modules(modules) if modules else DEFAULT_MODULES, python)


def add_aot_modules(wheel: Path, req: AotRequest, cache: Path | None = None,
                    progress: Progress | None = None) -> tuple[str, dict]:
    """Compile (or take from the cache) the requested modules for a built flashinfer wheel and put them into its
    AOT slots, in place (atomically). Returns (new sha256, what the manifest and the wheel's marker record)."""
    from .wheel import add_files

    tc = find_toolchain(req.python, req.cuda_home, req.include_dirs)
    built = aot_modules(wheel, req.modules, req.archs, cache, progress=progress, toolchain=tc)
    files = {aot_slot(m.name): m.path.read_bytes() for m in built}
    record = {m.name: {"path": aot_slot(m.name), "sha256": m.sha256, "size": m.size, "sass": list(m.sass)}
              for m in built}
    info = {"archs": list(req.archs), "modules": record, "toolchain": tc.record()}
    digest = add_files(wheel, files, {"aot": info}, mode=0o755)
    return digest, info
