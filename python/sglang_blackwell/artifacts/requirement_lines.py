"""Lines of pip requirement files, as the project's own files hold them: `--deps` lists and lock.toml's constraint
files (`name==version` per line, deps.py, lock_recipe.py) and the hashed locks (`name==version \\`, then
`    --hash=sha256:HEX`, then `    # via ...`, lock.py).

One grammar for all of them, pip's where it matters: a `#` at the start of a line or after whitespace starts a
comment (so a URL's `#fragment` stays); a line ending in `\\` continues on the next, and a blank or comment line
ends the continuation; what is left is a PEP 508 requirement (packaging's Requirement) followed, where the file
may have them, by `--hash=sha256:HEX` options. No other option is read (-r, -c, -e, --index-url: an error).
What else a file may hold (exact pins only, a marker or none) its reader says. Every error names the file and
the line where the requirement starts: `[what ]path:line: 'text': why`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ..errors import UserError
from ..paths import read_text

COMMENT_RE = re.compile(r"(^|\s+)#.*$")
OPTIONS_RE = re.compile(r"(^|\s)-")  # where the options start: the first word beginning with a dash
HASH_RE = re.compile(r"--hash=sha256:([0-9a-f]{64})")


@dataclass(frozen=True)
class RequirementLine:
    """One requirement of a file: its continuation lines joined, its comment cut off."""

    where: str  # "[what ]path:line" of its first line, for messages
    number: int  # that line, 1-based
    text: str  # as written, without the comment; continuation lines joined by a space
    requirement: Requirement
    hashes: tuple[str, ...] = ()  # the sha256 hex digests of its --hash options, in order
    comments: tuple[str, ...] = ()  # the whole-line comments after it (before the next requirement), as written

    @property
    def name(self) -> str:
        return canonicalize_name(self.requirement.name)

    @property
    def pinned_version(self) -> str | None:
        """The version, as written, when the line pins exactly one (`==V` or `===V`, V a PEP 440 version without
        a wildcard, no URL); extras and markers are the reader's to judge."""
        specs = list(self.requirement.specifier)
        if self.requirement.url or len(specs) != 1 or specs[0].operator not in ("==", "===") \
                or "*" in specs[0].version:
            return None
        try:
            Version(specs[0].version)
        except InvalidVersion:
            return None
        return specs[0].version


def read_requirement_lines(path: Path, what: str = "", *, hashes: bool = False) -> list[RequirementLine]:
    """The requirements of the file at `path`; `what` names it in errors ("--deps"); `hashes`: whether its lines
    may carry --hash options."""
    return parse_requirement_lines(read_text(path, what), path, what, hashes=hashes)


def parse_requirement_lines(text: str, path: Path, what: str = "", *, hashes: bool = False) -> list[RequirementLine]:
    """The requirements of `text`, the content of the file at `path` (see read_requirement_lines)."""
    prefix = f"{what} {path}" if what else str(path)
    out: list[RequirementLine] = []
    comments: list[str] = []  # the whole-line comments since the last requirement
    pieces: list[str] = []
    start = 0  # the first line of the requirement being read; 0: none

    def attach_comments() -> None:
        if out and comments:
            out[-1] = replace(out[-1], comments=tuple(comments))
        comments.clear()

    def end_requirement() -> None:
        nonlocal pieces, start
        out.append(_parse(f"{prefix}:{start}", start, " ".join(pieces), hashes))
        pieces, start = [], 0

    for i, raw in enumerate(text.splitlines(), 1):
        line = COMMENT_RE.sub("", raw).strip()
        if not line:  # a blank or comment line; it ends a continuation
            if start:
                end_requirement()
            if raw.strip():
                comments.append(raw)
            continue
        if not start:
            attach_comments()
            start = i
        more = line.endswith("\\")
        piece = line[:-1].strip() if more else line
        if piece:
            pieces.append(piece)
        if not more:
            end_requirement()
    if start:
        raise UserError(f"{prefix}:{start}: {' '.join(pieces)!r} ends the file with a backslash (its continuation "
                        "line is missing)")
    attach_comments()
    return out


def _parse(where: str, number: int, text: str, hashes: bool) -> RequirementLine:
    m = OPTIONS_RE.search(text)
    req_text, options = (text[:m.start()].strip(), text[m.start():].split()) if m else (text, [])
    if not req_text:
        raise UserError(f"{where}: {text!r}: not a requirement (options such as -r, -c, -e, --index-url are not "
                        "read here)")
    try:
        req = Requirement(req_text)
    except InvalidRequirement as e:
        raise UserError(f"{where}: {text!r}: {e}") from None
    digests = []
    for opt in options:
        h = HASH_RE.fullmatch(opt)
        if h is None or not hashes:
            allowed = "only --hash=sha256:<64 lowercase hex digits>" if hashes else "a requirement only, no options"
            raise UserError(f"{where}: {text!r}: {opt!r} is not read here ({allowed})")
        digests.append(h[1])
    return RequirementLine(where, number, text, req, tuple(digests))
