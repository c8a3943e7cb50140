"""`base bump`: one component of a base line re-pinned from the package index, with verified sha256 and size.

    base_bump --base 0.5.23 flashinfer-python==0.7.4 [--write] [--index-url URL]

The component is the base.toml `[[patched]]` or `[[runtime]]` entry whose distribution the pin names. The release
and its wheels come from the index's JSON API (drift.release: yanked files and files without a sha256 are never
taken); for every file the entry pins now, the new release's wheel with the same tags is taken (same Python /
ABI tags and platform; failing that the same tags on the same architecture, e.g. manylinux_2_28 -> 2_34). Each
is downloaded once through fetch (pip, verified against the sha256 the index publishes, cached), and the sha256
and size written are those of the downloaded bytes.

Default: print the new entry and a unified diff of base.toml. `--write`: rewrite base.toml atomically with only
that entry changed (its version, a runtime entry's `requirement`, its files; every other byte kept), after
reading the result back with load_base. Either way it then says what must follow (the label bump and
`label lock`, the dependency locks, requirement rewrites where another pinned wheel requires the old version
exactly), and does none of it. Bad input (an unknown base, a package the base does not pin, a version or file
the index lacks, a file without a published sha256) is a UserError naming it, and nothing is written.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.tags import Tag
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from .. import tomlio
from ..errors import UserError
from ..httpclient import Limits, parse_limits
from ..paths import output_problem, write_atomic
from .bases import Artifact, Base, PatchedPackage, RuntimeArtifact, get_base, load_base, series_for
from .fetch import Progress, fetch, sha256_file
from .index_json import Release, pypi_url, release
from .wheel_metadata import wheel_metadata

PYPI_SIMPLE = "https://pypi.org/simple"
_HEADER = re.compile(r"^\[\[?\s*([A-Za-z0-9_.\-]+)\s*\]\]?\s*(#.*)?$")
_ARCH = re.compile(r"(x86_64|aarch64|arm64|amd64|i686|ppc64le|s390x|universal2|win32)$")

Component = PatchedPackage | RuntimeArtifact


@dataclass
class Bump:
    base: Base
    kind: str  # "patched" | "runtime"
    number: int  # 1-based among the entries of that kind, as load_base's errors count them
    old: Component
    version: str
    files: list[Artifact]
    entry: str  # the new entry's text
    old_text: str
    new_text: str
    follow: list[str]

    @property
    def path(self) -> Path:
        return self.base.dir / "base.toml"

    def diff(self) -> str:
        rel = f"patches/{self.base.name}/base.toml"
        return "".join(difflib.unified_diff(self.old_text.splitlines(True), self.new_text.splitlines(True),
                                            f"a/{rel}", f"b/{rel}"))


def parse_pin(text: str) -> tuple[str, str]:
    """"flashinfer-python==0.7.4" -> ("flashinfer-python", "0.7.4"): one exact version, nothing else."""
    try:
        req = Requirement(text)
    except InvalidRequirement as e:
        raise UserError(f"pin {text!r}: expected NAME==VERSION, e.g. flashinfer-python==0.7.4 ({e})") from None
    specs = list(req.specifier)
    if len(specs) != 1 or specs[0].operator != "==" or "*" in specs[0].version or req.extras or req.marker:
        raise UserError(f"pin {text!r}: expected NAME==VERSION with one exact version, e.g. flashinfer-python==0.7.4")
    return str(canonicalize_name(req.name)), specs[0].version


def _dist(c: Component) -> str:
    return c.distribution if isinstance(c, PatchedPackage) else c.name


def _name(c: Component) -> str:
    return str(canonicalize_name(_dist(c)))


def _sizes(c: Component) -> bool:
    """Does the entry pin file sizes? (always for [[patched]]; a [[runtime]] entry keeps its shape)"""
    return isinstance(c, PatchedPackage) or (bool(c.files) and all(a.size is not None for a in c.files))


def find_component(base: Base, dist: str) -> tuple[str, int, Component]:
    for kind, entries in (("patched", base.patched), ("runtime", base.runtime)):
        for i, c in enumerate(entries):
            if _name(c) == dist:
                return kind, i + 1, c
    pinned = ", ".join(_name(c) for c in (*base.patched, *base.runtime))
    raise UserError(f"base {base.name}: pins no {dist!r} in base.toml (it pins: {pinned})")


# ---- which of the new release's files -------------------------------------------------------------------------

def _tags(filename: str) -> frozenset[Tag]:
    return frozenset(parse_wheel_filename(filename)[3])


def _loose(tags: frozenset[Tag]) -> tuple[frozenset, frozenset]:
    arch = frozenset(t.platform if t.platform == "any" else (m[1] if (m := _ARCH.search(t.platform)) else t.platform)
                     for t in tags)
    return frozenset((t.interpreter, t.abi) for t in tags), arch


def match_files(current: tuple[Artifact, ...], rel: Release, index: str) -> list[Artifact]:
    """For each pinned file, the new release's wheel with its tags (exact, else the same tags on the same
    architecture); a wheel the index gives no sha256 for is named, never taken."""
    out = []
    for a in current:
        want = _tags(a.filename)
        for same in (lambda t, w=want: t == w, lambda t, w=want: _loose(t) == _loose(w)):
            hits = sorted((f for f in rel.files if same(_tags(f.filename))), key=lambda f: f.filename)
            bare = sorted(n for n in rel.unhashed if same(_tags(n)))
            if hits or bare:
                break
        if not hits and bare:
            raise UserError(f"{rel.distribution} {rel.version} on {index}: {bare[0]} publishes no sha256; a file "
                            "without a published hash cannot be verified, nothing was written")
        if not hits:
            have = ", ".join(f.filename for f in rel.files) or "no wheel with a sha256"
            raise UserError(f"{rel.distribution} {rel.version} on {index}: no wheel like {a.filename} "
                            f"(it has: {have}); nothing was written")
        out.append(hits[0])
    return out


def verified(arts: list[Artifact], cache: Path | None, progress: Progress | None,
             limits: Limits | None = None) -> list[tuple[Artifact, Path]]:
    """Each file downloaded once through fetch (verified against the index's sha256, and its size when the index
    gives one); the pin is the sha256 and size of the bytes on disk."""
    out = []
    for a in arts:
        path = fetch(a, cache, progress=progress, limits=limits)
        out.append((Artifact(a.filename, a.url, sha256_file(path), path.stat().st_size), path))
    return out


# ---- base.toml as text ----------------------------------------------------------------------------------------

def entry_span(lines: list[str], kind: str, number: int) -> tuple[int, int]:
    """Lines [start, end) of the number-th [[kind]] entry: its header up to the next table that is not one of
    its [[kind.files]], less the blank and comment lines just before that table (they belong to it)."""
    heads = [(i, m[1]) for i, ln in enumerate(lines) if (m := _HEADER.match(ln.strip()))]
    starts = [i for i, name in heads if name == kind and lines[i].lstrip().startswith("[[")]
    if len(starts) < number:
        raise UserError(f"base.toml: cannot find [[{kind}]] #{number} as text; edit it by hand")
    start = starts[number - 1]
    end = next((i for i, name in heads if i > start and name != f"{kind}.files"), len(lines))
    while end > start + 1 and (not lines[end - 1].strip() or lines[end - 1].lstrip().startswith("#")):
        end -= 1
    return start, end


def _replace_line(lines: list[str], key: str, old: str, new: str, where: str) -> list[str]:
    pat = re.compile(rf'^(\s*{key}\s*=\s*")({re.escape(old)})("\s*(#.*)?)$')
    hits = [i for i, ln in enumerate(lines) if pat.match(ln.rstrip("\n"))]
    if len(hits) != 1:
        raise UserError(f"base.toml {where}: expected one line `{key} = \"{old}\"`, found {len(hits)}; edit it by "
                        "hand")
    i = hits[0]
    eol = lines[i][len(lines[i].rstrip("\n")):]
    lines = list(lines)
    lines[i] = pat.sub(lambda m: m[1] + tomlio.quote(new)[1:-1] + m[3], lines[i].rstrip("\n")) + eol
    return lines


def _file_fields(a: Artifact, size: bool) -> list[tuple[str, str]]:
    """The pinned file's fields as TOML (strings quoted and escaped by tomlio's writer)."""
    fields = [(k, tomlio.quote(v)) for k, v in (("filename", a.filename), ("url", a.url), ("sha256", a.sha256))]
    return fields + ([("size", str(a.size))] if size else [])


def render_patched(entry: list[str], old: PatchedPackage, version: str, files: list[Artifact], where: str) -> str:
    first = next((i for i, ln in enumerate(entry) if ln.strip() == "[[patched.files]]"), len(entry))
    head = _replace_line(entry[:first], "version", old.version, version, where)
    blocks = ["[[patched.files]]\n" + "".join(f"{k} = {v}\n" for k, v in _file_fields(a, True)) for a in files]
    return "".join(head) + "\n".join(blocks)


def render_runtime(entry: list[str], old: RuntimeArtifact, version: str, files: list[Artifact], where: str) -> str:
    lines = _replace_line(entry, "version", old.version, version, where)
    if old.requirement:
        req = old.requirement.replace(f"=={old.version}", f"=={version}")
        if req == old.requirement:
            raise UserError(f"base.toml {where}: requirement {old.requirement!r} does not pin =={old.version}; edit "
                            "it by hand")
        lines = _replace_line(lines, "requirement", old.requirement, req, where)
    start = next((i for i, ln in enumerate(lines) if re.match(r"^\s*files\s*=\s*\[", ln)), None)
    if start is None:
        raise UserError(f"base.toml {where}: no `files = [` line; edit it by hand")
    end = start if lines[start].rstrip().endswith("]") else next(
        (i for i in range(start + 1, len(lines)) if lines[i].strip() == "]"), None)
    if end is None:
        raise UserError(f"base.toml {where}: the files array does not end with a `]` line; edit it by hand")
    rows = ["  { " + ", ".join(f"{k} = {v}" for k, v in _file_fields(a, _sizes(old))) + " },\n" for a in files]
    return "".join(lines[:start]) + "files = [\n" + "".join(rows) + "]\n" + "".join(lines[end + 1:])


def _read_back(base: Base, text: str, kind: str, number: int, old: Component, version: str,
               files: list[Artifact]) -> None:
    """The new base.toml must load, with that entry at the new version and files, and every other entry as it was."""
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / base.name
        d.mkdir()
        (d / "base.toml").write_text(text)
        try:
            new = load_base(d)
        except UserError as e:
            why = str(e).replace(str(d / "base.toml"), "the rewritten file").replace(str(d), base.name)
            raise UserError(f"{base.dir / 'base.toml'}: the rewritten file would not load ({why}); nothing was "
                            "written: edit it by hand") from None
    old_entries, new_entries = list(getattr(base, kind)), list(getattr(new, kind))
    got = new_entries[number - 1]
    want = files if _sizes(old) else [Artifact(a.filename, a.url, a.sha256) for a in files]
    if (got.version != version or list(got.files) != want
            or len(old_entries) != len(new_entries)
            or any(o != n for j, (o, n) in enumerate(zip(old_entries, new_entries, strict=True)) if j != number - 1)):
        raise UserError(f"{base.dir / 'base.toml'}: the rewritten file does not read back as that one entry changed "
                        "(an unusual layout?); nothing was written: edit it by hand")


# ---- what must follow -----------------------------------------------------------------------------------------

def requires(wheel: Path) -> list[Requirement]:
    """A wheel's Requires-Dist, those of extras left out."""
    meta = wheel_metadata(wheel)
    out = []
    for r in meta.get_all("Requires-Dist") or []:
        try:
            req = Requirement(r)
        except InvalidRequirement:
            continue
        if req.marker is None or "extra" not in str(req.marker):
            out.append(req)
    return out


def _admits(req: Requirement, version: str) -> bool:
    return req.specifier.contains(Version(version), prereleases=True)


def _exact(req: Requirement, version: str) -> str:
    extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
    return f"{req.name}{extras}=={version}" + (f"; {req.marker}" if req.marker else "")


def what_follows(base: Base, kind: str, old: Component, version: str, new_wheel: Path | None,
                 cache: Path | None, progress: Progress | None, old_text: str, span: tuple[int, int],
                 rel: Release, picked: list[Artifact], limits: Limits | None = None) -> list[str]:
    name, b = _name(old), base.name
    out = []
    if kind == "patched":
        n = int(base.local_label.rsplit(".", 1)[1])
        out.append(f"bump [base] local_label {base.local_label} -> sm120.{n + 1} (a re-pinned upstream file is a new "
                   f"input of the label) and record it: `sglang-blackwell label lock --base {b}`")
        if series_for(base, old.package).patches:
            out.append(f"`sglang-blackwell check --base {b}`: the {old.package} series must apply to {version} "
                       "(needs refresh: `checkout` on this base, `export`)")
        if old.requires_rewrite:
            out.append(f"[[patched]] {old.package} keeps requires_rewrite {old.requires_rewrite}: check it still fits "
                       f"{old.distribution} {version}")
    out.append(f"`sglang-blackwell lock --base {b}`: the dependency locks resolve against the new pins")
    for q in base.patched:
        if _name(q) == name or not q.files:
            continue
        rewrite = next((v for k, v in q.requires_rewrite.items() if canonicalize_name(k) == name), None)
        if rewrite is not None:
            if not _admits(Requirement(rewrite), version):
                out.append(f"[[patched]] {q.package} requires_rewrite {rewrite!r} does not admit {name} {version}: "
                           f"change it to {_exact(Requirement(rewrite), version)!r}")
            continue
        for req in requires(fetch(q.files[0], cache, progress=progress, limits=limits)):
            if canonicalize_name(req.name) == name and not _admits(req, version):
                out.append(f"{q.distribution} {q.version} requires {str(req)!r} (its METADATA), which {version} does "
                           f"not satisfy: add requires_rewrite = {{ \"{req.name}\" = \"{_exact(req, version)}\" }} to "
                           f"[[patched]] {q.package} (build rewrites the wheel's Requires-Dist), or bump "
                           f"{q.distribution}")
    if new_wheel is not None:
        pins = {_name(c): c.version for c in (*base.patched, *base.runtime) if _name(c) != name}
        for req in requires(new_wheel):
            have = pins.get(str(canonicalize_name(req.name)))
            if have is not None and not _admits(req, have):
                out.append(f"{_dist(old)} {version} requires {str(req)!r}, which the base's {req.name} {have} does "
                           f"not satisfy: bump it too (`--base {b} {canonicalize_name(req.name)}==...`)")
    lines = old_text.splitlines()
    first = next((i for i, ln in enumerate(lines) if ln.strip() in ("[[patched]]", "[[runtime]]")), len(lines))
    words = [i for i, ln in enumerate(lines) if i < first or ln.lstrip().startswith("#")]  # comments, [base]
    stale = [str(i + 1) for i in words if not span[0] <= i < span[1]
             and re.search(rf"(?<![\w.]){re.escape(old.version)}(?![\w]|\.\d)", lines[i])]
    if stale:
        out.append(f"base.toml still says {old.version} outside the entry (line {', '.join(stale)}: the header "
                   "comment, role, notes?): update the words by hand")
    if kind == "runtime" and old.source:
        out.append(f"[[runtime]] {old.name} source still reads {old.source!r}: check it")
    unpinned = sorted({t.interpreter for f in rel.files for t in _tags(f.filename)}
                      - {t.interpreter for f in picked for t in _tags(f.filename)})
    if unpinned:
        out.append(f"{rel.distribution} {version} also has wheels for {', '.join(unpinned)}, not pinned (only the "
                   "tags the entry pinned were taken)")
    return out


# ---- the whole bump -------------------------------------------------------------------------------------------

def bump(base: Base, pin: str, *, index: str | None = None, cache: Path | None = None,
         progress: Progress | None = None, limits: Limits | None = None) -> Bump:
    """The bump worked out (nothing written): every read of the index and every download within `limits`
    (--request-timeouts), every string the index gave validated (index_json.py) before it is used."""
    dist, version = parse_pin(pin)
    kind, number, old = find_component(base, dist)
    where = f"[[{kind}]] #{number} ({_dist(old)})"
    if Version(version) == Version(old.version):
        raise UserError(f"base {base.name}: {where} already pins {_dist(old)} {old.version}; nothing to do")
    if not old.files:
        raise UserError(f"base {base.name}: {where} pins no files (nothing an index serves); edit it by hand")
    if isinstance(old, RuntimeArtifact) and index is None and old.index_url.rstrip("/") != PYPI_SIMPLE:
        raise UserError(f"base {base.name}: {where} comes from {old.index_url or 'no index'}, not PyPI; pass "
                        "--index-url with a root that serves PyPI's JSON API, or edit it by hand")
    root = (index or pypi_url()).rstrip("/")
    rel = release(_dist(old), version, root, limits)
    picked = match_files(old.files, rel, root)
    got = verified(picked, cache, progress, limits)
    files = [a for a, _ in got]
    old_text = (base.dir / "base.toml").read_text()
    lines = old_text.splitlines(True)
    span = entry_span(lines, kind, number)
    render = render_patched if isinstance(old, PatchedPackage) else render_runtime
    entry = render(lines[span[0]:span[1]], old, version, files, where)  # type: ignore[arg-type]
    new_text = "".join(lines[:span[0]]) + entry + "".join(lines[span[1]:])
    _read_back(base, new_text, kind, number, old, version, files)
    follow = what_follows(base, kind, old, version, got[0][1], cache, progress, old_text, span, rel, picked, limits)
    return Bump(base, kind, number, old, version, files, entry, old_text, new_text, follow)


def write(b: Bump) -> Path:
    """base.toml rewritten atomically; a symlinked base.toml stays a link (the file it names is rewritten)."""
    if b.path.read_text() != b.old_text:
        raise UserError(f"{b.path}: changed while the bump was worked out; nothing was written, run it again")
    target = b.path.resolve()
    problem = output_problem(target)
    if problem:
        raise UserError(f"{b.path}: {problem}; nothing was written")
    write_atomic(target, b.new_text)
    return b.path


DESCRIPTION = ("Re-pin one component of a base line (a [[patched]] or [[runtime]] entry of patches/<base>/base.toml) "
               "from the package index: the new version's files, downloaded and verified, with their sha256 and "
               "size. Prints the entry and a diff of base.toml; --write rewrites it. Says what must follow; does "
               "none of it.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """`base bump`'s arguments (cli.py's `base bump` and run() below)."""
    p.add_argument("pin", help="NAME==VERSION, e.g. flashinfer-python==0.7.4")
    p.add_argument("--base", help="base line (default: the default base)")
    p.add_argument("--write", action="store_true", help="rewrite base.toml (only that entry changes)")
    p.add_argument("--index-url", help="a root serving PyPI's JSON API (<url>/pypi/<name>/json; default: "
                   "$SGLANG_BLACKWELL_PYPI_URL or https://pypi.org)")
    p.add_argument("--request-timeouts", metavar="FIRST,IDLE,TOTAL",
                   help="deadlines in seconds of every read of the index (its first byte, the longest wait between "
                        f"two bytes, the whole answer) and TOTAL of every download (default {Limits().text()}, as "
                        "bench eagle3)")


def execute(a: argparse.Namespace) -> int:
    """`sglang-blackwell base bump`: the entry (and with --write, base.toml rewritten), then what must follow.
    Bad input: UserError, nothing written."""
    limits = parse_limits(getattr(a, "request_timeouts", None))
    b = bump(get_base(a.base), a.pin, index=a.index_url, progress=lambda m: print(m, file=sys.stderr), limits=limits)
    if a.write:
        write(b)
    what = f"[[{b.kind}]] {_dist(b.old)} {b.old.version} -> {b.version}"
    if a.write:
        print(f"wrote {b.path}: {what}")
    else:
        print(f"new entry ({what}):\n{b.entry}")
        print(b.diff(), end="")
        print(f"(not written: --write rewrites {b.path})")
    print("then:")
    for step in b.follow:
        print(f"  - {step}")
    return 0


def run(argv: list[str] | None = None) -> int:
    """`base bump` as a program of its own (its tests): the same arguments, errors as one line and exit 2."""
    p = argparse.ArgumentParser(prog="sglang-blackwell base bump", description=DESCRIPTION)
    add_arguments(p)
    a = p.parse_args(argv)
    try:
        return execute(a)
    except UserError as e:
        print(f"sglang-blackwell base bump: error: {e}", file=sys.stderr)
        return e.exit_code
