"""Apply a series with zero fuzz and zero offset, to file contents keyed by upstream git path.

Every hunk must match exactly where its header says. Anything else is an error that names the patch, the file
and the hunk, and says whether the context was found elsewhere (the patch needs a refresh) or not at all
(the upstream code changed).
"""

from __future__ import annotations

from collections.abc import Iterable

from ..errors import ApplyError
from .diff import FileDiff, Hunk
from .series import Patch, unsafe_path


class _Text:
    __slots__ = ("lines", "eol")

    def __init__(self, data: bytes):
        parts = data.split(b"\n")
        self.eol = parts[-1] == b""
        self.lines = parts[:-1] if self.eol else parts
        if data == b"":
            self.lines, self.eol = [], True

    def dump(self) -> bytes:
        if not self.lines:
            return b""
        return b"\n".join(self.lines) + (b"\n" if self.eol else b"")


def _short(b: bytes) -> str:
    s = b.decode(errors="replace")
    return s if len(s) <= 100 else s[:97] + "..."


def _find(lines: list[bytes], needle: list[bytes]) -> list[int]:
    if not needle:
        return []
    return [i for i in range(len(lines) - len(needle) + 1) if lines[i:i + len(needle)] == needle]


def _apply_hunk(patch: str, path: str, text: _Text, hk: Hunk, delta: int) -> int:
    old, new = hk.old_lines(), hk.new_lines()
    pos = (hk.old_start - 1 if hk.old_len else hk.old_start) + delta
    if text.lines[pos:pos + len(old)] != old or pos < 0:
        where = _find(text.lines, old)
        if where:
            offs = ", ".join(f"line {w + 1} (offset {w - pos:+d})" for w in where[:3])
            reason = (f"context of {hk.header} matches only at {offs}: the patch is stale; refresh it "
                      "(zero fuzz, zero offset)")
        else:
            first_bad = next((k for k, ln in enumerate(old) if pos + k >= len(text.lines)
                              or text.lines[pos + k] != ln), 0)
            got = text.lines[pos + first_bad] if pos + first_bad < len(text.lines) else b"<end of file>"
            reason = (f"{hk.header} does not match: at line {pos + first_bad + 1} expected "
                      f"{_short(old[first_bad])!r}, found {_short(got)!r}; the context is nowhere in the file")
        raise ApplyError(patch, path, hk.number, reason)
    at_end = pos + len(old) == len(text.lines)
    if hk.old_no_eol and not (at_end and not text.eol):
        raise ApplyError(patch, path, hk.number, "expects the file to end without a newline")
    text.lines[pos:pos + len(old)] = new
    if at_end and (hk.old_no_eol or hk.new_no_eol):
        text.eol = not hk.new_no_eol
    return delta + len(new) - len(old)


def apply_file_diff(patch: str, fd: FileDiff, files: dict[str, bytes]) -> None:
    for gp in (fd.old_path, fd.new_path):
        why = unsafe_path(gp) if gp else None
        if why:
            raise ApplyError(patch, gp, None, f"the path {why}")  # type: ignore[arg-type]
    if fd.old_path is None:  # new file
        if fd.new_path in files:
            raise ApplyError(patch, fd.path, None, "creates a file that already exists")
        text = _Text(b"")
    else:
        if fd.old_path not in files:
            raise ApplyError(patch, fd.old_path, None, "file not found in the upstream artifact")
        text = _Text(files[fd.old_path])
    delta = 0
    for hk in fd.hunks:
        delta = _apply_hunk(patch, fd.path, text, hk, delta)
    if fd.new_path is None:
        if text.lines:
            raise ApplyError(patch, fd.path, None, "deletes a file whose content differs from the patch")
        del files[fd.old_path]  # type: ignore[arg-type]
        return
    if fd.old_path is not None and fd.old_path != fd.new_path:
        del files[fd.old_path]
    files[fd.new_path] = text.dump()


def apply_patch(patch: Patch, files: dict[str, bytes]) -> set[str]:
    """Apply one patch in place; returns the git paths it touched."""
    touched = set()
    for fd in patch.files:
        apply_file_diff(patch.name, fd, files)
        touched.add(fd.path)
    return touched


def apply_series(patches: Iterable[Patch], files: dict[str, bytes]) -> set[str]:
    touched: set[str] = set()
    for p in patches:
        touched |= apply_patch(p, files)
    return touched


def paths_needed(patches: Iterable[Patch]) -> set[str]:
    """Upstream git paths a series reads (old side) or writes."""
    out: set[str] = set()
    for p in patches:
        for fd in p.files:
            out.update(x for x in (fd.old_path, fd.new_path) if x)
    return out
