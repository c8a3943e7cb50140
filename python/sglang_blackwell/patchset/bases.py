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
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from ..errors import UserError
from ..paths import patches_dir
from ..tomlio import load_file
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
    origin: str = field(default="", compare=False)  # where it is pinned: "<base.toml> [[patched]] #1 file #2"

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
        major, minor = map(str, python_version(version))
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
    # how the line's sglang reads a boolean switch (srt/environ.py EnvBool.parse): the value lowercased, nothing
    # stripped; one of bool_env_true: on, of bool_env_false: off, else the switch's default (box/sglang_env.py)
    bool_env_true: tuple[str, ...] = ()
    bool_env_false: tuple[str, ...] = ()

    @property
    def has_pcie_ipc(self) -> bool:
        return bool(self.pcie_ipc_env)


SERVING_KEYS = {"fusion_on_flags": tuple, "fusion_off_flags": tuple, "pcie_ipc_env": str,
                "pcie_ipc_max_numel_env": str, "bool_env_true": tuple, "bool_env_false": tuple}


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


PYTHON_VERSION_RE = re.compile(r"^(\d)\.(\d{1,2})$")


def python_version(text: str, flag: str = "--python") -> tuple[int, int]:
    """A CPython MAJOR.MINOR ("3.12") as (3, 12); anything else is a UserError naming the flag."""
    m = PYTHON_VERSION_RE.match(text.strip()) if isinstance(text, str) else None
    if m is None:
        raise UserError(f"{flag} {text!r}: expected a CPython MAJOR.MINOR, e.g. 3.12")
    return int(m[1]), int(m[2])


_KINDS = {str: "a string", int: "an integer", bool: "true or false", list: "an array", dict: "a table"}


class Fields:
    """Typed reads of one table of base.toml: a missing key, a value of the wrong type and a key nobody reads are
    errors naming the file and the key (`where` says which table: "[base]", "[[patched]] #1 file #2")."""

    def __init__(self, path: Path, where: str, table: object, known: set[str]):
        if not isinstance(table, dict):
            raise _err(path, f"{where} must be a table, not {_toml_kind(table)}")
        unknown = sorted(set(table) - known)
        if unknown:
            raise _err(path, f"{where}: unknown key(s) {unknown} (known: {sorted(known)})")
        self.path, self.where, self.table = path, where, table

    def has(self, key: str) -> bool:
        return key in self.table

    def get(self, key: str, kind: type, default: object = ..., *, of: type | None = None) -> Any:
        """table[key], which must be of `kind` (a bool is no integer; `of`: the type of a list's items or a table's
        values); `default` when absent (no default: the key is required)."""
        if key not in self.table:
            if default is ...:
                raise _err(self.path, f"{self.where}: missing key {key!r}")
            return default
        v = self.table[key]
        ok = isinstance(v, kind) and not (kind is int and isinstance(v, bool))
        if ok and of is not None:
            items = v if isinstance(v, list) else list(v.values()) if isinstance(v, dict) else []
            ok = all(isinstance(x, of) and not (of is int and isinstance(x, bool)) for x in items)
        if not ok:
            what = _KINDS[kind] + (f" of {_KINDS[of].split(' ', 1)[1]}s" if of is not None else "")
            raise _err(self.path, f"{self.where} {key} = {_short(v)}: expected {what}, not {_toml_kind(v)}")
        return v


def _toml_kind(v: object) -> str:
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
        return "an array of tables"
    return {str: "a string", int: "an integer", float: "a float", list: "an array", dict: "a table"}.get(
        type(v), f"a {type(v).__name__}")


def _short(v: object) -> str:
    r = repr(v)
    return r if len(r) <= 80 else r[:77] + "..."


ARTIFACT_KEYS = {"filename", "url", "sha256", "size"}


def file_name_problem(name: str) -> str | None:
    """Why `name` cannot be the name of a pinned file (a cache entry, a requirement line, a base.toml string), or
    None: empty, hidden, a path separator or a control character in it, longer than a file name may be."""
    if not name or name in (".", ".."):
        return "is not a file name"
    if "/" in name or "\\" in name:
        return "holds a path separator"
    if name.startswith("."):
        return "is a hidden file name"
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in name):
        return "holds a control character"
    if len(name.encode()) > 255:
        return "is longer than a file name may be (255 bytes)"
    return None


def url_problem(url: str, filename: str, schemes: tuple[str, ...] = ("http", "https")) -> str | None:
    """Why `url` cannot be where the file `filename` is downloaded from, or None: an absolute URL of `schemes`
    with no whitespace, control character or fragment, whose last path segment is the file name (pip decides from
    the URL whether it fetched a wheel or an sdist it would build)."""
    if any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in url):
        return "holds whitespace or a control character"
    parts = urllib.parse.urlsplit(url)
    if parts.scheme.lower() not in schemes or (parts.scheme.lower() != "file" and not parts.netloc):
        return f"is not an absolute {' or '.join(schemes)} URL"
    if "#" in url:
        return "has a fragment (#...)"
    if urllib.parse.unquote(parts.path.rsplit("/", 1)[-1]) != filename:
        return f"does not end with the file name {filename}"
    return None


def _artifact(path: Path, where: str, d: object, runtime: bool) -> Artifact:
    f = Fields(path, where, d, ARTIFACT_KEYS)
    filename = f.get("filename", str)
    sha = f.get("sha256", str)
    url = f.get("url", str, "" if runtime else ...)
    size = f.get("size", int, None if runtime else ...)
    if not (SHA256_RE.match(sha) or (runtime and sha == "unknown")):
        raise _err(path, f"{where}: sha256 {sha!r} is not 64 lowercase hex digits" + (
            ' (or "unknown" for a runtime fact)' if runtime else ""))
    if size is not None and size <= 0:
        raise _err(path, f"{where}: size {size} is not a file size in bytes (a positive integer)")
    if not filename or "/" in filename or filename in (".", ".."):
        raise _err(path, f"{where}: filename {filename!r} is not a file name")
    if file_name_problem(filename):
        raise _err(path, f"{where}: filename {filename!r} {file_name_problem(filename)}")
    if filename.endswith(".whl"):
        try:
            parse_wheel_filename(filename)
        except Exception as e:  # packaging raises InvalidWheelFilename
            raise _err(path, f"{where}: bad wheel file name {filename!r}: {e}") from None
    elif not runtime:
        raise _err(path, f"{where}: filename {filename!r} is not a wheel (.whl)")
    if url and not url.endswith("/" + filename) and not runtime:
        raise _err(path, f"{where}: url does not end with the file name {filename!r}")
    return Artifact(filename=filename, url=url, sha256=sha, size=size, origin=f"{path} {where}")


TOP_KEYS = {"base", "patched", "runtime", "serving"}
BASE_KEYS = {"name", "default", "role", "local_label", "cuda", "notes", "absorbed"}
PATCHED_KEYS = {"package", "distribution", "version", "files", "requires_rewrite"}
RUNTIME_KEYS = {"name", "version", "index_url", "requirement", "files", "source"}


def _tables(path: Path, where: str, v: object) -> list:
    """An array of tables ([[patched]]): a single [table] or anything else is named as such."""
    if not isinstance(v, list) or not all(isinstance(x, dict) for x in v):
        raise _err(path, f"{where}: expected an array of tables ([[{where.strip('[]')}]] sections), "
                         f"not {_toml_kind(v)}")
    return v


def load_base(base_dir: Path) -> Base:
    path = base_dir / "base.toml"
    if not path.is_file():
        raise UserError(f"{path}: missing (every patches/<base>/ needs a base.toml)")
    data = load_file(path)
    top = Fields(path, "the top level", data, TOP_KEYS)
    b = Fields(path, "[base]", top.get("base", dict), BASE_KEYS)
    name, local_label = b.get("name", str), b.get("local_label", str)
    role, cuda = b.get("role", str), b.get("cuda", str)
    default, notes = b.get("default", bool, False), b.get("notes", str, "")
    if name != base_dir.name:
        raise _err(path, f"[base] name {name!r} does not match its directory {base_dir.name!r}")
    if not LOCAL_LABEL_RE.match(local_label):
        raise _err(path, f"[base] local_label {local_label!r} must look like 'sm120.N'")
    patched = []
    for i, raw in enumerate(_tables(path, "[[patched]]", top.get("patched", list, []))):
        where = f"[[patched]] #{i + 1}"
        p = Fields(path, where, raw, PATCHED_KEYS)
        package, dist, version = p.get("package", str), p.get("distribution", str), p.get("version", str)
        if package not in LAYOUTS:
            raise _err(path, f"{where}: package {package!r} has no path layout (known: {sorted(LAYOUTS)})")
        try:
            Version(version)
        except InvalidVersion:
            raise _err(path, f"{where}: version {version!r} is not PEP 440") from None
        files = tuple(_artifact(path, f"{where} file #{j + 1}", f, runtime=False)
                      for j, f in enumerate(_tables(path, f"{where} files", p.get("files", list))))
        for a in files:
            fname, ver, _, _ = parse_wheel_filename(a.filename)
            if canonicalize_name(fname) != canonicalize_name(dist) or str(ver) != version:
                raise _err(path, f"{where}: file {a.filename} is not {dist} {version}")
        rewrites = dict(p.get("requires_rewrite", dict, {}, of=str))
        for k, v in rewrites.items():
            try:
                req = Requirement(v)
            except InvalidRequirement as e:
                raise _err(path, f"{where}: requires_rewrite[{k!r}] = {v!r}: {e}") from None
            if canonicalize_name(req.name) != canonicalize_name(k):
                raise _err(path, f"{where}: requires_rewrite key {k!r} does not name the requirement {v!r}")
        patched.append(PatchedPackage(package, dist, version, files, rewrites))
    if not patched:
        raise _err(path, "no [[patched]] packages")
    runtime = []
    for i, raw in enumerate(_tables(path, "[[runtime]]", top.get("runtime", list, []))):
        where = f"[[runtime]] #{i + 1}"
        r = Fields(path, where, raw, RUNTIME_KEYS)
        files = tuple(_artifact(path, f"{where} file #{j + 1}", f, runtime=True)
                      for j, f in enumerate(_tables(path, f"{where} files", r.get("files", list, []))))
        runtime.append(RuntimeArtifact(r.get("name", str), r.get("version", str), r.get("index_url", str),
                                       r.get("requirement", str), files, r.get("source", str, "")))
    absorbed = dict(b.get("absorbed", dict, {}))
    names = {p.package for p in patched} | {canonicalize_name(p.distribution) for p in patched}
    for lid, since in absorbed.items():
        if not re.fullmatch(r"P\d+", lid):
            raise _err(path, f"[base] absorbed: {lid!r} is not a Logical-Id like P3")
        m = ABSORBED_SINCE_RE.match(since) if isinstance(since, str) else None
        if m is None or (m[1] not in names and canonicalize_name(m[1]) not in names):
            raise _err(path, f"[base] absorbed.{lid} = {since!r}: must start with the upstream release that "
                             f"has the change, '<package> <version>' (package one of {sorted(names)}), e.g. "
                             "'sglang 0.5.14 (PR #28343)'")
    return Base(name=name, default=default, role=role, local_label=local_label, cuda=cuda, patched=tuple(patched),
                runtime=tuple(runtime), dir=base_dir, notes=notes, absorbed=absorbed,
                serving=_serving(path, top.get("serving", dict, {})))


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
                what = "environment values" if key.startswith("bool_env") else "server arguments"
                raise _err(path, f"[serving] {key} = {_short(v)}: expected a list of {what} (strings)")
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
        raise UserError(f"{root}: exactly one base.toml must say `default = true`; found {defaults or 'none'} (read: "
                        f"{', '.join(str(b.dir / 'base.toml') for b in bases) or 'no base.toml'})")
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
