"""Hashed locks per base x Python: patches/<base>/locks/py3XY.txt, in pip's `--require-hashes` format.

A lock pins every distribution the package index serves that the patched wheels of a base need on one target
(CPython 3.X on Linux x86_64, glibc as new as the base's own pinned wheels require), each with the sha256 of the
one file the resolver chose for that target. `install` runs `pip install --require-hashes -r <lock> -r <our
wheels' hashes>`, `bundle` takes its dependency wheels from it (hash-checked), and the image gets it through
`install` (the locks ship inside our wheel with the rest of patches/).

How a lock is made (`sglang-blackwell lock`): our patched wheels are built for that Python, and pip resolves them
together with the base's runtime pins that the index serves (torch, the kernel wheel):

  python -m pip --python <CPython 3.X> install --dry-run --ignore-installed --report R --only-binary=:all:
      --platform manylinux_2_<glibc>_x86_64 [every older manylinux tag] --index-url <index> WHEELS PINS [-c LAB]

Why pip and not pip-tools or uv: the lock is installed by pip, so it is resolved by the same resolver (same
handling of extras, local versions such as our `0.6.12+sm120.2` meeting `==0.6.12`, pre-releases pinned exactly),
`--report` hands over the chosen file's sha256 directly (from the index's PEP 658 metadata: no wheel is
downloaded), and nothing new needs installing. pip has one catch: it evaluates environment markers with the
interpreter it runs in, not with `--python-version` (pip/_internal/req/req_install.py, match_markers); so pip is
run *by* the target interpreter (`pip --python`, the running pip's code in that interpreter) and the platform
flags only choose among the index's files. The generator must run on Linux x86_64 and find CPython 3.X
(`--python PATH`). pip-tools resolves only for the interpreter it runs in; uv resolves for a declared target
without that interpreter, but is a second resolver and a new dependency, and a mismatch between its answer
and pip's would only show up at install time.

What the index cannot serve is not in the hashed set, and is listed in the lock header (`lock-outside`) with how it
is installed: a runtime pin with a direct URL (`name @ https://...`: the 0.5.9 line's cu130 kernel wheel from the
sgl-project GitHub release) or a local version label (`torch==2.9.1+cu130`: PyPI refuses local versions, so only
PyTorch's own index has it). For the resolution they are stand-in wheels of that name and version that
require what the index's build of the same release requires, less its CUDA wheels (nvidia-*), so the hashed set
agrees with torch's own pins (triton); the PyTorch companions that pin torch exactly (torchaudio, torchvision) go
with torch to PyTorch's index as `+<label>` builds. `install` puts them in with a second pip command, after
the hashed set went in with --no-deps (so nothing the lock pins is installed unchecked first); pip checks them
only against their index's own sha256 where it publishes one: base.toml records "unknown".

A base may add a recipe, patches/<base>/locks/lock.toml (lock_recipe.py): constraint files per Python (e.g. the
lab's proven list, so `bundle --deps` agrees), constraint pins a consistent resolution cannot take (recorded with
their hash, `lock-not-lockable`, for bundle only) and Pythons without a lock (install / bundle say why). The file
format is pip's (requirement_lines.py).

Staleness: the lock records a digest of its inputs (`lock-inputs`: the base's pinned files, requirement rewrites
and runtime pins for that Python, the target, the recipe and the constraint files' bytes). `lock_problems` (the
CPU tests, `sglang-blackwell lock --check`) recomputes it without network, as LABEL.lock does for labels.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from .. import leftovers, procs
from ..errors import UserError
from ..patchset.bases import SHA256_RE, Base, RuntimeArtifact
from ..patchset.fetch import pip_base_command
from ..paths import read_text, write_atomic
from .deps import Hashed, Pin, Target, WheelInfo, collect_needs
from .lock_recipe import RECIPE, constraint_pins, load_recipe
from .requirement_lines import RequirementLine, parse_requirement_lines
from .wheel import Entry, make_record

LOCK_SCHEMA = "sglang-blackwell/lock/1"
DEFAULT_INDEX = "https://pypi.org/simple"
CANDIDATE_PYTHONS = ("3.9", "3.10", "3.11", "3.12", "3.13", "3.14")
# pip settings of the machine that only say how to reach the index, kept when the generator isolates pip from
# the machine's pip configuration (its index, find-links and constraints must not change a committed lock)
NETWORK_PIP_ENV = ("PIP_CERT", "PIP_CLIENT_CERT", "PIP_PROXY", "PIP_TRUSTED_HOST", "PIP_DEFAULT_TIMEOUT",
                   "PIP_TIMEOUT", "PIP_RETRIES")
HEADER_RE = re.compile(r"^# lock-([a-z-]+): (.*)$")
VIA_RE = re.compile(r"\s+# via (.+)")
Progress = Callable[[str], None]


@dataclass(frozen=True)
class LockEntry:
    name: str  # canonical
    version: str
    sha256: str
    via: tuple[str, ...] = ()

    @property
    def requirement(self) -> str:
        return f"{self.name}=={self.version}"


@dataclass(frozen=True)
class Outside:
    """A pin the index cannot serve: installed from `index_url` (or its URL) before the hashed set."""

    requirement: str  # what pip is asked for: "torch==2.9.1+cu130", "sgl-kernel @ https://..."
    index_url: str
    check: str  # how it is verified

    @property
    def name(self) -> str:
        return canonicalize_name(Requirement(self.requirement).name)


@dataclass(frozen=True)
class NotLockable:
    """A constraint pin the consistent resolution could not take (lock.toml [not_lockable]), with its hash."""

    name: str
    version: str
    sha256: str
    reason: str


@dataclass
class Lock:
    base: str
    python: str
    platform: str
    inputs: str
    entries: list[LockEntry]
    outside: list[Outside] = field(default_factory=list)
    not_lockable: list[NotLockable] = field(default_factory=list)
    resolver: str = ""
    index: str = ""
    constraints: list[str] = field(default_factory=list)  # "path (sha256 ...)"
    path: Path | None = None

    def entry(self, name: str) -> LockEntry | None:
        name = canonicalize_name(name)
        return next((e for e in self.entries if e.name == name), None)

    def not_lockable_pin(self, name: str) -> NotLockable | None:
        name = canonicalize_name(name)
        return next((n for n in self.not_lockable if n.name == name), None)


# ---------------------------------------------------------------- where, for which Pythons, from what

def lock_path(base: Base, python: str) -> Path:
    major, minor = Target(python).version_tuple
    return base.dir / "locks" / f"py{major}{minor}.txt"


def lock_pythons(base: Base) -> list[str]:
    """The CPython versions the base's pinned wheels cover: every patched package and every runtime pin that lists
    files has a wheel for it (cp312, abi3 from cp310 on, py3), less the recipe's `unsupported`."""
    unsupported = load_recipe(base).unsupported
    runtime = [r for r in base.runtime if r.files]
    return [p for p in CANDIDATE_PYTHONS
            if all(pkg.files_for(p) for pkg in base.patched)
            and all(any(a.fits_python(p) for a in r.files) for r in runtime) and p not in unsupported]


def glibc_floor(base: Base) -> int:
    """The newest manylinux glibc any of the base's pinned wheels needs: the lock never asks for more."""
    legacy = {"manylinux1": 5, "manylinux2010": 12, "manylinux2014": 17}
    floor = 17
    for f in [a for p in base.patched for a in p.files] + [a for r in base.runtime for a in r.files]:
        if not f.filename.endswith(".whl"):
            continue
        for plat in f.platforms:
            m = re.fullmatch(r"manylinux_2_(\d+)_\w+", plat)
            if m:
                floor = max(floor, int(m[1]))
            elif plat.split("_x86_64")[0] in legacy:
                floor = max(floor, legacy[plat.split("_x86_64")[0]])
    return floor


def target_for(base: Base, python: str) -> Target:
    return Target(python, glibc_minor=glibc_floor(base))


def is_outside(r: RuntimeArtifact) -> bool:
    """A runtime pin the package index cannot serve: a direct URL, or a local version (PyPI refuses those)."""
    if not r.requirement:
        return False
    try:
        req = Requirement(r.requirement)
    except InvalidRequirement as e:
        raise UserError(f"runtime pin {r.name}: requirement {r.requirement!r}: {e}") from None
    return bool(req.url) or "+" in r.version


def inside_pins(base: Base) -> list[str]:
    return [r.requirement for r in base.runtime if r.requirement and not is_outside(r)]


def lock_inputs(base: Base, python: str) -> dict:
    """Everything a lock is made from, as plain data (its sha256 is the lock's `lock-inputs`)."""
    target = target_for(base, python)
    recipe = load_recipe(base)
    cons = []
    for f in recipe.constraint_files(python):
        if not f.is_file():
            raise UserError(f"{recipe.path}: constraint file {f} for Python {python} is missing")
        cons.append(hashlib.sha256(f.read_bytes()).hexdigest())
    return {
        "schema": LOCK_SCHEMA, "base": base.name, "python": python, "machine": target.machine,
        "glibc": target.glibc_minor,
        "patched": [{"distribution": p.distribution, "version": p.version,
                     "files": sorted((a.filename, a.sha256) for a in p.files_for(python)),
                     "requires_rewrite": sorted(p.requires_rewrite.items())} for p in base.patched],
        "runtime": [{"name": r.name, "version": r.version, "requirement": r.requirement, "index_url": r.index_url,
                     "files": sorted((a.filename, a.sha256) for a in r.files if a.fits_python(python))}
                    for r in base.runtime if r.requirement],
        "constraints": cons, "not_lockable": sorted(recipe.not_lockable.items()),
    }


def inputs_digest(base: Base, python: str) -> str:
    return hashlib.sha256(json.dumps(lock_inputs(base, python), sort_keys=True).encode()).hexdigest()


# ---------------------------------------------------------------- reading and writing the file

def render(lock: Lock, command: str) -> str:
    major, minor = Target(lock.python).version_tuple
    lines = [
        f"# sglang-blackwell lock: base {lock.base} on CPython {lock.python}, Linux x86_64 ({lock.platform} or newer).",
        "# Every distribution the package index serves that this base's patched wheels need there, pinned with the",
        "# sha256 of the file the resolver chose. Generated, do not edit; remake it with",
        f"#   {command}",
        "# Used by `sglang-blackwell install` (pip install --require-hashes -r <this file> -r <our wheels' hashes>)",
        "# and `sglang-blackwell bundle` (dependency wheels). Pins the index cannot serve: lock-outside (installed",
        "# after this set, from their own index); constraint pins a consistent resolution cannot take:",
        "# lock-not-lockable (for bundle only).",
        "#",
        f"# lock-schema: {LOCK_SCHEMA}",
        f"# lock-base: {lock.base}",
        f"# lock-python: {major}.{minor}",
        f"# lock-platform: {lock.platform}",
        f"# lock-inputs: {lock.inputs}",
        f"# lock-resolver: {lock.resolver}",
        f"# lock-index: {lock.index}",
    ]
    lines += [f"# lock-constraints: {c}" for c in lock.constraints]
    lines += [f"# lock-outside: {o.requirement} | {o.index_url} | {o.check}" for o in lock.outside]
    lines += [f"# lock-not-lockable: {n.name}=={n.version} | sha256:{n.sha256} | {n.reason}" for n in lock.not_lockable]
    lines.append("#")
    for e in sorted(lock.entries, key=lambda e: e.name):
        lines.append(f"{e.requirement} \\")
        lines.append(f"    --hash=sha256:{e.sha256}")
        if e.via:
            lines.append(f"    # via {', '.join(e.via)}")
    return "\n".join(lines) + "\n"


def read_lock(path: Path) -> Lock:
    if not path.exists() and not path.is_symlink():
        raise UserError(f"{path}: no such lock")
    text = read_text(path)
    head: dict[str, list[str]] = {}
    for raw in text.splitlines():
        m = HEADER_RE.match(raw)
        if m:
            head.setdefault(m[1], []).append(m[2])
    entries = [_entry(r) for r in parse_requirement_lines(text, path, hashes=True)]
    for key in ("schema", "base", "python", "platform", "inputs"):
        if key not in head:
            raise UserError(f"{path}: no `# lock-{key}:` header line (not a sglang-blackwell lock)")
    if head["schema"][0] != LOCK_SCHEMA:
        raise UserError(f"{path}: lock schema {head['schema'][0]!r}, this sglang-blackwell reads {LOCK_SCHEMA!r}")
    outside = []
    for v in head.get("outside", []):
        parts = [p.strip() for p in v.split("|")]
        if len(parts) != 3:
            raise UserError(f"{path}: lock-outside {v!r}: expected 'requirement | index | check'")
        outside.append(Outside(*parts))
    not_lockable = []
    for v in head.get("not-lockable", []):
        parts = [p.strip() for p in v.split("|")]
        if len(parts) != 3 or "==" not in parts[0] or not parts[1].startswith("sha256:"):
            raise UserError(f"{path}: lock-not-lockable {v!r}: expected 'name==version | sha256:HEX | why'")
        n, ver = parts[0].split("==", 1)
        not_lockable.append(NotLockable(canonicalize_name(n), ver, parts[1][7:], parts[2]))
    return Lock(base=head["base"][0], python=head["python"][0], platform=head["platform"][0],
                inputs=head["inputs"][0], entries=entries, outside=outside, not_lockable=not_lockable,
                resolver=head.get("resolver", [""])[0], index=head.get("index", [""])[0],
                constraints=head.get("constraints", []), path=path)


def _entry(r: RequirementLine) -> LockEntry:
    """One hashed pin: `name==version --hash=sha256:HEX`, the `    # via a, b` line under it naming who needs it."""
    version = r.pinned_version
    if version is None or r.requirement.extras or r.requirement.marker or len(r.hashes) != 1:
        raise UserError(f"{r.where}: {r.text!r} is not `name==version --hash=sha256:HEX`")
    via = [m[1] for c in r.comments if (m := VIA_RE.fullmatch(c))]
    return LockEntry(r.name, version, r.hashes[0], tuple(v.strip() for v in via[-1].split(",")) if via else ())


def load_lock(base: Base, python: str) -> Lock:
    """The committed lock of base x python, or a clear error naming what is missing."""
    path = lock_path(base, python)
    why = load_recipe(base).unsupported.get(python)
    if why:
        raise UserError(f"base {base.name} has no lock for Python {python} ({base.dir / 'locks' / RECIPE}): {why}")
    if not path.exists():
        have = ", ".join(p for p in lock_pythons(base) if lock_path(base, p).exists()) or "none"
        raise UserError(f"base {base.name}: no lock for Python {python} ({path} is missing; locks exist for: "
                        f"{have}); make it with `sglang-blackwell lock --base {base.name} --python-version {python}`")
    lock = read_lock(path)
    if lock.base != base.name or lock.python != python:
        raise UserError(f"{path}: is the lock of base {lock.base} / Python {lock.python}, not {base.name} / {python}")
    return lock


def lock_problems(base: Base, python: str) -> list[str]:
    """Why the committed lock of base x python cannot be trusted as it is (no network): [] when it is fresh."""
    path = lock_path(base, python)
    if not path.exists():
        return [f"{path}: missing (sglang-blackwell lock --base {base.name} --python-version {python})"]
    lock = read_lock(path)
    probs = []
    if lock.inputs != inputs_digest(base, python):
        probs.append(f"{path}: stale: its inputs (base.toml pins, requirement rewrites, runtime pins, lock.toml, "
                     f"constraint files) changed since it was made; run `sglang-blackwell lock --base {base.name} "
                     f"--python-version {python}`")
    probs += pin_disagreements(base, python, lock)
    return probs


def pin_disagreements(base: Base, python: str, lock: Lock) -> list[str]:
    """The lock must hash base.toml's runtime files exactly as base.toml pins them (where base.toml knows)."""
    out = []
    for r in base.runtime:
        if not r.requirement or is_outside(r):
            continue
        e = lock.entry(r.name)
        if e is None:
            out.append(f"{lock.path}: runtime pin {r.requirement} of base.toml is not in the lock")
            continue
        known = {a.sha256 for a in r.files if a.fits_python(python) and a.sha256 != "unknown"}
        if known and e.sha256 not in known:
            out.append(f"{lock.path}: {e.requirement} is hashed {e.sha256}, base.toml pins {', '.join(sorted(known))}")
    return out


# ---------------------------------------------------------------- what bundle takes from a lock

def locked(lock: Lock) -> dict[str, Hashed]:
    """Every hashed pin of the lock, for the automatic bundle walk."""
    return {e.name: Hashed(e.name, Version(e.version), e.sha256, str(lock.path)) for e in lock.entries}


def locked_pins(pins: list[Pin], lock: Lock, deps_file: Path) -> dict[str, Hashed]:
    """The lock's hash for every pin of a --deps list; a pin the lock disagrees with is an error naming its line.
    A pin recorded as not lockable (lock.toml) is taken at that version with the hash the lock records for it."""
    out = {}
    for p in pins:
        where = f"--deps {deps_file}:{p.line}"
        e = lock.entry(p.name)
        nl = lock.not_lockable_pin(p.name)
        if nl is not None and Version(nl.version) == p.version:
            out[p.name] = Hashed(p.name, p.version, nl.sha256, where)
        elif e is not None and Version(e.version) == p.version:
            out[p.name] = Hashed(p.name, p.version, e.sha256, where)
        elif e is not None:
            raise UserError(f"{where}: {p.text} disagrees with the lock {lock.path}, which pins {e.requirement}")
        else:
            raise UserError(f"{where}: {p.text} is not in the lock {lock.path} (no patched wheel of base "
                            f"{lock.base} needs {p.name} on Python {lock.python})")
    return out


# ---------------------------------------------------------------- generating

def find_interpreter(python: str, python_exe: str | None,
                     flags: tuple[str, str] = ("--python-version", "--python")) -> tuple[str, str]:
    """(path, full version) of a CPython `python` to run pip in (pip evaluates markers with it). flags: how the
    version and the interpreter were given, as typed (errors name them)."""
    version_flag, exe_flag = flags
    if platform.system() != "Linux" or platform.machine() != "x86_64":
        raise UserError(f"the lock is for Linux x86_64 and pip evaluates platform markers on this machine "
                        f"({platform.system()} {platform.machine()}): make locks on a Linux x86_64 machine")
    cand = python_exe or shutil.which(f"python{python}")
    if not cand:
        raise UserError(f"{version_flag} {python}: no python{python} on PATH to resolve with (pip evaluates "
                        "environment markers with the interpreter it runs in): pass --python PATH")
    try:
        r = procs.run([cand, "-c", "import platform, sys; print('%d.%d' % sys.version_info[:2], "
                                   "platform.python_implementation(), platform.python_version())"],
                      capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise UserError(f"{exe_flag} {cand}: cannot run it ({why})") from None
    parts = r.stdout.split()
    if r.returncode != 0 or len(parts) != 3:
        tail = " | ".join(ln.strip() for ln in (r.stderr or r.stdout).strip().splitlines() if ln.strip())
        raise UserError(f"{exe_flag} {cand}: cannot run it (exit {r.returncode}: {tail[-300:]})")
    if parts[0] != python or parts[1] != "CPython":
        raise UserError(f"{exe_flag} {cand}: is {parts[1]} {parts[2]}, not CPython {python}")
    return cand, parts[2]


def pip_env() -> dict[str, str]:
    """The environment for the resolver: none of this machine's pip configuration but how to reach the index."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") or k in NETWORK_PIP_ENV}
    env["PIP_CONFIG_FILE"] = os.devnull
    return env


def stub_wheel(dest_dir: Path, name: str, version: str, requires: list[str] = ()) -> Path:
    """A wheel of `name` `version` without files: stands in for a pin the index cannot serve."""
    dist = canonicalize_name(name).replace("-", "_")
    di = f"{dist}-{version}.dist-info"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires)
    entries = [Entry(f"{di}/METADATA", (meta + "\n").encode(), 0o644 << 16),
               Entry(f"{di}/WHEEL", b"Wheel-Version: 1.0\nGenerator: sglang-blackwell lock\nRoot-Is-Purelib: true\n"
                                    b"Tag: py3-none-any\n", 0o644 << 16),
               Entry(f"{di}/RECORD", b"", 0o644 << 16)]
    entries[-1].data = make_record(entries, f"{di}/RECORD")
    path = dest_dir / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for e in entries:
            z.writestr(zipfile.ZipInfo(e.name, (1980, 1, 1, 0, 0, 0)), e.data)
    return path


def _run_pip(cmd: list[str], what: str) -> None:
    r = procs.run(cmd, capture_output=True, text=True, env=pip_env())
    if r.returncode != 0:
        lines = [ln for ln in (r.stderr + "\n" + r.stdout).splitlines() if ln.strip()]
        raise UserError(f"{what}: pip failed (exit {r.returncode}):\n  " + "\n  ".join(lines[-12:]))


def _resolve(exe: str, target: Target, index_url: str, reqs: list[str], constraints: Path | None,
             report: Path, no_deps: bool = False) -> list[dict]:
    cmd = [*pip_base_command(), "--python", exe, "install", "--dry-run", "--ignore-installed", "--quiet",
           "--disable-pip-version-check", "--report", str(report), "--only-binary=:all:",
           *[a for p in target.platforms for a in ("--platform", p)], "--index-url", index_url]
    if no_deps:
        cmd.append("--no-deps")
    if constraints is not None:
        cmd += ["-c", str(constraints)]
    _run_pip(cmd + reqs, f"resolving for CPython {target.python} ({', '.join(reqs[:3])}...)")
    return json.loads(report.read_text())["install"]


# what pip's report hands over from the index becomes a line of the lock, a file pip reads: a PEP 508 name
PROJECT_NAME_RE = re.compile(r"^([A-Z0-9]|[A-Z0-9][A-Z0-9._-]*[A-Z0-9])$", re.IGNORECASE)


def _info(item: dict) -> WheelInfo:
    md = item["metadata"]
    if not isinstance(md.get("name"), str) or not PROJECT_NAME_RE.match(md["name"]):
        raise UserError(f"the index served a distribution named {md.get('name')!r} (pip's report of "
                        f"{item['download_info']['url']}): not a project name; no lock was written")
    reqs = []
    for r in md.get("requires_dist") or []:
        try:
            reqs.append(Requirement(r))
        except InvalidRequirement:
            continue
    return WheelInfo(Path(item["download_info"]["url"]), canonicalize_name(md["name"]), Version(md["version"]),
                     reqs, "dependency")


def _sha256(item: dict) -> str:
    h = item["download_info"].get("archive_info", {}).get("hashes", {}).get("sha256")
    if not h:
        raise UserError(f"{item['metadata']['name']} {item['metadata']['version']}: the index gave no sha256 for "
                        f"{item['download_info']['url']} (pip reports what the index publishes)")
    if not isinstance(h, str) or not SHA256_RE.match(h.lower()):
        raise UserError(f"{item['metadata']['name']} {item['metadata']['version']}: the index's sha256 for "
                        f"{item['download_info']['url']} is {h!r}, not 64 hex digits; no lock was written")
    return h.lower()


def generate(base: Base, python: str, *, python_exe: str | None = None, index_url: str = DEFAULT_INDEX,
             cache: Path | None = None, progress: Progress | None = None,
             flags: tuple[str, str] = ("--python-version", "--python")) -> Lock:
    """Resolve the lock of base x python (see the module docstring). Network: the index (and the pinned
    upstream wheels, if not cached). flags: how the version and the interpreter were given, as typed."""
    from .build import build  # build -> fetch; lock is the only module here that builds to resolve

    say = progress or (lambda s: None)
    why = load_recipe(base).unsupported.get(python)
    if why:
        raise UserError(f"base {base.name}, Python {python}: unsupported ({base.dir / 'locks' / RECIPE}): {why}")
    if python not in lock_pythons(base):
        raise UserError(f"{flags[0]} {python}: base {base.name} has patched wheels for "
                        f"{', '.join(lock_pythons(base)) or 'no Python'} only")
    exe, full = find_interpreter(python, python_exe, flags)
    target = target_for(base, python)
    recipe = load_recipe(base)
    outside = [r for r in base.runtime if is_outside(r)]
    torch_label = {Version(r.version).public: r for r in outside if r.name == "torch"}
    with leftovers.temp_dir("sglang-blackwell-lock-") as tmp:
        built, _ = build(base, tmp / "dist", python=python, cache=cache, progress=say)
        ours = {canonicalize_name(base.package(b.package).distribution) for b in built}
        (tmp / "stubs").mkdir()
        stubs = [stub_wheel(tmp / "stubs", Requirement(r.requirement).name, r.version,
                            _stand_in_requires(exe, target, index_url, r, tmp / "stand-in.json")) for r in outside]
        reqs = [str(b.path) for b in built] + [str(s) for s in stubs] + inside_pins(base)
        cons_file = None
        cons = constraint_pins(recipe.constraint_files(python))
        if cons:
            cons_file = tmp / "constraints.txt"
            cons_file.write_text("".join(f"{n}=={v}\n" for n, (v, _, _) in sorted(cons.items())
                                         if n not in recipe.not_lockable and n not in ours))
        say(f"resolving base {base.name} for CPython {full} ({target.platforms[0]}) against {index_url}")
        items = _resolve(exe, target, index_url, reqs, cons_file, tmp / "report.json")
        infos = [_info(i) for i in items]
        needs = collect_needs(infos, target)
        stub_names = {canonicalize_name(Requirement(r.requirement).name) for r in outside}
        entries: list[LockEntry] = []
        companions: list[Outside] = []
        for item, info in zip(items, infos, strict=True):
            if info.name in ours or info.name in stub_names:
                continue
            via = tuple(sorted({n.by.split()[0] for n in needs.get(info.name, [])}))
            torch_pin = _pins_torch(info, torch_label)
            if torch_pin is not None:
                label = Version(torch_pin.version).local
                companions.append(Outside(f"{info.name}=={info.version}+{label}", torch_pin.index_url,
                                          _outside_check(torch_pin, python, companion=True)))
                continue
            entries.append(LockEntry(info.name, str(info.version), _sha256(item), via))
        not_lockable = []
        for name, why in sorted(recipe.not_lockable.items()):
            if name not in cons:
                continue  # this Python's constraint files do not pin it
            ver = cons[name][0]
            (item,) = _resolve(exe, target, index_url, [f"{name}=={ver}"], None, tmp / "nl.json", no_deps=True)
            not_lockable.append(NotLockable(name, ver, _sha256(item), why))
        pip_version = procs.run([*pip_base_command(), "--version"], capture_output=True, text=True,
                                env=pip_env()).stdout.split()[1]
    outs = [Outside(r.requirement, r.index_url, _outside_check(r, python)) for r in outside] + companions
    cons_desc = [f"{os.path.relpath(f, base.dir / 'locks')} (sha256 {hashlib.sha256(f.read_bytes()).hexdigest()})"
                 for f in recipe.constraint_files(python)]
    lock = Lock(base=base.name, python=python, platform=target.platforms[0], inputs=inputs_digest(base, python),
                entries=entries, outside=outs, not_lockable=not_lockable,
                resolver=f"pip {pip_version} run by CPython {full}, install --dry-run --report --ignore-installed "
                         f"--only-binary=:all: --platform {target.platforms[0]} (and every older manylinux tag)",
                index=index_url, constraints=cons_desc, path=lock_path(base, python))
    probs = pin_disagreements(base, python, lock)
    if probs:
        raise UserError("the resolution disagrees with base.toml:\n  " + "\n  ".join(probs))
    return lock


def _stand_in_requires(exe: str, target: Target, index_url: str, r: RuntimeArtifact, report: Path) -> list[str]:
    """What the stand-in of an outside pin requires: what the index's build of the same release requires, less its
    CUDA wheels (nvidia-*: the outside build brings its own, from its own index). Nothing when the index has no
    build of that release."""
    name = Requirement(r.requirement).name
    try:
        (item,) = _resolve(exe, target, index_url, [f"{name}=={Version(r.version).public}"], None, report,
                           no_deps=True)
    except UserError:
        return []
    return [q for q in item["metadata"].get("requires_dist") or []
            if not canonicalize_name(Requirement(q).name).startswith("nvidia-")]


def _pins_torch(info: WheelInfo, torch_label: dict) -> RuntimeArtifact | None:
    """The torch pin (with a local label) that `info` requires exactly (torch==<its public version>), if any."""
    for r in info.requires:
        if canonicalize_name(r.name) != "torch":
            continue
        for spec in r.specifier:
            if spec.operator == "==" and spec.version in torch_label:
                return torch_label[spec.version]
    return None


def _outside_check(r: RuntimeArtifact, python: str, companion: bool = False) -> str:
    v = Version(r.version)
    if companion:
        return (f"the +{v.local} build of a PyTorch companion pinned to torch {v.public}: from that index, checked "
                "against the index's own sha256 only (no pin)")
    known = [a for a in r.files if a.fits_python(python) and a.sha256 != "unknown"]
    if known:
        return (f"base.toml pins sha256 {known[0].sha256} of {known[0].filename}; pip installs it outside "
                "--require-hashes")
    return "no hash pinned (base.toml: sha256 unknown); pip checks the index's own sha256 where it publishes one"


def write(lock: Lock, command: str) -> Path:
    assert lock.path is not None
    write_atomic(lock.path, render(lock, command))
    return lock.path


def command_for(base: Base, python: str, index_url: str) -> str:
    cmd = f"sglang-blackwell lock --base {base.name} --python-version {python}"
    return cmd + (f" --index-url {index_url}" if index_url != DEFAULT_INDEX else "")
