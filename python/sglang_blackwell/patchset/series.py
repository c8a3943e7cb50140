"""A package's patch series as data: the `series` file plus `git format-patch` files with DEP-3 headers.

Each patch is an email (From/Date/Subject) whose body ends with a block of DEP-3 fields, e.g.

    Subject: [PATCH] layers/communicator: accept SM12x in the FlashInfer all-reduce fusion gate

    <long description>

    Origin: vendor, sglang-blackwell
    Forwarded: no
    Upstream-Status: Pending
    Logical-Id: P2
    Last-Update: 2026-11-30
    ---

The git `From:` header is DEP-3's Author; Subject plus body is the Description.
"""

from __future__ import annotations

import email.header
import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UserError
from ..paths import read_bytes, read_text
from .diff import DiffParseError, FileDiff, parse_diff

NAME_RE = re.compile(r"^(\d{4})-[a-z0-9][a-z0-9._-]*\.patch$")
STATUS_RE = re.compile(
    r"^(Pending|Submitted \[.+\]|Backport \[.+\]|Accepted \[.+\]|Denied \[.+\]|"
    r"Inactive-Upstream \[.+\]|Inappropriate \[.+\])$")
DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
LOGICAL_ID_RE = re.compile(r"^P\d+$")
REQUIRED_FIELDS = ("Origin", "Forwarded", "Upstream-Status", "Last-Update", "Logical-Id")
FIELD_RE = re.compile(r"^([A-Z][A-Za-z0-9-]*): ?(.*)$")


@dataclass
class Patch:
    name: str
    path: Path
    raw: bytes
    author: str = ""
    date: str = ""
    subject: str = ""
    body: str = ""
    fields: dict[str, str] = field(default_factory=dict)
    files: list[FileDiff] = field(default_factory=list)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.raw).hexdigest()

    @property
    def logical_id(self) -> str:
        return self.fields.get("Logical-Id", "")

    @property
    def upstream_status(self) -> str:
        return self.fields.get("Upstream-Status", "")

    @property
    def description(self) -> str:
        return self.subject


@dataclass
class Series:
    base: str
    package: str
    dir: Path
    patches: list[Patch]

    @property
    def sha256(self) -> str:
        h = hashlib.sha256()
        for p in self.patches:
            h.update(p.name.encode() + b"\0" + p.raw)
        return h.hexdigest()


def _unfold_headers(head: str) -> dict[str, str]:
    out: dict[str, str] = {}
    key = None
    for line in head.split("\n"):
        if line[:1] in (" ", "\t") and key:
            out[key] += " " + line.strip()
            continue
        m = re.match(r"^([A-Za-z-]+): (.*)$", line)
        if m:
            key = m[1]
            out[key] = m[2]
    return out


def _decode_header(v: str) -> str:
    return str(email.header.make_header(email.header.decode_header(v)))


def parse_patch(path: Path) -> Patch:
    raw = read_bytes(path)
    p = Patch(name=path.name, path=path, raw=raw)
    text = raw.decode("utf-8", errors="replace")
    if not text.startswith("From "):
        raise UserError(f"patch {path.name}: not in `git format-patch` form (first line must be 'From <sha> ...')")
    head_crlf = text.split("\n", 1)[0].endswith("\r")
    if head_crlf:
        raise UserError(f"patch {path.name}: CRLF line ends (a patch is LF text, as `git format-patch` writes it; "
                        "an editor or git's autocrlf converted it)")
    head, _, rest = text.partition("\n\n")
    hdr = _unfold_headers(head)
    p.author = _decode_header(hdr.get("From", ""))
    p.date = hdr.get("Date", "")
    p.subject = re.sub(r"^\[PATCH[^\]]*\]\s*", "", _decode_header(hdr.get("Subject", "")))
    if rest.startswith("---\n"):  # a commit with a subject only: git format-patch writes no body at all
        body, sep = "", "---"
    else:
        body, sep, _ = rest.partition("\n---\n")
    if not sep:
        raise UserError(f"patch {path.name}: no '---' line between the message and the diff")
    p.body = body.strip("\n")
    # DEP-3 fields: the last paragraph of the body made of 'Key: value' lines (+ continuation lines)
    paragraphs = p.body.split("\n\n")
    last = paragraphs[-1].split("\n") if paragraphs else []
    key = None
    fields: dict[str, str] = {}
    for line in last:
        if line[:1] == " " and key:
            fields[key] += "\n" + line[1:]
            continue
        m = FIELD_RE.match(line)
        if not m:
            fields = {}
            break
        key = m[1]
        fields[key] = m[2]
    p.fields = fields
    try:
        p.files = parse_diff(raw)
    except DiffParseError as e:
        raise UserError(f"patch {path.name}: {e}") from None
    return p


def header_problems(p: Patch) -> list[str]:
    """What is wrong with a patch's DEP-3 headers (empty list: nothing)."""
    probs = []
    if not p.author:
        probs.append("no author (git From: header)")
    if not p.subject:
        probs.append("no description (Subject:)")
    if not p.body.strip() or p.body.strip() == "\n".join(f"{k}: {v}" for k, v in p.fields.items()):
        probs.append("no long description (Subject is not enough: say why the change is needed)")
    for f in REQUIRED_FIELDS:
        if not p.fields.get(f, "").strip():
            probs.append(f"missing DEP-3 field {f}:")
    st = p.fields.get("Upstream-Status", "")
    if st and not STATUS_RE.match(st):
        probs.append(f"Upstream-Status {st!r} is not one of Pending | Submitted [url] | Backport [ref] | "
                     "Accepted [ref] | Denied [why] | Inactive-Upstream [ref] | Inappropriate [why]")
    if st.startswith("Backport") and "http" not in p.fields.get("Origin", ""):
        probs.append("a Backport must cite the upstream PR or commit URL in Origin:")
    lu = p.fields.get("Last-Update", "")
    if lu and not DATE_RE.match(lu):
        probs.append(f"Last-Update {lu!r} is not YYYY-MM-DD")
    lid = p.fields.get("Logical-Id", "")
    if lid and not LOGICAL_ID_RE.match(lid):
        probs.append(f"Logical-Id {lid!r} is not like P3")
    if not p.files:
        probs.append("no diff")
    for fd in p.files:
        for gp in dict.fromkeys(x for x in (fd.old_path, fd.new_path) if x):
            why = unsafe_path(gp)
            if why:
                probs.append(f"path {gp} {why}")
    return probs


def unsafe_path(git_path: str) -> str | None:
    """Why a path in a patch cannot name a file of the upstream tree (None: it can)."""
    parts = git_path.split("/")
    if git_path.startswith("/"):
        return "is absolute"
    if any(x in ("..", ".") for x in parts):
        return "has a '.' or '..' component (it would leave or alias the package)"
    if "" in parts:
        return "has an empty component ('//' or a trailing '/')"
    if "\\" in git_path or any(ord(c) < 0x20 for c in git_path):
        return "has a backslash or a control character"
    return None


def read_series_file(series_path: Path) -> list[str]:
    names = []
    for lineno, line in enumerate(read_text(series_path).splitlines(), 1):
        s = line.split("#", 1)[0].strip()
        if not s:
            continue
        if not NAME_RE.match(s):
            raise UserError(f"{series_path}:{lineno}: {s!r} is not a patch name like 0001-short-topic.patch")
        names.append(s)
    return names


def load_series(series_dir: Path, base: str, package: str) -> Series:
    series_path = series_dir / "series"
    if not series_dir.is_dir():
        return Series(base, package, series_dir, [])
    if not series_path.is_file():
        if series_path.exists():
            raise UserError(f"{series_path}: is not a file (the series file lists the patches in order)")
        raise UserError(f"{series_dir}: has no series file")
    names = read_series_file(series_path)
    dupes = {n for n in names if names.count(n) > 1}
    if dupes:
        raise UserError(f"{series_path}: lists {sorted(dupes)} more than once")
    on_disk = {f.name for f in series_dir.glob("*.patch")}
    missing = [n for n in names if n not in on_disk]
    if missing:
        raise UserError(f"{series_path}: lists {missing} but no such file is in {series_dir}")
    unlisted = sorted(on_disk - set(names))
    if unlisted:
        raise UserError(f"{series_dir}: {unlisted} not listed in series (add to series or delete)")
    numbers = [int(NAME_RE.match(n)[1]) for n in names]  # type: ignore[index]
    if numbers != sorted(numbers) or len(set(numbers)) != len(numbers):
        raise UserError(f"{series_path}: patch numbers must be unique and ascending in series order: {names}")
    return Series(base, package, series_dir, [parse_patch(series_dir / n) for n in names])


def validate_series(series: Series) -> list[str]:
    problems = []
    ids: dict[str, str] = {}
    for p in series.patches:
        for prob in header_problems(p):
            problems.append(f"patch {p.name}: {prob}")
        lid = p.logical_id
        if lid:
            if lid in ids:
                problems.append(f"patch {p.name}: Logical-Id {lid} is also used by {ids[lid]} (one concern per patch)")
            ids[lid] = p.name
    return problems
