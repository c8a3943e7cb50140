"""`sglang-blackwell install`: pip install the patched wheels of a base (building them if needed) with the
base's runtime pins (torch +cu130, the cu130 kernel wheel) from their recorded indexes; `--upstream` puts the
unpatched pinned wheels back (rollback)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ..errors import UserError
from ..patchset.bases import Base
from ..patchset.fetch import fetch
from .build import build, manifest_path


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


def pip_command(base: Base, wheels: list[Path], *, python_exe: str, no_deps: bool) -> list[str]:
    cmd = [python_exe, "-m", "pip", "install", *map(str, wheels)]
    if no_deps:
        return cmd + ["--no-deps", "--force-reinstall"]
    for r in base.runtime:
        if r.requirement:
            cmd.append(r.requirement)
    for url in dict.fromkeys(r.index_url for r in base.runtime if r.name == "torch" and r.index_url):
        cmd += ["--extra-index-url", url]
    return cmd


def install(base: Base, dist: Path, *, python_exe: str = sys.executable, no_deps: bool = False,
            upstream: bool = False, dry_run: bool = False, cache: Path | None = None, progress=None) -> list[str]:
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
        cmd = [python_exe, "-m", "pip", "install", "--force-reinstall", "--no-deps", *map(str, wheels)]
    else:
        wheels = patched_wheels(base, dist, pyver)
        if len(wheels) < len(base.patched):
            build(base, dist, python=pyver, cache=cache, progress=progress)
            wheels = patched_wheels(base, dist, pyver)
        if len(wheels) < len(base.patched):
            raise UserError(f"base {base.name}: no patched wheels for Python {pyver} in {dist}")
        cmd = pip_command(base, wheels, python_exe=python_exe, no_deps=no_deps)
    if not dry_run:
        r = subprocess.run(cmd)
        if r.returncode != 0:
            raise UserError(f"pip install failed (exit {r.returncode}): {' '.join(cmd)}")
    return cmd
