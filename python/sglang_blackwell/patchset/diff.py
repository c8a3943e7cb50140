"""Parse the diff part of a `git format-patch` file into files and hunks (text only, no binary patches)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

HUNK_RE = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
NO_NEWLINE = b"\\ No newline at end of file"


class DiffParseError(ValueError):
    pass


@dataclass
class Hunk:
    number: int  # 1-based within its file
    old_start: int
    old_len: int
    new_start: int
    new_len: int
    header: str
    lines: list[bytes] = field(default_factory=list)  # each starts with b" ", b"-", b"+" (no newline)
    old_no_eol: bool = False  # last old line has no trailing newline
    new_no_eol: bool = False

    def old_lines(self) -> list[bytes]:
        return [ln[1:] for ln in self.lines if ln[:1] in (b" ", b"-")]

    def new_lines(self) -> list[bytes]:
        return [ln[1:] for ln in self.lines if ln[:1] in (b" ", b"+")]


@dataclass
class FileDiff:
    old_path: str | None  # None for a new file
    new_path: str | None  # None for a deleted file
    hunks: list[Hunk] = field(default_factory=list)
    new_mode: str | None = None

    @property
    def path(self) -> str:
        return self.new_path or self.old_path or "?"


def _strip_prefix(p: bytes) -> str | None:
    s = p.decode()
    if s == "/dev/null":
        return None
    if s[:2] in ("a/", "b/"):
        return s[2:]
    raise DiffParseError(f"path {s!r} lacks the a/ or b/ prefix of a git diff")


def parse_diff(text: bytes) -> list[FileDiff]:
    lines = text.split(b"\n")
    files: list[FileDiff] = []
    i = 0
    n = len(lines)
    while i < n:
        line = lines[i]
        if not line.startswith(b"diff --git "):
            i += 1
            continue
        fd = FileDiff(old_path=None, new_path=None)
        m = re.match(rb"^diff --git a/(\S+) b/(\S+)$", line)
        if not m:
            raise DiffParseError(f"cannot read file header {line.decode(errors='replace')!r}")
        fd.old_path, fd.new_path = m[1].decode(), m[2].decode()
        i += 1
        while i < n and not lines[i].startswith(b"@@") and not lines[i].startswith(b"diff --git "):
            h = lines[i]
            if h.startswith(b"--- "):
                fd.old_path = _strip_prefix(h[4:])
            elif h.startswith(b"+++ "):
                fd.new_path = _strip_prefix(h[4:])
            elif h.startswith(b"new file mode "):
                fd.new_mode = h[len(b"new file mode "):].decode()
            elif h.startswith(b"Binary files") or h.startswith(b"GIT binary patch"):
                raise DiffParseError(f"{fd.path}: binary patches are not supported")
            elif h.startswith(b"-- ") or h == b"--":
                break
            i += 1
        number = 0
        while i < n and lines[i].startswith(b"@@"):
            m = HUNK_RE.match(lines[i])
            if not m:
                raise DiffParseError(f"{fd.path}: bad hunk header {lines[i].decode(errors='replace')!r}")
            number += 1
            hk = Hunk(number, int(m[1]), int(m[2] or 1), int(m[3]), int(m[4] or 1),
                      lines[i].decode(errors="replace"))
            i += 1
            old_seen = new_seen = 0
            while i < n and (old_seen < hk.old_len or new_seen < hk.new_len):
                ln = lines[i]
                tag = ln[:1]
                if ln == b"":  # an empty context line whose leading space was stripped
                    ln, tag = b" ", b" "
                if tag == b" ":
                    old_seen += 1
                    new_seen += 1
                elif tag == b"-":
                    old_seen += 1
                elif tag == b"+":
                    new_seen += 1
                elif ln.startswith(NO_NEWLINE):
                    i += 1
                    continue
                else:
                    raise DiffParseError(f"{fd.path}: hunk #{number}: unexpected line "
                                         f"{ln.decode(errors='replace')!r}")
                hk.lines.append(ln)
                i += 1
                if i < n and lines[i].startswith(NO_NEWLINE):
                    if tag in (b" ", b"-"):
                        hk.old_no_eol = True
                    if tag in (b" ", b"+"):
                        hk.new_no_eol = True
                    i += 1
            if old_seen != hk.old_len or new_seen != hk.new_len:
                raise DiffParseError(f"{fd.path}: hunk #{number} is truncated "
                                     f"(header says -{hk.old_len} +{hk.new_len}, found -{old_seen} +{new_seen})")
            fd.hunks.append(hk)
        files.append(fd)
    return files
