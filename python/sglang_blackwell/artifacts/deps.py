"""The dependency wheels a bundle carries, for a target Python on Linux x86_64, on top of an existing torch.

Every version comes from the base's lock for that Python (patches/<base>/locks/py3XY.txt, lock.py), and every
wheel is downloaded in pip's hash-checking mode and checked against the lock's sha256 again before it enters
<cache>/wheelhouse/ (a wheelhouse file is reused only when its sha256 is the locked one). Two ways to choose them:
  --deps FILE   (primary) a pinned list, `name==version` per line (e.g. benchmark/lab/bundle-deps-0.5.14-py312.txt,
                the set proven on the lab image). Exactly these wheels; a pin that disagrees with the lock (another
                version, or a distribution the lock does not have) is an error naming the line (lock.locked_pins).
  automatic     (no --deps; needs --installed) what the bundled wheels (our sglang, flashinfer, the kernel, then
                what gets added, recursively) require and the target lacks, at the lock's versions; torch itself is
                never carried. Nothing is resolved here: the lock was made by a real resolver.

With --installed FILE (`pip list --format=freeze` or `pip freeze` of the target), a candidate is dropped when the
target already has that distribution at a version every bundled wheel accepts (Requires-Dist, markers evaluated
for the target Python / Linux / x86_64, extras as requested). This repeats until nothing changes (dropping a wheel
drops its requirements). A version the target has but a bundled wheel rejects keeps the candidate (it will
shadow the target's copy, e.g. transformers 5.17.0 on the lab image vs sglang's ==5.8.1).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from .. import envswitch, procs
from ..errors import IntegrityError, UserError
from ..patchset.fetch import OFFLINE_ENV, pip_base_command, sha256_file, sweep_partials
from ..patchset.wheel_metadata import wheel_metadata
from ..paths import read_text
from .requirement_lines import read_requirement_lines

Progress = Callable[[str], None]
NEVER_DOWNLOADED = frozenset({"torch"})  # the bundle installs on top of an existing torch


@dataclass(frozen=True)
class Target:
    """The machine a bundle is for: CPython `python` ("3.12") on manylinux x86_64 with glibc >= `glibc`."""

    python: str
    machine: str = "x86_64"
    glibc_minor: int = 34  # sglang 0.5.14's own wheels are manylinux_2_34

    @property
    def version_tuple(self) -> tuple[int, int]:
        m = re.fullmatch(r"(\d+)\.(\d+)", self.python)
        if not m:
            raise UserError(f"--python-version {self.python!r}: expected MAJOR.MINOR, e.g. 3.12")
        return int(m[1]), int(m[2])

    @property
    def python_tag(self) -> str:
        major, minor = self.version_tuple
        return f"cp{major}{minor}"

    @property
    def platforms(self) -> list[str]:
        plats = [f"manylinux_2_{m}_{self.machine}" for m in range(self.glibc_minor, 4, -1)]
        return plats + [f"manylinux2014_{self.machine}", f"manylinux2010_{self.machine}",
                        f"manylinux1_{self.machine}"]

    def tags(self) -> frozenset[Tag]:
        v = self.version_tuple
        return frozenset([*cpython_tags(v, platforms=self.platforms),
                          *compatible_tags(v, interpreter=self.python_tag, platforms=self.platforms)])

    def fits(self, wheel_filename: str) -> bool:
        try:
            _, _, _, tags = parse_wheel_filename(wheel_filename)
        except InvalidWheelFilename:
            return False
        return bool(tags & self.tags())

    def pip_args(self) -> list[str]:
        args = ["--python-version", self.python, "--implementation", "cp"]
        for p in self.platforms:
            args += ["--platform", p]
        return args

    def marker_env(self, extra: str = "") -> dict[str, str]:
        major, minor = self.version_tuple
        return {"python_version": f"{major}.{minor}", "python_full_version": f"{major}.{minor}.0",
                "implementation_name": "cpython", "implementation_version": f"{major}.{minor}.0",
                "platform_python_implementation": "CPython", "sys_platform": "linux", "os_name": "posix",
                "platform_system": "Linux", "platform_machine": self.machine, "platform_release": "",
                "platform_version": "", "extra": extra}


# ---------------------------------------------------------------- input files

@dataclass(frozen=True)
class Installed:
    name: str  # canonical
    version: Version | None  # None: installed, version unknown (`name @ url`, `-e ...`)
    text: str


def read_installed(path: Path) -> dict[str, Installed]:
    """`pip list --format=freeze`, `pip freeze` or plain `pip list` output of the target machine."""
    lines = read_text(path, "--installed").splitlines()
    out: dict[str, Installed] = {}
    for i, raw in enumerate(lines, 1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#") or re.fullmatch(r"(Package\s+Version.*|-+(\s+-+)*)", line):
            continue
        name, ver = _installed_line(line)
        if name is None:
            raise UserError(f"--installed {path}:{i}: cannot read {raw.strip()!r} (expected `name==version` lines "
                            "as `pip list --format=freeze` writes them)")
        try:
            version = Version(ver) if ver else None
        except InvalidVersion:
            raise UserError(f"--installed {path}:{i}: {ver!r} is not a version ({raw.strip()!r})") from None
        out[canonicalize_name(name)] = Installed(canonicalize_name(name), version, line)
    if not out:
        raise UserError(f"--installed {path}: no packages listed")
    return out


def _installed_line(line: str) -> tuple[str | None, str | None]:
    if line.startswith("-e ") or line.startswith("--editable"):
        m = re.search(r"#egg=([A-Za-z0-9._-]+)", line)
        return (m[1], None) if m else (None, None)
    m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)\s*===?\s*(\S+)", line)
    if m:
        return m[1], m[2]
    m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*@\s*\S+", line)
    if m:
        return m[1], None
    m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)\s+(\S+)(\s+\S.*)?", line)  # plain `pip list` columns
    if m:
        return m[1], m[2]
    return None, None


@dataclass(frozen=True)
class Pin:
    name: str  # canonical
    version: Version
    line: int
    text: str


def read_pins(path: Path) -> list[Pin]:
    """A deps file: one `name==version` per line (requirement_lines.py: comments, blank lines); no marker, URL or
    hash (the lock gives the hash)."""
    pins: dict[str, Pin] = {}
    for r in read_requirement_lines(path, "--deps"):
        version = r.pinned_version
        if version is None or r.requirement.marker:
            raise UserError(f"{r.where}: {r.text!r} is not an exact pin (write name==version)")
        if r.name in pins:
            raise UserError(f"{r.where}: {r.requirement.name} is pinned twice (line {pins[r.name].line} too)")
        pins[r.name] = Pin(r.name, Version(version), r.number, r.text)
    return list(pins.values())


# ---------------------------------------------------------------- wheels and their requirements

@dataclass
class WheelInfo:
    path: Path
    name: str  # canonical
    version: Version
    requires: list[Requirement]
    kind: str  # patched / kernel / dependency
    always: bool = False  # never dropped because the target has it (our patched wheels)


def wheel_info(path: Path, kind: str, always: bool = False) -> WheelInfo:
    try:
        name, version, _, _ = parse_wheel_filename(path.name)
    except InvalidWheelFilename as e:
        raise UserError(f"{path.name}: not a wheel file name: {e}") from None
    meta = wheel_metadata(path)
    reqs = []
    for r in meta.get_all("Requires-Dist") or []:
        try:
            reqs.append(Requirement(r))
        except InvalidRequirement as e:
            raise UserError(f"{path.name}: METADATA Requires-Dist {r!r}: {e}") from None
    return WheelInfo(path, canonicalize_name(name), version, reqs, kind, always)


@dataclass(frozen=True)
class Need:
    req: Requirement
    by: str  # "sglang 0.5.14+sm120.1"


def collect_needs(wheels: Iterable[WheelInfo], target: Target) -> dict[str, list[Need]]:
    """name -> the requirements on it of the given wheels, markers evaluated for the target (with the extras
    that the wheels themselves request of each other)."""
    wheels = list(wheels)
    extras: dict[str, set[str]] = {w.name: set() for w in wheels}
    while True:
        needs = _needs(wheels, target, extras)
        grown = False
        for name, ns in needs.items():
            want = set().union(*(n.req.extras for n in ns))
            if name in extras and not want <= extras[name]:
                extras[name] |= want
                grown = True
        if not grown:
            return needs


def _needs(wheels: list[WheelInfo], target: Target, extras: dict[str, set[str]]) -> dict[str, list[Need]]:
    out: dict[str, list[Need]] = {}
    for w in wheels:
        envs = [target.marker_env(e) for e in sorted(extras.get(w.name, set()) | {""})]
        for r in w.requires:
            if r.marker is not None and not any(r.marker.evaluate(env) for env in envs):
                continue
            out.setdefault(canonicalize_name(r.name), []).append(Need(r, f"{w.name} {w.version}"))
    return out


def accepts(needs: Iterable[Need], version: Version | None) -> bool:
    needs = list(needs)
    if version is None:
        return all(not n.req.specifier for n in needs)
    return all(n.req.specifier.contains(version, prereleases=True) for n in needs)


def describe(needs: Iterable[Need]) -> str:
    return "; ".join(f"{n.by} requires {n.req}" for n in needs)


@dataclass
class Selection:
    wheels: list[WheelInfo]
    dropped: list[tuple[WheelInfo, Installed]] = field(default_factory=list)
    unmet: list[dict] = field(default_factory=list)  # requirements nothing in the bundle or the target meets


def drop_present(wheels: list[WheelInfo], installed: dict[str, Installed] | None, target: Target) -> Selection:
    """Drop every non-`always` wheel whose distribution the target already has at an accepted version."""
    keep = list(wheels)
    dropped: list[tuple[WheelInfo, Installed]] = []
    if installed:
        while True:
            needs = collect_needs(keep, target)
            gone = [w for w in keep if not w.always and w.name in installed
                    and installed[w.name].version is not None and accepts(needs.get(w.name, []),
                                                                          installed[w.name].version)]
            if not gone:
                break
            dropped += [(w, installed[w.name]) for w in gone]
            keep = [w for w in keep if w not in gone]
    return Selection(keep, dropped, unmet_requirements(keep, installed, target))


def unmet_requirements(wheels: list[WheelInfo], installed: dict[str, Installed] | None, target: Target) -> list[dict]:
    bundled = {w.name for w in wheels}
    out = []
    for name, ns in sorted(collect_needs(wheels, target).items()):
        if name in bundled:
            continue
        inst = (installed or {}).get(name)
        if inst is not None and accepts(ns, inst.version):
            continue
        if installed is None:
            status = "not carried (target unknown: no --installed)"
        elif inst is None:
            status = "not carried, not installed"
        else:
            status = f"not carried; installed {inst.version or '(version unknown)'} does not match"
        out.append({"name": name, "requires": describe(ns), "status": status})
    return out


def check_consistent(wheels: list[WheelInfo], target: Target, where: Callable[[WheelInfo], str]) -> None:
    """Every bundled wheel's version must satisfy what the other bundled wheels require of it."""
    needs = collect_needs(wheels, target)
    bad = [f"{where(w)}: {w.name} {w.version} but {describe(n for n in needs[w.name] if not accepts([n], w.version))}"
           for w in wheels if w.name in needs and not accepts(needs[w.name], w.version)]
    if bad:
        raise UserError("the bundle's wheels disagree:\n  " + "\n  ".join(bad))


# ---------------------------------------------------------------- downloading

@dataclass(frozen=True)
class Hashed:
    """One dependency wheel to carry: its exact version and the sha256 the lock gives it."""

    name: str  # canonical
    version: Version
    sha256: str
    where: str  # for messages: "--deps FILE:LINE" or the lock's path


@dataclass
class Downloader:
    target: Target
    cache: Path
    index_url: str | None = None
    find_links: tuple[str, ...] = ()
    progress: Progress | None = None

    @property
    def house(self) -> Path:
        return self.cache / "wheelhouse"

    def cached(self, want: Hashed) -> Path | None:
        """A wheelhouse file of that name and version for the target whose sha256 is the locked one."""
        if not self.house.is_dir():
            return None
        for f in sorted(self.house.glob("*.whl")):
            try:
                n, v, _, _ = parse_wheel_filename(f.name)
            except InvalidWheelFilename:
                continue
            if canonicalize_name(n) == want.name and v == want.version and self.target.fits(f.name) \
                    and sha256_file(f) == want.sha256:
                return f
        return None

    def get(self, wants: list[Hashed]) -> list[Path]:
        """A verified local wheel for every entry: from the wheelhouse, else one hash-checked `pip download`."""
        got = {w.name: self.cached(w) for w in wants}
        missing = [w for w in wants if got[w.name] is None]
        if missing:
            for w, f in zip(missing, self.download(missing), strict=True):
                got[w.name] = f
        return [got[w.name] for w in wants]

    def download(self, wants: list[Hashed]) -> list[Path]:
        """pip download in hash-checking mode (pip picks, among the index's files of each version, the one whose
        sha256 is locked), then our own sha256 check before a file enters the wheelhouse."""
        specs = [f"{w.name}=={w.version}" for w in wants]
        if envswitch.on(OFFLINE_ENV):
            raise UserError(f"not in the wheelhouse {self.house} and {OFFLINE_ENV} is on: {', '.join(specs)}")
        sweep_partials(self.house)  # what killed downloads left (fetch.py names them with the pid)
        partial = self.house / ".partial"
        partial.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f"deps.{os.getpid()}.", dir=partial))
        try:
            req = tmp / "locked.txt"
            req.write_text("".join(f"{s} --hash=sha256:{w.sha256}\n" for s, w in zip(specs, wants, strict=True)))
            (tmp / "got").mkdir()
            cmd = [*pip_base_command(), "download", "--no-deps", "--require-hashes", "--only-binary=:all:",
                   "--disable-pip-version-check", "--progress-bar", "off", "-d", str(tmp / "got"),
                   *self.target.pip_args()]
            if self.index_url:
                cmd += ["--index-url", self.index_url]
            for fl in self.find_links:
                cmd += ["--find-links", fl]
            if self.progress:
                self.progress(f"pip download {len(specs)} locked wheel(s) for {self.target.python_tag}: "
                              f"{' '.join(specs)}")
            r = procs.run([*cmd, "-r", str(req)], capture_output=True, text=True)
            if r.returncode != 0:
                tail = "\n".join((r.stderr or r.stdout).strip().splitlines()[-6:])
                raise UserError(f"pip download failed for {' '.join(specs)}:\n{tail}")
            by_name = {}
            for f in (tmp / "got").glob("*.whl"):
                n, _, _, _ = parse_wheel_filename(f.name)
                by_name[canonicalize_name(n)] = f
            out = []
            for w in wants:
                f = by_name.get(w.name)
                if f is None:
                    raise UserError(f"{w.where}: pip found no wheel of {w.name}=={w.version} for "
                                    f"{self.target.python_tag} / manylinux {self.target.machine}")
                digest = sha256_file(f)
                if digest != w.sha256:
                    raise IntegrityError(f"{w.where}: {f.name} has sha256 {digest}, the lock says {w.sha256}; "
                                         "nothing was put in the wheelhouse")
            for w in wants:
                dest = self.house / by_name[w.name].name
                os.replace(by_name[w.name], dest)
                out.append(dest)
            return out
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------- the two ways

def from_pins(roots: list[WheelInfo], pins: list[Pin], locked: dict[str, Hashed], deps_file: Path,
              installed: dict[str, Installed] | None, target: Target, dl: Downloader,
              exclude: frozenset[str] = frozenset()) -> Selection:
    """--deps FILE: exactly these pins (each already checked against the lock: `locked`), less what the target has."""
    pins = [p for p in pins if p.name not in exclude]
    clash = {w.name for w in roots} & {p.name for p in pins}
    if clash:
        line = next(p for p in pins if p.name in clash)
        raise UserError(f"--deps {deps_file}:{line.line}: {line.text} names a package the bundle builds itself")
    wheels = [wheel_info(f, "dependency") for f in dl.get([locked[p.name] for p in pins])]
    by_name = {p.name: p for p in pins}
    check_consistent(roots + wheels, target,
                     lambda w: f"--deps {deps_file}:{by_name[w.name].line}" if w.name in by_name else w.path.name)
    return drop_present(roots + wheels, installed, target)


def from_lock(roots: list[WheelInfo], locked: dict[str, Hashed], installed: dict[str, Installed], target: Target,
              dl: Downloader, exclude: frozenset[str] = frozenset(), max_rounds: int = 60) -> Selection:
    """No --deps, with --installed: what the bundled wheels need (Requires-Dist, markers for the target) and the
    target lacks (or has at a version they reject), at the lock's version, walked until nothing is missing. The
    lock chose every version; the walk only decides what to carry. torch is never carried."""
    if "torch" not in installed:
        raise UserError("the --installed list has no torch: a bundle installs on top of an existing torch "
                        "(give the target's full `pip list --format=freeze`)")
    bundle: dict[str, WheelInfo] = {w.name: w for w in roots}
    for _ in range(max_rounds):
        needs = collect_needs(bundle.values(), target)
        todo = []
        for name, ns in sorted(needs.items()):
            if name in bundle or name in exclude or name in NEVER_DOWNLOADED:
                continue
            inst = installed.get(name)
            if inst is not None and accepts(ns, inst.version):
                continue
            if name in locked:
                todo.append(locked[name])
        if not todo:
            break
        for w, f in zip(todo, dl.get(todo), strict=True):
            bundle[w.name] = wheel_info(f, "dependency")
    else:
        raise UserError(f"the walk over the lock did not settle in {max_rounds} rounds")
    kept = list(bundle.values())
    check_consistent(kept, target, lambda w: w.path.name)
    return drop_present(kept, installed, target)
