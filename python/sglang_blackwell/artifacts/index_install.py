"""The pip command that installs exactly the build an index of ours holds, as `sglang-blackwell install` does
(`sglang-blackwell index DIR` prints it).

For every build manifest (manifest-<base>.json) beside the indexed wheels, and every Python the base has a lock for
(patches/<base>/locks/py3XY.txt, lock.py), `index` writes two requirement files into DIR/requirements/:

  <base>-py3XY-lock.txt     the lock, copied: every dependency pinned with the sha256 of the locked file
  <base>-py3XY-wheels.txt   our wheels of that build for that Python, pinned by their full local version
                            (sglang==0.5.9+sm120.2) with the sha256 the build manifest records, found through
                            `--find-links ../files` (the index's copies; relative, so DIR can move)

and prints install's own commands (install.pip_commands) with these two files in place of the lock and dist/'s
hashes file, run by python3.X, the interpreter the lock is for:

  python3.X -m pip install --require-hashes [--no-deps] -r <lock> -r <wheels>
      [&& python3.X -m pip install [--extra-index-url <their index>] <the lock's outside pins>]

The second command is there when the lock lists pins the package index cannot serve (`lock-outside`: the 0.5.9
line's torch 2.9.1+cu130 and its companions from PyTorch's cu130 index, sgl-kernel 0.3.21+cu130 from the
sgl-project release), installed after the hashed set as `install` does.

Why not the old `pip install --extra-index-url file://DIR/simple sglang flashinfer-python`: unpinned, pip takes
PyPI's newest plain sglang and flashinfer-python; pinned to our versions only, PyPI's plain torch 2.9.1 and
sgl-kernel 0.3.21 (CUDA 12 builds) satisfy sglang's own pins, and every other dependency floats. And a file://
index warns once per project it lacks: pip asks every index for every project it resolves; an http(s) index answers
404 quietly, but for file://DIR/simple pip looks for DIR/simple/<project>/ on disk and warns "Location '...' is
ignored: it is neither a file nor a directory." for each of the ~170 dependencies that are not ours
(pip/_internal/index/sources.py). A --find-links directory is listed once.
Why two files and not the lock as a --constraint of one command: pip turns on hash-checking for every requirement
as soon as one line (a constraint too) has a hash, and the outside pins have none to give."""

from __future__ import annotations

import dataclasses
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import parse_wheel_filename

from ..errors import UserError
from ..paths import read_bytes, write_atomic
from .index import manifest_entries

REQUIREMENTS_DIR = "requirements"  # DIR/requirements/, beside DIR/files/ and DIR/simple/


@dataclass(frozen=True)
class PythonInstall:
    """The command for one Python, and the two files it reads (written by write_install)."""

    python: str
    commands: list[list[str]]  # run in order, each only when the one before succeeded
    lock_copy: Path
    lock_bytes: bytes
    wheels_file: Path
    wheels_text: str

    @property
    def line(self) -> str:
        """The commands as one shell line."""
        return " && ".join(shlex.join(c) for c in self.commands)


@dataclass
class BaseInstall:
    """What the index holds of one build manifest, and how to install it per Python."""

    base: str
    manifest: Path
    versions: list[str] = field(default_factory=list)  # our wheels' pins: "sglang==0.5.9+sm120.2"
    outside: list[str] = field(default_factory=list)  # the lock's outside pins (the second command)
    pythons: list[PythonInstall] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # why a Python (or the whole build) has no command


def requirements_paths(index_dir: Path, base: str, python: str) -> tuple[Path, Path]:
    """(lock copy, our wheels' pins) of base x python in the index."""
    tag = "py" + python.replace(".", "")
    d = index_dir / REQUIREMENTS_DIR
    return d / f"{base}-{tag}-lock.txt", d / f"{base}-{tag}-wheels.txt"


def plan_install(index_dir: Path, wheels: list[Path], published: list[str] | None = None) -> list[BaseInstall]:
    """One entry per build manifest beside the wheels (none: the wheels are no build of ours). Reads the
    manifests, the bases and their locks; writes nothing. `published`: the wheels files/ will hold (planned
    before they are copied there); default: what files/ holds now."""
    from ..patchset.bases import get_base
    from .install import dist_state, pip_commands
    from .lock import load_lock, lock_path, lock_pythons

    index_dir = index_dir.resolve()  # the printed command names its files absolutely
    indexed = {w.name for w in wheels}
    cache: dict = {}
    known: dict[str, tuple[int, str, Path]] = {}
    for d in dict.fromkeys(w.parent for w in wheels):
        known.update(manifest_entries(d, cache))
    plans = []
    for mp in dict.fromkeys(v[2] for k, v in known.items() if k in indexed):
        plan = BaseInstall(mp.name.removeprefix("manifest-").removesuffix(".json"), mp.resolve())
        plans.append(plan)
        try:
            base = get_base(plan.base)
        except UserError as e:
            plan.notes.append(f"no install command: {e}")
            continue
        pythons = [p for p in lock_pythons(base) if lock_path(base, p).exists()]
        if not pythons:
            plan.notes.append(f"no install command: base {base.name} has no lock ({base.dir / 'locks'}/py3XY.txt; "
                              f"`sglang-blackwell install` refuses it too): make one with `sglang-blackwell lock "
                              f"--base {base.name}`")
            continue
        why_not: dict[str, list[str]] = {}
        rebuild = f"rebuild: sglang-blackwell build --base {base.name} --out {mp.parent}, then index again"
        for py in pythons:
            state = dist_state(base, mp.parent, py)
            if state.stale is not None:
                why_not.setdefault(f"{state.stale} ({rebuild})", []).append(py)
                continue
            there = (lambda n: n in published) if published is not None else \
                (lambda n: (index_dir / "files" / n).is_file())
            missing = [w.name for w in state.wheels if w.name not in indexed or not there(w.name)]
            if missing:  # not given to index, or linked elsewhere (--url-template): no copy for --find-links
                why_not.setdefault(f"{', '.join(missing)} not in {index_dir / 'files'}", []).append(py)
                continue
            lock = load_lock(base, py)
            lock_copy, wheels_file = requirements_paths(index_dir, base.name, py)
            pins = []
            for w in state.wheels:
                name, version, _, _ = parse_wheel_filename(w.name)
                pins.append((f"{name}=={version}", known[w.name][1]))
            plan.versions = plan.versions or [p for p, _ in pins]
            plan.outside = plan.outside or [o.requirement for o in lock.outside]
            cmds = pip_commands(dataclasses.replace(lock, path=lock_copy), state.wheels, python_exe=f"python{py}",
                                hashes=wheels_file)
            plan.pythons.append(PythonInstall(py, cmds, lock_copy, _read_bytes(lock.path), wheels_file,
                                              _wheels_text(base.name, py, mp, pins)))
        for why, pys in why_not.items():
            plan.notes.append(f"no install command for Python {', '.join(pys)}: {why}")
    return plans


def _read_bytes(path: Path | None) -> bytes:
    assert path is not None
    return read_bytes(path, "lock")


def _wheels_text(base: str, python: str, manifest: Path, pins: list[tuple[str, str]]) -> str:
    lines = [f"# sglang-blackwell index: our wheels of base {base} for CPython {python} ({manifest.name}), pinned",
             "# with the sha256 the build manifest records; pip finds them in ../files. Installed together with",
             f"# {base}-py{python.replace('.', '')}-lock.txt beside this file (the command `sglang-blackwell index` "
             "printed).", "--find-links ../files"]
    for pin, sha in pins:
        lines += [f"{pin} \\", f"    --hash=sha256:{sha}"]
    return "\n".join(lines) + "\n"


def install_problem(index_dir: Path, plans: list[BaseInstall]) -> str | None:
    """Why the requirement files of `plans` cannot be written into DIR/requirements/, or None: it, or a file of
    it, is a symbolic link or not what it should be (a file, a directory); a directory that cannot be written."""
    from ..paths import output_problem

    d = index_dir / REQUIREMENTS_DIR
    if os.path.islink(d) or (d.exists() and not d.is_dir()):
        return f"{d}: is not a directory of the index (a symbolic link or a file)"
    for path in [p.lock_copy for b in plans for p in b.pythons] + [p.wheels_file for b in plans for p in b.pythons]:
        if os.path.islink(path):
            return f"{path}: is a symbolic link; the index writes only files of its own"
        problem = output_problem(path)
        if problem:
            return f"{path}: {problem}"
    return None


def write_install(index_dir: Path, plans: list[BaseInstall]) -> None:
    """Write the requirement files every command reads (DIR/requirements/, each file whole or not at all)."""
    problem = install_problem(index_dir, plans)
    if problem:
        raise UserError(f"{problem}; no install command was written")
    todo = [(p.lock_copy, p.lock_bytes) for b in plans for p in b.pythons]
    todo += [(p.wheels_file, p.wheels_text) for b in plans for p in b.pythons]
    for path, data in todo:
        write_atomic(path, data)


def render(plans: list[BaseInstall]) -> str:
    """What `index` prints: per build a comment saying which base and what it installs, then one line per Python
    (a shell comment where there is none, with why)."""
    if not plans:
        return ("# no build manifest (manifest-<base>.json) beside the indexed wheels: no install command (pip "
                "install --extra-index-url <this index> takes them, pin their versions)")
    out = ["# Install exactly the build in this index, as `sglang-blackwell install` does: run the line of your "
           "Python, inside the environment to install into."]
    for b in plans:
        head = f"# base {b.base} ({b.manifest})"
        if b.versions:
            head += f": {', '.join(b.versions)} and the lock's pins, hash-checked"
        out.append(head)
        if b.outside:
            out.append("#   then, from their own index, without hashes (the lock cannot pin them; as `install` does): "
                       + ", ".join(b.outside))
        out += [p.line for p in b.pythons]
        out += [f"# {n}" for n in b.notes]
    return "\n".join(out)


def write_install_commands(index_dir: Path, wheels: list[Path]) -> str:
    """DIR/requirements/ written for the wheels indexed in DIR, and what to print (the wheels already in files/;
    `sglang-blackwell index` plans before it publishes: plan_install, install_problem, then write_install)."""
    plans = plan_install(index_dir, wheels)
    write_install(index_dir, plans)
    return render(plans)
