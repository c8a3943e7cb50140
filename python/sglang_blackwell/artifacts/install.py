"""`sglang-blackwell install`: pip install the patched wheels of a base (building them if needed) with everything
they need, hash-checked, from the base's lock for the environment's Python (patches/<base>/locks/py3XY.txt,
lock.py). Normally one command:

    python -m pip install --require-hashes -r <lock> -r <dist>/hashes-<base>-py3XY.txt

the lock plus our wheels with their sha256: pip installs exactly the locked files, through the user's index or
mirror, refuses any file whose hash is not listed, and fails if anything the wheels need is not in the lock.

When the lock lists pins the index cannot serve (`lock-outside`: the 0.5.9 line's torch +cu130 and its PyTorch
companions, the cu130 kernel wheel from its GitHub release), two commands:

    python -m pip install --require-hashes --no-deps -r <lock> -r <hashes>       every locked file, hash-checked
    python -m pip install [--extra-index-url <their index>] <the outside pins>   then those, and what they need
                                                                                 beyond the lock (their CUDA wheels)

in that order, so that nothing the lock pins is first installed unchecked by the second command (pip does not
re-check what is already installed). The second is checked only by the index's own sha256 where it publishes
one: base.toml records no hash for those files.

Before anything is installed, dist/ is checked against the base as it is now: the build manifest
(manifest-<base>.json) must be of this base's local label, series, requirement rewrites and upstream pins, and
every wheel must have the size and sha256 the manifest records. A stale dist/ (a label bump, a changed series,
wheels missing) is rebuilt; a wheel that differs from its manifest entry (modified after the build) is refused.
The series itself must pass the checks build makes (patchset.check.gate: DEP-3 headers, patch paths, the label
lock). The hashes file is written next to the wheels. `--dry-run` writes nothing (no build, no hashes file) and
changes no environment: it prints the commands install would run, and says what it would build and write first.
`--no-deps`: only our wheels (`--no-deps --force-reinstall`); `--upstream` puts the unpatched pinned wheels back
(rollback)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from .. import procs
from ..errors import IntegrityError, UserError
from ..patchset.bases import Base, python_version, series_for
from ..patchset.check import gate
from ..patchset.fetch import cached_path, fetch, sha256_file
from ..paths import write_atomic
from .build import build, manifest_path, planned_files, read_manifest
from .deps import Target
from .lock import Lock, load_lock
from .wheel import patched_wheel_filename


@dataclass
class DistState:
    wheels: list[Path]  # one per patched package: the wheel install takes (may not exist yet while stale)
    stale: str | None  # why dist/ must be rebuilt first (None: it is current)


def dist_state(base: Base, dist: Path, python: str) -> DistState:
    """What dist/ holds for CPython `python` against the base as it is now (module docstring): the wheels to
    install, or why it is stale. A wheel that differs from the size and sha256 its manifest records is refused
    (IntegrityError naming the wheel and the manifest)."""
    planned = planned_files(base, python, "Python")
    expected = [dist / patched_wheel_filename(planned[p.package][0].filename, base.local_version(p))
                for p in base.patched]
    m = read_manifest(dist, base)
    mp = manifest_path(dist, base)
    if m is None:
        return DistState(expected, f"{mp} is missing")
    if m["base"] != base.name or m["local_label"] != base.local_label:
        return DistState(expected, f"{mp} is of base {m['base']} +{m['local_label']}, the base is now "
                                   f"{base.name} +{base.local_label}")
    by_pkg = {p["package"]: p for p in m["packages"]}
    wheels: list[tuple[Path, dict]] = []
    for pkg in base.patched:
        mine = by_pkg.get(pkg.package)
        if mine is None:
            return DistState(expected, f"{mp} has no {pkg.package} wheels")
        if mine["series_sha256"] != series_for(base, pkg.package).sha256:
            return DistState(expected, f"the {pkg.package} series changed since {mp} was written")
        if mine["local_version"] != base.local_version(pkg) or mine.get("requires_rewrite", {}) != \
                pkg.requires_rewrite:
            return DistState(expected, f"{mp} records {pkg.package} {mine['local_version']} with other "
                                       "requirement rewrites or another version than base.toml")
        pins = {(a.filename, a.sha256) for a in planned[pkg.package]}
        w = next((w for w in mine["wheels"] if (w["upstream"]["filename"], w["upstream"]["sha256"]) in pins), None)
        if w is None:
            return DistState(expected, f"{mp} has no {pkg.package} wheel made from the upstream file base.toml "
                                       f"pins for Python {python}")
        wheels.append((dist / w["output"]["filename"], w["output"]))
    missing = [p for p, _ in wheels if not p.is_file()]
    if missing:
        return DistState(expected, f"{', '.join(map(str, missing))} missing")
    for path, out in wheels:
        size = path.stat().st_size
        digest = sha256_file(path) if size == out["size"] else None
        if digest != out["sha256"]:
            got = f"sha256 {digest}" if digest else f"size {size}"
            want = f"sha256 {out['sha256']}" if digest else f"size {out['size']}"
            raise IntegrityError(f"{path}: {got}, but {mp} records {want}: the wheel was modified after the build; "
                                 f"nothing was installed (rebuild: sglang-blackwell build --base {base.name} --out "
                                 f"{dist})")
    return DistState([p for p, _ in wheels], None)


def hashes_path(base: Base, dist: Path, python: str) -> Path:
    major, minor = Target(python).version_tuple
    return dist / f"hashes-{base.name}-py{major}{minor}.txt"


def write_hashes(wheels: list[Path], path: Path) -> Path:
    """Our wheels as pip requirement lines with their sha256 (pip's hash-checking mode wants one for every file)."""
    write_atomic(path, "".join(f"{w.resolve()} --hash=sha256:{sha256_file(w)}\n" for w in wheels))
    return path


def pip_commands(lock: Lock | None, wheels: list[Path], *, python_exe: str, hashes: Path | None) -> list[list[str]]:
    """The pip commands that install our wheels: with `lock` and `hashes`, those of the module docstring; without
    (`--no-deps`), our wheels alone."""
    pip = [python_exe, "-m", "pip", "install"]
    if lock is None or hashes is None:
        return [[*pip, *map(str, wheels), "--no-deps", "--force-reinstall"]]
    assert lock.path is not None
    hashed = [*pip, "--require-hashes", "-r", str(lock.path), "-r", str(hashes)]
    if not lock.outside:
        return [hashed]
    indexes = dict.fromkeys(o.index_url for o in lock.outside if " @ " not in o.requirement and o.index_url)
    return [[*hashed[:5], "--no-deps", *hashed[5:]],
            [*pip, *[a for i in indexes for a in ("--extra-index-url", i)], *[o.requirement for o in lock.outside]]]


def python_of(python_exe: str, flag: str = "--python") -> str:
    """MAJOR.MINOR of an interpreter, asked by running it; an error naming the flag (as typed) when that fails."""
    try:
        py = procs.run([python_exe, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                       capture_output=True, text=True, timeout=120)
    except FileNotFoundError:
        raise UserError(f"{flag} {python_exe}: no such interpreter") from None
    except PermissionError:
        raise UserError(f"{flag} {python_exe}: not executable") from None
    except (OSError, subprocess.TimeoutExpired) as e:
        raise UserError(f"{flag} {python_exe}: cannot run it ({e})") from None
    if py.returncode != 0 or not py.stdout.strip():
        raise UserError(f"{flag} {python_exe}: cannot run it to find its Python version (exit "
                        f"{py.returncode})")
    got = py.stdout.strip().splitlines()[-1]
    try:
        python_version(got, f"{flag} {python_exe}: its version")
    except UserError:
        raise UserError(f"{flag} {python_exe}: not a CPython interpreter (it answered {got[:60]!r})") from None
    return got


def install(base: Base, dist: Path, *, python_exe: str = sys.executable, no_deps: bool = False,
            upstream: bool = False, dry_run: bool = False, cache: Path | None = None,
            progress=None, python_flag: str = "--python") -> list[list[str]]:
    """Run (or with dry_run only return) the pip commands; returns them. python_flag: the flag the interpreter
    came by, as typed (errors name it)."""
    say = progress or (lambda s: None)
    pyver = python_of(python_exe, python_flag)
    if upstream:
        wheels = []
        for pkg in base.patched:
            arts = pkg.files_for(pyver)
            if not arts:
                raise UserError(f"base {base.name}: no {pkg.distribution} wheel pinned for Python {pyver}")
            if dry_run:  # the cache entry it would use, fetched only by a real run
                wheels.append(cached_path(arts[0], cache))
                if not wheels[-1].is_file():
                    say(f"dry run: {arts[0].filename} is not in the cache: install fetches it first")
            else:
                wheels.append(fetch(arts[0], cache, progress=progress))
        cmds = [[python_exe, "-m", "pip", "install", "--force-reinstall", "--no-deps", *map(str, wheels)]]
    else:
        if dist.exists() and not dist.is_dir():
            raise UserError(f"--dist {dist}: is not a directory (the build output: wheels and manifest)")
        gate(base)  # a series `check` refuses is installed neither from dist/ nor by a build
        lock = None if no_deps else load_lock(base, pyver)  # before any build: a missing lock fails fast
        state = dist_state(base, dist, pyver)
        if state.stale is not None:
            if dry_run:
                say(f"dry run: {dist} is stale ({state.stale}): install builds it first (sglang-blackwell build "
                    f"--base {base.name} --python-version {pyver} --out {dist})")
            else:
                say(f"{dist} is stale ({state.stale}): building")
                build(base, dist, python=pyver, cache=cache, progress=progress, out_flag="--dist",
                      python_flag=f"{python_flag} {python_exe}: Python")
                state = dist_state(base, dist, pyver)
                if state.stale is not None:
                    raise UserError(f"{dist}: still stale after the build ({state.stale})")
        wheels = state.wheels
        hashes = None if no_deps else hashes_path(base, dist, pyver)
        if hashes is not None:
            if dry_run:
                say(f"dry run: install writes {hashes} first ({len(wheels)} lines: our wheels with their sha256)")
            else:
                write_hashes(wheels, hashes)
        cmds = pip_commands(lock, wheels, python_exe=python_exe, hashes=hashes)
        if lock is not None and lock.outside and progress:
            progress(f"not in the lock (the index cannot serve them), installed after it without a pinned hash: "
                     f"{', '.join(o.requirement.split(' @ ')[0] for o in lock.outside)}")
    if not dry_run:
        for cmd in cmds:
            r = procs.run(cmd, grace_s=60.0)  # Ctrl-C: pip gets SIGINT and rolls back what it half installed
            if r.returncode != 0:
                raise UserError(f"pip install failed (exit {r.returncode}): {' '.join(cmd)}")
    return cmds
