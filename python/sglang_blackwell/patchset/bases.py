"""patches/<base>/base.toml -> pinned versions and sha256 of every upstream artifact a base consumes.

Two kinds of artifacts:
  patched  - fetched from PyPI, verified, patched into our wheels (sglang, flashinfer-python);
  runtime  - recorded facts for `install` and Docker (torch +cu130, the cu130 kernel wheel, CUDA):
             index URL, file name, sha256 where a public index gives it, else "unknown".
Exactly one base is marked `default = true`; that is the only place the default base is declared.
`[serving]` says what the line's server offers that doctor, the all-reduce tuner and serve key on (its fusion
flags, its PCIe-IPC all-reduce): facts about an upstream line live with that line's pins, nowhere else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from ..errors import UserError
from ..paths import patches_dir
from ..tomlio import tomllib
from .layouts import LAYOUTS
from .series import Series, load_series

SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
# base.toml `absorbed` values start with the upstream release that has the change: "<package> <version>[+]"
ABSORBED_SINCE_RE = re.compile(r"^(\S+) v?(\d+(?:\.\d+)+(?:\.post\d+)?)\+?(?=\s|$|[;:,])")
LOCAL_LABEL_RE = re.compile(r"^sm120\.[0-9]+$")


@dataclass(frozen=True)
class Artifact:
    filename: str
    url: str
    sha256: str  # 64 hex digits, or "unknown" (runtime facts only)
    size: int | None = None

    @property
    def python_tags(self) -> frozenset[str]:
        if not self.filename.endswith(".whl"):
            return frozenset()
        _, _, _, tags = parse_wheel_filename(self.filename)
        return frozenset(t.interpreter for t in tags)

    @property
    def platforms(self) -> frozenset[str]:
        _, _, _, tags = parse_wheel_filename(self.filename)
        return frozenset(t.platform for t in tags)

    def fits_python(self, version: str) -> bool:
        """Does this wheel install on CPython `version` ("3.12")?"""
        major, minor = version.split(".")[:2]
        cp = f"cp{major}{minor}"
        for tag in self.python_tags:
            if tag in (cp, f"py{major}", f"py{major}{minor}"):
                return True
            m = re.fullmatch(r"cp(\d)(\d+)", tag)
            if m and self._is_abi3() and (int(m[1]), int(m[2])) <= (int(major), int(minor)):
                return True
        return False

    def _is_abi3(self) -> bool:
        _, _, _, tags = parse_wheel_filename(self.filename)
        return any(t.abi == "abi3" for t in tags)


@dataclass(frozen=True)
class PatchedPackage:
    package: str  # our name: patches/<base>/<package>/, and the path layout
    distribution: str  # PyPI name
    version: str
    files: tuple[Artifact, ...]
    requires_rewrite: dict[str, str] = field(default_factory=dict)

    def files_for(self, python: str | None = None, platform: str = "x86_64") -> list[Artifact]:
        out = []
        for a in self.files:
            if python and not a.fits_python(python):
                continue
            if not any(p == "any" or p.endswith(platform) for p in a.platforms):
                continue
            out.append(a)
        return out


@dataclass(frozen=True)
class RuntimeArtifact:
    name: str
    version: str
    index_url: str
    requirement: str  # what pip is asked for, e.g. "torch==2.9.1+cu130"
    files: tuple[Artifact, ...]
    source: str = ""


@dataclass(frozen=True)
class ServingFacts:
    """base.toml [serving]: how this upstream line's server is told what the all-reduce tuner decided."""

    fusion_on_flags: tuple[str, ...] = ()  # server flags that turn the fused all-reduce + RMSNorm on
    fusion_off_flags: tuple[str, ...] = ()  # ... and off; () when the line has no such flag (leave "on" out)
    pcie_ipc_env: str = ""  # the opt-in variable of the line's FlashInfer PCIe-IPC all-reduce ("": none)
    pcie_ipc_max_numel_env: str = ""  # its size limit, in elements

    @property
    def has_pcie_ipc(self) -> bool:
        return bool(self.pcie_ipc_env)


SERVING_KEYS = {"fusion_on_flags": tuple, "fusion_off_flags": tuple, "pcie_ipc_env": str,
                "pcie_ipc_max_numel_env": str}


@dataclass(frozen=True)
class Base:
    name: str
    default: bool
    role: str
    local_label: str
    cuda: str
    patched: tuple[PatchedPackage, ...]
    runtime: tuple[RuntimeArtifact, ...]
    dir: Path
    notes: str = ""
    absorbed: dict[str, str] = field(default_factory=dict)  # Logical-Id -> upstream version/PR that has it
    serving: ServingFacts = ServingFacts()

    def package(self, name: str) -> PatchedPackage:
        for p in self.patched:
            if p.package == name or canonicalize_name(p.distribution) == canonicalize_name(name):
                return p
        known = ", ".join(p.package for p in self.patched)
        raise UserError(f"base {self.name}: no patched package {name!r} (this base patches: {known})")

    def runtime_artifact(self, name: str) -> RuntimeArtifact:
        for r in self.runtime:
            if r.name == name:
                return r
        raise UserError(f"base {self.name}: no runtime artifact {name!r}")

    def local_version(self, pkg: PatchedPackage) -> str:
        return f"{pkg.version}+{self.local_label}"

    def absorbed_since(self, logical_id: str) -> tuple[str, str]:
        """(distribution, version) of the first upstream release that has the change `logical_id`."""
        m = ABSORBED_SINCE_RE.match(self.absorbed[logical_id])
        assert m is not None  # load_base validated it
        return self.package(m[1]).distribution, m[2]


def series_for(base: Base, package: str) -> Series:
    """The patch series of one package of a base (patches/<base>/<package>/series)."""
    return load_series(base.dir / package, base.name, package)


def _err(path: Path, msg: str) -> UserError:
    return UserError(f"{path}: {msg}")


def _artifact(path: Path, where: str, d: dict, runtime: bool) -> Artifact:
    for key in ("filename", "sha256") + (() if runtime else ("url", "size")):
        if key not in d:
            raise _err(path, f"{where}: missing key {key!r}")
    sha = d["sha256"]
    if not (SHA256_RE.match(sha) or (runtime and sha == "unknown")):
        raise _err(path, f"{where}: sha256 {sha!r} is not 64 lowercase hex digits" + (
            ' (or "unknown" for a runtime fact)' if runtime else ""))
    if d["filename"].endswith(".whl"):
        try:
            parse_wheel_filename(d["filename"])
        except Exception as e:  # packaging raises InvalidWheelFilename
            raise _err(path, f"{where}: bad wheel file name {d['filename']!r}: {e}") from None
    url = d.get("url", "")
    if url and not url.endswith("/" + d["filename"]) and not runtime:
        raise _err(path, f"{where}: url does not end with the file name {d['filename']!r}")
    return Artifact(filename=d["filename"], url=url, sha256=sha, size=d.get("size"))


def load_base(base_dir: Path) -> Base:
    path = base_dir / "base.toml"
    if not path.is_file():
        raise UserError(f"{path}: missing (every patches/<base>/ needs a base.toml)")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise _err(path, f"not valid TOML: {e}") from None
    b = data.get("base")
    if not isinstance(b, dict):
        raise _err(path, "missing [base] table")
    for key in ("name", "local_label", "cuda", "role"):
        if key not in b:
            raise _err(path, f"[base]: missing key {key!r}")
    if b["name"] != base_dir.name:
        raise _err(path, f"[base] name {b['name']!r} does not match its directory {base_dir.name!r}")
    if not LOCAL_LABEL_RE.match(b["local_label"]):
        raise _err(path, f"[base] local_label {b['local_label']!r} must look like 'sm120.N'")
    patched = []
    for i, p in enumerate(data.get("patched", [])):
        where = f"[[patched]] #{i + 1}"
        for key in ("package", "distribution", "version", "files"):
            if key not in p:
                raise _err(path, f"{where}: missing key {key!r}")
        if p["package"] not in LAYOUTS:
            raise _err(path, f"{where}: package {p['package']!r} has no path layout (known: {sorted(LAYOUTS)})")
        try:
            Version(p["version"])
        except InvalidVersion:
            raise _err(path, f"{where}: version {p['version']!r} is not PEP 440") from None
        files = tuple(_artifact(path, f"{where} file #{j + 1}", f, runtime=False) for j, f in enumerate(p["files"]))
        for a in files:
            name, ver, _, _ = parse_wheel_filename(a.filename)
            if canonicalize_name(name) != canonicalize_name(p["distribution"]) or str(ver) != p["version"]:
                raise _err(path, f"{where}: file {a.filename} is not {p['distribution']} {p['version']}")
        rewrites = dict(p.get("requires_rewrite", {}))
        for k, v in rewrites.items():
            try:
                req = Requirement(v)
            except InvalidRequirement as e:
                raise _err(path, f"{where}: requires_rewrite[{k!r}] = {v!r}: {e}") from None
            if canonicalize_name(req.name) != canonicalize_name(k):
                raise _err(path, f"{where}: requires_rewrite key {k!r} does not name the requirement {v!r}")
        patched.append(PatchedPackage(p["package"], p["distribution"], p["version"], files, rewrites))
    if not patched:
        raise _err(path, "no [[patched]] packages")
    runtime = []
    for i, r in enumerate(data.get("runtime", [])):
        where = f"[[runtime]] #{i + 1}"
        for key in ("name", "version", "index_url", "requirement"):
            if key not in r:
                raise _err(path, f"{where}: missing key {key!r}")
        files = tuple(_artifact(path, f"{where} file #{j + 1}", f, runtime=True)
                      for j, f in enumerate(r.get("files", [])))
        runtime.append(RuntimeArtifact(r["name"], r["version"], r["index_url"], r["requirement"], files,
                                       r.get("source", "")))
    absorbed = dict(b.get("absorbed", {}))
    names = {p.package for p in patched} | {canonicalize_name(p.distribution) for p in patched}
    for lid, since in absorbed.items():
        if not re.fullmatch(r"P\d+", lid):
            raise _err(path, f"[base] absorbed: {lid!r} is not a Logical-Id like P3")
        m = ABSORBED_SINCE_RE.match(since) if isinstance(since, str) else None
        if m is None or (m[1] not in names and canonicalize_name(m[1]) not in names):
            raise _err(path, f"[base] absorbed.{lid} = {since!r}: must start with the upstream release that "
                             f"has the change, '<package> <version>' (package one of {sorted(names)}), e.g. "
                             "'sglang 0.5.14 (PR #28343)'")
    return Base(name=b["name"], default=bool(b.get("default", False)), role=b["role"],
                local_label=b["local_label"], cuda=b["cuda"], patched=tuple(patched), runtime=tuple(runtime),
                dir=base_dir, notes=b.get("notes", ""), absorbed=absorbed,
                serving=_serving(path, data.get("serving", {})))


def _serving(path: Path, d: object) -> ServingFacts:
    if not isinstance(d, dict):
        raise _err(path, "[serving] must be a table")
    unknown = sorted(set(d) - set(SERVING_KEYS))
    if unknown:
        raise _err(path, f"[serving]: unknown key(s) {unknown} (known: {sorted(SERVING_KEYS)})")
    out = {}
    for key, kind in SERVING_KEYS.items():
        if key not in d:
            continue
        v = d[key]
        if kind is tuple:
            if not isinstance(v, list) or not all(isinstance(x, str) and x for x in v):
                raise _err(path, f"[serving] {key}: expected a list of server arguments (strings)")
            v = tuple(v)
        elif not isinstance(v, str) or (v and not re.fullmatch(r"[A-Z][A-Z0-9_]*", v)):
            raise _err(path, f"[serving] {key}: expected an environment variable name, got {v!r}")
        out[key] = v
    facts = ServingFacts(**out)
    if facts.pcie_ipc_max_numel_env and not facts.pcie_ipc_env:
        raise _err(path, "[serving] pcie_ipc_max_numel_env without pcie_ipc_env")
    return facts


def list_bases(root: Path | None = None) -> list[Base]:
    root = root or patches_dir()
    if not root.is_dir():
        raise UserError(f"{root}: no patch tree here (set SGLANG_BLACKWELL_PATCHES or run from a checkout)")
    bases = [load_base(d) for d in sorted(root.iterdir(), key=_base_sort_key) if (d / "base.toml").exists()]
    defaults = [b.name for b in bases if b.default]
    if len(defaults) != 1:
        raise UserError(f"{root}: exactly one base.toml must say `default = true`; found {defaults or 'none'}")
    return bases


def _base_sort_key(p: Path):
    try:
        return (0, Version(p.name))
    except InvalidVersion:
        return (1, p.name)


def serving_line(sglang_version: str, bases: list[Base] | None = None) -> Base:
    """The base line whose server flags an installed sglang speaks: the newest base whose sglang release is not
    newer than it (below every base: the oldest)."""
    try:
        have = Version(sglang_version).release
    except InvalidVersion:
        raise UserError(f"sglang version {sglang_version!r} is not PEP 440") from None
    lines = sorted(bases if bases is not None else list_bases(), key=lambda b: Version(b.package("sglang").version))
    fit = [b for b in lines if Version(b.package("sglang").version).release <= have]
    return fit[-1] if fit else lines[0]


def pcie_ipc_line(bases: list[Base] | None = None) -> Base | None:
    """The first base line whose server has the FlashInfer PCIe-IPC all-reduce ([serving] pcie_ipc_env)."""
    lines = sorted(bases if bases is not None else list_bases(), key=lambda b: Version(b.package("sglang").version))
    return next((b for b in lines if b.serving.has_pcie_ipc), None)


def default_base(root: Path | None = None) -> Base:
    return next(b for b in list_bases(root) if b.default)


def get_base(name: str | None, root: Path | None = None) -> Base:
    bases = list_bases(root)
    if name is None:
        return next(b for b in bases if b.default)
    for b in bases:
        if b.name == name:
            return b
    raise UserError(f"unknown base {name!r} (known: {', '.join(b.name for b in bases)})")
