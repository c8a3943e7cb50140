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

The hashes file is written next to the wheels (also with --dry-run, which prints the commands and changes no
environment). `--no-deps`: only our wheels (`--no-deps --force-reinstall`); `--upstream` puts the unpatched pinned
wheels back (rollback)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ..errors import UserError
from ..patchset.bases import Base
from ..patchset.fetch import fetch, sha256_file
from ..paths import write_atomic
from .build import build, manifest_path
from .deps import Target
from .lock import Lock, load_lock


def patched_wheels(base: Base, dist: Path, python: str) -> list[Path]:
    mp = manifest_path(dist, base)
    if not mp.exists():
        return []
    m = json.loads(mp.read_text())
    out = []
    for pkg in m["packages"]:
        for w in pkg["wheels"]:
            up = next(a for a in base.package(pkg["package"]).files if a.filename == w["upstream"]["filename"])
            if up.fits_python(python) and (dist / w["output"]["filename"]).exists():
                out.append(dist / w["output"]["filename"])
    return out


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


def install(base: Base, dist: Path, *, python_exe: str = sys.executable, no_deps: bool = False,
            upstream: bool = False, dry_run: bool = False, cache: Path | None = None,
            progress=None) -> list[list[str]]:
    """Run (or with dry_run only return) the pip commands; returns them."""
    py = subprocess.run([python_exe, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                        capture_output=True, text=True)
    if py.returncode != 0:
        raise UserError(f"{python_exe}: cannot run it to find its Python version")
    pyver = py.stdout.strip()
    if upstream:
        wheels = []
        for pkg in base.patched:
            arts = pkg.files_for(pyver)
            if not arts:
                raise UserError(f"base {base.name}: no {pkg.distribution} wheel pinned for Python {pyver}")
            wheels.append(fetch(arts[0], cache, progress=progress))
        cmds = [[python_exe, "-m", "pip", "install", "--force-reinstall", "--no-deps", *map(str, wheels)]]
    else:
        lock = None if no_deps else load_lock(base, pyver)  # before any build: a missing lock fails fast
        wheels = patched_wheels(base, dist, pyver)
        if len(wheels) < len(base.patched):
            build(base, dist, python=pyver, cache=cache, progress=progress)
            wheels = patched_wheels(base, dist, pyver)
        if len(wheels) < len(base.patched):
            raise UserError(f"base {base.name}: no patched wheels for Python {pyver} in {dist}")
        hashes = None if no_deps else write_hashes(wheels, hashes_path(base, dist, pyver))
        cmds = pip_commands(lock, wheels, python_exe=python_exe, hashes=hashes)
        if lock is not None and lock.outside and progress:
            progress(f"not in the lock (the index cannot serve them), installed after it without a pinned hash: "
                     f"{', '.join(o.requirement.split(' @ ')[0] for o in lock.outside)}")
    if not dry_run:
        for cmd in cmds:
            r = subprocess.run(cmd)
            if r.returncode != 0:
                raise UserError(f"pip install failed (exit {r.returncode}): {' '.join(cmd)}")
    return cmds
