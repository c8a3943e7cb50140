"""`sglang-blackwell bundle`: an offline wheelhouse. Everything a GPU machine without network needs to install
the patched stack of a base on top of an existing torch, with a manifest (sha256 of every file) and an install
script that verifies it before installing:

  wheels/   our patched wheels (build.build), the kernel wheel (optionally stripped: strip.py), the dependency
            wheels the target lacks (deps.py)
  aot/      optional prebuilt FlashInfer JIT modules, aot/<name>/<name>.so (aot.py)
  manifest.json, install.sh, install_bundle.py (bundle_installer.py; the manifest records their sha256 too, so the
            bundle id covers them; `check_line` is the sha256sum -c the user runs on the target before them)

With --chunk-mib N the files are split over chunk directories c1, c2, ... (each under N MiB with its own copy of
the manifest and install script) that can travel separately; install.sh brings them together (--stage).
What a normal launch of the base line imports is data (patches/<base>/launch_deps.toml, [launch_deps]), and so is
what upstream's benchmark client `python -m sglang.bench_serving` imports beyond it ([bench_serving_deps]): a known
dependency that neither the bundle nor the --installed list has is a warning, one line each, naming it and what
it is needed for (manifest: dependencies.launch_path, dependencies.bench_serving).
The bundle is written to a temporary directory next to --out and renamed into place when complete: a failed run
leaves nothing half-written. The same inputs give the same bytes (no timestamps; wheels are reproducible).
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from .. import __version__, procs
from ..errors import IntegrityError, UserError
from ..patchset.bases import Artifact, Base, series_for
from ..patchset.check import gate
from ..patchset.fetch import fetch, sha256_file
from ..patchset.plural import counted
from ..paths import cache_dir, os_reason
from ..tomlio import load_file
from .aot import DEFAULT_MODULES, AotModule, aot_modules
from .build import build, planned_files
from .bundle_installer import content_id
from .deps import (
    Downloader,
    Installed,
    Selection,
    Target,
    WheelInfo,
    collect_needs,
    drop_present,
    from_lock,
    from_pins,
    read_installed,
    read_pins,
    wheel_info,
)
from .lock import load_lock, locked, locked_pins
from .strip import KernelPart, strip_kernel_wheel

SCHEMA = "sglang-blackwell/bundle/1"
KERNEL_NAMES = ("sglang-kernel", "sgl-kernel")
INSTALLER = Path(__file__).with_name("bundle_installer.py")
LAUNCH_DEPS_FILE = "launch_deps.toml"  # in patches/<base>/: what a normal launch of that line imports
# its sections: (TOML table, manifest key under "dependencies", who needs them); [launch_deps] is required
DEPS_SECTIONS = (("launch_deps", "launch_path", "a normal launch"),
                 ("bench_serving_deps", "bench_serving", "`python -m sglang.bench_serving`"))
INSTALL_SH = """#!/usr/bin/env bash
# Verify this sglang-blackwell bundle (size + sha256 of every file in manifest.json), then install it.
# bash install.sh --help; PYTHON=/path/to/python3 selects the interpreter (default: python3).
# Check this file and install_bundle.py first, with the `check first:` line `sglang-blackwell bundle` printed
# (sha256sum -c): no file of the bundle can vouch for itself. -I: no module of this directory, the working
# directory or PYTHONPATH is imported in place of the standard library's.
set -euo pipefail
here="$(CDPATH='' cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)"
exec "${PYTHON:-python3}" -I "$here/install_bundle.py" "$@"
"""
Progress = Callable[[str], None]


def installer_files() -> dict[str, bytes]:
    """What runs on the target, byte for byte as every chunk carries it."""
    return {"install.sh": INSTALL_SH.encode(), "install_bundle.py": INSTALLER.read_bytes()}


def installer_entry() -> dict[str, dict]:
    """manifest["installer"]: the size and sha256 of install.sh and install_bundle.py (so the bundle id covers
    them; install_bundle.py refuses to run as another bundle's installer)."""
    return {n: {"size": len(b), "sha256": hashlib.sha256(b).hexdigest()} for n, b in installer_files().items()}


def check_line(directory: str, manifest: dict) -> str:
    """The check to run on the target before anything of the bundle in `directory` runs: sha256sum -c of install.sh
    and install_bundle.py against the hashes this machine recorded (the same for every chunk)."""
    inst = manifest["installer"]
    d = shlex.quote(directory)
    return (f"(cd {d} && printf '%s  %s\\n' {inst['install.sh']['sha256']} install.sh "
            f"{inst['install_bundle.py']['sha256']} install_bundle.py | sha256sum -c)")


@dataclass
class BundleOptions:
    python: str
    strip: list[KernelPart] = field(default_factory=list)
    installed: Path | None = None
    deps: Path | None = None
    exclude: frozenset[str] = frozenset()
    jit_archs: Sequence[str] = ()  # prebuilt FlashInfer modules (aot.py): for these archs
    jit_modules: Sequence[str] = ()  # which (empty: aot.DEFAULT_MODULES)
    jit_python: str | None = None  # the build interpreter; without it modules only come from jit_cache
    jit_cache: Path | None = None  # import modules built elsewhere (marked imported)
    chunk_mib: float | None = None
    kernel_wheel: Path | None = None
    no_kernel: bool = False
    index_url: str | None = None
    find_links: tuple[str, ...] = ()
    launch_deps: Path | None = None  # what a normal launch imports (default: the base's launch_deps.toml)


@dataclass
class BundleResult:
    out: Path
    manifest: dict
    chunks: list[tuple[str, int]]  # (directory name, bytes); [("", n)] when not chunked

    @property
    def bundle_id(self) -> str:
        return self.manifest["bundle_id"]


def is_bundle(d: Path) -> bool:
    for m in [d / "manifest.json", *sorted(d.glob("c*/manifest.json"))]:
        try:
            if json.loads(m.read_text()).get("schema") == SCHEMA:
                return True
        except (OSError, ValueError):
            continue
    return False


def kernel_artifact(base: Base, python: str) -> Artifact:
    for name in KERNEL_NAMES:
        if not any(r.name == name for r in base.runtime):
            continue
        arts = [a for a in base.runtime_artifact(name).files if a.fits_python(python)]
        usable = [a for a in arts if a.url and a.sha256 != "unknown"]
        if usable:
            return usable[0]
        raise UserError(f"base {base.name}: the {name} wheel for Python {python} has no pinned URL + sha256 in "
                        f"{base.dir / 'base.toml'} (cannot verify it): pass --kernel-wheel FILE or --no-kernel")
    raise UserError(f"base {base.name}: no kernel wheel ({' / '.join(KERNEL_NAMES)}) among its runtime facts: "
                    "pass --kernel-wheel FILE or --no-kernel")


def _kernel(base: Base, opts: BundleOptions, work: Path, cache: Path, say: Progress) -> tuple[WheelInfo, dict] | None:
    if opts.no_kernel:
        return None
    if opts.kernel_wheel:
        src = opts.kernel_wheel
        if not src.is_file():
            raise UserError(f"--kernel-wheel {src}: no such file")
        sha = sha256_file(src)
        pins = [a for n in KERNEL_NAMES if any(r.name == n for r in base.runtime)
                for a in base.runtime_artifact(n).files if a.filename == src.name]
        if pins and pins[0].sha256 not in ("unknown", sha):
            raise IntegrityError(f"--kernel-wheel {src}: sha256 {sha} != the pin {pins[0].sha256} in "
                                 f"{base.dir / 'base.toml'}")
        pinned = bool(pins) and pins[0].sha256 == sha
        if not pinned:
            say(f"note: --kernel-wheel {src.name} is not the base's pinned kernel wheel (recorded as unpinned)")
    else:
        art = kernel_artifact(base, opts.python)
        src, sha, pinned = fetch(art, cache, progress=say), art.sha256, True
    upstream = {"filename": src.name, "sha256": sha, "pinned": pinned}
    if not opts.strip:
        return wheel_info(src, "kernel"), {"upstream": upstream, "stripped": []}
    (work / "kernel").mkdir(parents=True, exist_ok=True)
    s = strip_kernel_wheel(src, work / "kernel", opts.strip, src_sha256=sha)
    gone = sum(r.size for r in s.removed)
    say(f"stripped {src.name} -> {s.path.name} ({s.path.stat().st_size / 1e6:.1f} MB; removed "
        f"{', '.join(s.parts)}: {counted(len(s.removed), 'file')}, {gone / 1e6:.0f} MB unpacked)")
    for p in opts.strip:
        if p.note:
            say(f"note: --strip {p.name}: {p.note}")
    return wheel_info(s.path, "kernel"), {
        "upstream": upstream, "stripped": list(s.parts),
        "removed": [{"path": r.path, "size": r.size, "part": r.part} for r in s.removed]}


def _dependencies(base: Base, roots: list[WheelInfo], opts: BundleOptions, target: Target, cache: Path,
                  say: Progress) -> tuple[Selection, dict]:
    installed = read_installed(opts.installed) if opts.installed else None
    dl = Downloader(target, cache, opts.index_url, opts.find_links, say)
    exclude = opts.exclude | (frozenset(KERNEL_NAMES) if opts.no_kernel else frozenset())
    info: dict = {"installed_file": str(opts.installed) if opts.installed else None,
                  "installed_sha256": sha256_file(opts.installed) if opts.installed else None,
                  "exclude": sorted(opts.exclude)}
    if opts.deps:
        pins = read_pins(opts.deps)
        lock = load_lock(base, opts.python)  # every pin must agree with it; its hashes check every wheel
        sel = from_pins(roots, pins, locked_pins([p for p in pins if p.name not in exclude], lock, opts.deps),
                        opts.deps, installed, target, dl, exclude)
        info.update(mode="deps-file", deps_file=str(opts.deps), deps_sha256=sha256_file(opts.deps))
    elif installed is not None:
        lock = load_lock(base, opts.python)
        sel = from_lock(roots, locked(lock), installed, target, dl, exclude)
        info.update(mode="automatic")
    else:
        sel = drop_present(roots, None, target)
        lock = None
        info.update(mode="none")
        say("note: no --deps and no --installed: the bundle carries no dependencies (the target must have them)")
    if lock is not None:
        info["lock"] = {"path": f"patches/{base.name}/locks/{lock.path.name}", "inputs": lock.inputs}
    info["dropped"] = [{"name": w.name, "version": str(w.version), "installed": str(i.version)}
                       for w, i in sel.dropped]
    info["unmet"] = sel.unmet
    for w, i in sel.dropped:
        say(f"not carried: {w.name} {w.version} (target has {i.version}, which every bundled wheel accepts)")
    info.update(_launch_path(base, sel, installed, opts, say))
    return sel, info


def load_deps_sections(base: Base, path: Path | None = None) -> dict[str, dict[str, str]] | None:
    """Every section of patches/<base>/launch_deps.toml (or `path`): table name -> (distribution -> what it is
    needed for); [launch_deps] required, [bench_serving_deps] optional (then {}); None when the line has no file."""
    path = path or base.dir / LAUNCH_DEPS_FILE
    if not path.exists():
        return None
    data = load_file(path, "the launch-path dependencies")
    names = [t for t, _, _ in DEPS_SECTIONS]
    unknown = sorted(set(data) - set(names))
    if unknown:
        raise UserError(f"{path}: unknown table(s) {', '.join(unknown)} (known: {', '.join(names)})")
    out = {}
    for table in names:
        deps = data.get(table, None if table == "launch_deps" else {})
        if not isinstance(deps, dict) or not all(isinstance(v, str) and v for v in deps.values()):
            raise UserError(f"{path}: [{table}] must map distribution names to what {_who(table)} needs them for")
        out[table] = {canonicalize_name(k): v for k, v in deps.items()}
    return out


def _who(table: str) -> str:
    return next(who for t, _, who in DEPS_SECTIONS if t == table)


def load_launch_deps(base: Base, path: Path | None = None, table: str = "launch_deps") -> dict[str, str] | None:
    """The known dependencies of a base line in one section of launch_deps.toml (default: what a normal launch
    imports; distribution -> what it is needed for); None when the line has no such file."""
    sections = load_deps_sections(base, path)
    return None if sections is None else sections[table]


def launch_path_gaps(known: dict[str, str], carried: set[str], installed: dict[str, Installed] | None) -> list[dict]:
    """Known launch-path dependencies that the bundle does not carry and the target (if known) does not have."""
    status = "not carried, not installed" if installed is not None else "not carried (target unknown: no --installed)"
    return [{"name": n, "needed_for": why, "status": status} for n, why in sorted(known.items())
            if n not in carried and (installed is None or n not in installed)]


def _launch_path(base: Base, sel: Selection, installed: dict[str, Installed] | None, opts: BundleOptions,
                 say: Progress) -> dict:
    """The manifest's dependencies.launch_path and dependencies.bench_serving (one per DEPS_SECTIONS entry)."""
    path = opts.launch_deps or base.dir / LAUNCH_DEPS_FILE
    sections = load_deps_sections(base, path)
    if sections is None:
        say(f"note: base {base.name} has no launch-path list ({path} is missing): nothing checks that the "
            "bundle carries what a normal launch imports")
        return {"launch_path": {"file": str(path), "known": None, "missing": []}}
    carried = {w.name for w in sel.wheels}
    out = {}
    for table, key, who in DEPS_SECTIONS:
        known = sections[table]
        missing = launch_path_gaps(known, carried, installed)
        if installed is None:
            if missing:
                say(f"note: no --installed: {len(missing)} of the {len(known)} distributions {who} of "
                    f"{base.name} imports are not carried (the target must have them; dependencies.{key})")
        else:
            for m in missing:
                say(f"warning: {m['name']} is neither in the bundle nor on the target (--installed); {who} "
                    f"needs it: {m['needed_for']}")
        out[key] = {"file": str(path), "known": len(known), "missing": missing}
    return out


def _entries(sel: Selection, kernel_meta: dict | None, patched_meta: dict[str, dict], pins_line: dict[str, int],
             target: Target, aot: list[AotModule], opts: BundleOptions) -> list[tuple[dict, Path]]:
    needs = collect_needs(sel.wheels, target)
    out = []
    for w in sel.wheels:
        e = {"path": f"wheels/{w.path.name}", "kind": w.kind, "distribution": w.name, "version": str(w.version)}
        if w.kind == "patched":
            e.update(patched_meta[w.path.name])
        elif w.kind == "kernel":
            e.update(kernel_meta or {})
        else:
            e["required_by"] = sorted({n.by for n in needs.get(w.name, [])})
            e["source"] = f"{opts.deps}:{pins_line[w.name]}" if w.name in pins_line else "automatic"
        out.append((e, w.path))
    out += [(m.bundle_entry(), m.path) for m in aot]
    return out


def assign_chunks(entries: list[tuple[dict, Path]], chunk_mib: float | None) -> list[str]:
    """First-fit decreasing by size; returns the chunk names in order. Sets e["chunk"]."""
    if not chunk_mib:
        for e, _ in entries:
            e["chunk"] = ""
        return []
    # every chunk also holds install.sh, install_bundle.py and the manifest (which lists all files)
    overhead = len(INSTALL_SH) + INSTALLER.stat().st_size + 600 * (len(entries) + 10) + 4096
    limit = int(chunk_mib * 2**20) - overhead
    bins: list[int] = []
    for e, _ in sorted(entries, key=lambda x: (-x[0]["size"], x[0]["path"])):
        if e["size"] > limit:
            raise UserError(f"--chunk-mib {chunk_mib}: {e['path']} alone is {e['size'] / 2**20:.1f} MiB "
                            f"(a chunk holds {limit / 2**20:.1f} MiB of files)")
        i = next((i for i, used in enumerate(bins) if used + e["size"] <= limit), None)
        if i is None:
            bins.append(0)
            i = len(bins) - 1
        bins[i] += e["size"]
        e["chunk"] = f"c{i + 1}"
    return [f"c{i + 1}" for i in range(len(bins))]


def make_bundle(base: Base, out: Path, opts: BundleOptions, *, cache: Path | None = None,
                progress: Progress | None = None) -> BundleResult:
    say = progress or (lambda s: None)
    cache = cache or cache_dir()
    target = Target(opts.python)
    python_tag = target.python_tag  # validates --python
    out = out.resolve()
    if out.exists() and not (out.is_dir() and (is_bundle(out) or not any(out.iterdir()))):
        raise UserError(f"--out {out}: exists and is not a bundle; choose another directory or remove it")
    if opts.strip and opts.no_kernel:
        raise UserError("--strip needs a kernel wheel to strip (not with --no-kernel)")
    if not (opts.no_kernel or opts.kernel_wheel):
        kernel_artifact(base, opts.python)  # fail before any work when the kernel cannot be verified
    if opts.kernel_wheel and not opts.kernel_wheel.is_file():
        raise UserError(f"--kernel-wheel {opts.kernel_wheel}: no such file")
    if opts.kernel_wheel:
        try:
            parse_wheel_filename(opts.kernel_wheel.name)
        except InvalidWheelFilename as e:
            raise UserError(f"--kernel-wheel {opts.kernel_wheel}: not a wheel file name ({e})") from None
    if opts.jit_archs and not (opts.jit_python or opts.jit_cache):
        raise UserError("--jit-archs: no --jit-python to build the modules with (a venv with the target's "
                        "torch, apache-tvm-ffi, ninja and numpy: see benchmark/lab/README.md) nor "
                        "--jit-cache DIR holding <name>/<name>.so")
    if opts.jit_archs and not any(p.package == "flashinfer" for p in base.patched):
        raise UserError(f"--jit-archs: base {base.name} has no patched flashinfer wheel")
    # every input file is read (and refused) before anything is built or written
    if opts.installed:
        read_installed(opts.installed)
    if opts.deps:
        read_pins(opts.deps)
    if opts.deps or opts.installed:
        load_lock(base, opts.python)
    gate(base)
    planned_files(base, opts.python)
    blocker = next((p for p in out.parents if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        raise UserError(f"--out {out}: {blocker} is a file, not a directory; nothing was written")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"--out {out}: cannot create {out.parent} ({os_reason(e)}); nothing was written") from None
    _remove_stale(out)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.bundle-tmp-{os.getpid()}-", dir=out.parent))
    try:
        work = tmp / ".work"
        built, _ = build(base, work / "dist", python=opts.python, cache=cache, progress=say)
        if not built:
            raise UserError(f"base {base.name}: no patched wheels pinned for Python {opts.python}")
        patched_meta = {}
        roots = []
        for b in built:
            pkg = base.package(b.package)
            patched_meta[b.path.name] = {
                "package": b.package, "series_sha256": series_for(base, b.package).sha256,
                "patches": [p.name for p in series_for(base, b.package).patches],
                "upstream": {"filename": b.upstream_filename, "sha256": b.upstream_sha256},
                "local_version": base.local_version(pkg)}
            roots.append(wheel_info(b.path, "patched", always=True))
        kernel = _kernel(base, opts, work, cache, say)
        kernel_meta = None
        if kernel:
            roots.append(kernel[0])
            kernel_meta = kernel[1]
        sel, deps_info = _dependencies(base, roots, opts, target, cache, say)
        aot: list[AotModule] = []
        if opts.jit_archs:
            fi = next((b for b in built if b.package == "flashinfer"), None)
            if fi is None:
                raise UserError(f"--jit-archs: base {base.name} has no patched flashinfer wheel")
            if not (opts.jit_python or opts.jit_cache):
                raise UserError("--jit-archs: no --jit-python to build the modules with (a venv with the target's "
                                "torch, apache-tvm-ffi, ninja and numpy: see benchmark/lab/README.md) nor "
                                "--jit-cache DIR holding <name>/<name>.so")
            aot = aot_modules(fi.path, opts.jit_modules or DEFAULT_MODULES, opts.jit_archs, cache,
                              python=opts.jit_python, import_dir=opts.jit_cache, build=bool(opts.jit_python),
                              progress=say)
        pins_line = {p.name: p.line for p in read_pins(opts.deps)} if opts.deps else {}
        entries = _entries(sel, kernel_meta, patched_meta, pins_line, target, aot, opts)
        for e, src in entries:
            e["size"] = src.stat().st_size
            e["sha256"] = sha256_file(src)
        chunks = assign_chunks(entries, opts.chunk_mib)
        files = sorted((e for e, _ in entries), key=lambda e: (e["chunk"], e["kind"] != "patched", e["path"]))
        manifest = {
            "schema": SCHEMA, "tool": f"sglang-blackwell {__version__}",
            "base": base.name, "local_label": base.local_label, "cuda": base.cuda, "python": opts.python,
            "python_tag": python_tag, "platform": target.platforms[0],
            "chunks": chunks, "dependencies": deps_info,
            "jit": {"archs": list(opts.jit_archs), "modules": [m.name for m in aot]},
            "files": files,
            "installer": installer_entry(),
        }
        manifest["bundle_id"] = content_id(manifest)  # install.sh recomputes it (bundle_installer.py)
        src_of = {e["path"]: src for e, src in entries}
        dirs = [(c, tmp / c) for c in chunks] or [("", tmp)]
        sizes = []
        for chunk, d in dirs:
            d.mkdir(parents=True, exist_ok=True)
            for f in files:
                if f["chunk"] == chunk:
                    dest = d / f["path"]
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(src_of[f["path"]], dest)
            for name, data in installer_files().items():
                (d / name).write_bytes(data)
            (d / "install.sh").chmod(0o755)
            (d / "manifest.json").write_text(json.dumps(dict(manifest, chunk=chunk), indent=1, sort_keys=True)
                                             + "\n")
        shutil.rmtree(work)
        for chunk, d in dirs:
            sizes.append((chunk, sum(p.stat().st_size for p in d.rglob("*") if p.is_file())))
        _replace_dir(tmp, out)
        return BundleResult(out, manifest, sizes)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _replace_dir(new: Path, out: Path) -> None:
    if not out.exists():
        os.replace(new, out)
        return
    old = out.with_name(f".{out.name}.bundle-old-{os.getpid()}")
    os.replace(out, old)
    try:
        os.replace(new, out)
    except OSError:
        os.replace(old, out)
        raise
    shutil.rmtree(old, ignore_errors=True)


def _remove_stale(out: Path) -> None:
    for d in out.parent.glob(f".{out.name}.bundle-*-*"):
        try:
            pid = int(d.name.rsplit(".bundle-", 1)[1].split("-")[1])
        except (IndexError, ValueError):
            continue
        if not procs.alive(pid):
            shutil.rmtree(d, ignore_errors=True)
