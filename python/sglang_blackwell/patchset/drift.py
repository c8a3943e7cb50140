"""`sglang-blackwell check --upstream latest`: does the newest base's series still fit upstream's newest releases?

Asks PyPI's JSON API for the newest release of every package the base patches, downloads the wheel (verified
against the sha256 PyPI publishes, cached like every pinned artifact, so a second run downloads nothing), and
tries the series on it, patch by patch, in series order. Each patch gets one verdict:

  applies           every hunk matches where its header says (zero fuzz, zero offset), as `check` requires
  needs refresh     every hunk's context is still in the file, some of it moved: refresh the patch
                    (`checkout` onto the new release, `export`); the change itself still fits
  conflicts         some hunk's context is gone: upstream changed the code the patch touches (the report names
                    the file, the hunk and the first line that differs)
  already upstream  every hunk's change is already in the release (the patch reverse-applies): drop it and record
                    the version in base.toml `absorbed`
  partly upstream   some hunks are in the release, the others do not apply

A patch that does not apply leaves the files as they were; later patches are tried on what did apply (a
needs-refresh patch is applied where its context moved to). Nothing here fails on drift by itself: the caller
decides (the CLI exits 1 when any patch is not `applies`, `.ci/run` only prints the report).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ..errors import ApplyError, UserError
from ..httpclient import Limits
from .apply import apply_patch, paths_needed
from .bases import Artifact, Base, series_for
from .check import upstream_files
from .diff import FileDiff
from .fetch import fetch
from .index_json import Release, pypi_url, release
from .layouts import get_layout
from .series import Patch

VERDICTS = ("applies", "needs refresh", "conflicts", "already upstream", "partly upstream")
Progress = Callable[[str], None]


# ---- what PyPI has (index_json.py reads and validates it) ------------------------------------------------

def pick_wheel(rel: Release, python: str | None = None, platform: str = "x86_64") -> Artifact:
    """The wheel to read the release from: one for this Python if there is one, else any x86_64 / pure one."""
    python = python or f"{sys.version_info.major}.{sys.version_info.minor}"
    fits = [a for a in rel.files if any(p == "any" or p.endswith(platform) for p in a.platforms)]
    if not fits:
        raise UserError(f"{rel.distribution} {rel.version}: PyPI has no {platform} or pure-Python wheel")
    return next((a for a in fits if a.fits_python(python)), fits[0])


# ---- one patch against one release ---------------------------------------------------------------------------

@dataclass
class HunkState:
    file: str
    hunk: int
    header: str
    state: str  # "exact" | "moved" | "present" | "conflict" | "missing file"
    detail: str = ""


@dataclass
class PatchVerdict:
    name: str
    logical_id: str
    verdict: str
    hunks: list[HunkState] = field(default_factory=list)

    def problems(self) -> list[HunkState]:
        return [h for h in self.hunks if h.state != "exact"]


def _split(data: bytes) -> list[bytes]:
    parts = data.split(b"\n")
    return parts[:-1] if parts and parts[-1] == b"" else parts


def _find(lines: list[bytes], block: list[bytes]) -> list[int]:
    if not block:
        return []
    n = len(block)
    return [i for i in range(len(lines) - n + 1) if lines[i] == block[0] and lines[i:i + n] == block]


def _short(b: bytes) -> str:
    s = b.decode(errors="replace").rstrip()
    return s if len(s) <= 80 else s[:77] + "..."


def _first_difference(lines: list[bytes], pos: int, old: list[bytes]) -> str:
    for k, want in enumerate(old):
        got = lines[pos + k] if 0 <= pos + k < len(lines) else None
        if got != want:
            found = "end of file" if got is None else repr(_short(got))
            return f"line {pos + k + 1}: expected {_short(want)!r}, found {found}"
    return "matches"


def _walk_file(fd: FileDiff, data: bytes | None) -> tuple[list[HunkState], list[bytes] | None]:
    """Each hunk's state against one file, and the file with every hunk that fits applied (moved ones where
    their context is now)."""
    if fd.old_path is None:  # the patch creates the file
        if data is None:
            return [HunkState(fd.path, 1, "new file", "exact")], None
        new = fd.hunks[0].new_lines() if fd.hunks else []
        state = "present" if _split(data) == new else "conflict"
        why = "" if state == "present" else "the release already has a different file at this path"
        return [HunkState(fd.path, 1, "new file", state, why)], None
    if data is None:
        return [HunkState(fd.path, h.number, h.header, "missing file", "the release has no such file")
                for h in fd.hunks], None
    lines = _split(data)
    states, delta = [], 0
    for h in fd.hunks:
        old, new = h.old_lines(), h.new_lines()
        pos = (h.old_start - 1 if h.old_len else h.old_start) + delta
        if pos >= 0 and lines[pos:pos + len(old)] == old:
            lines[pos:pos + len(old)] = new
            delta += len(new) - len(old)
            states.append(HunkState(fd.path, h.number, h.header, "exact"))
            continue
        where = _find(lines, old)
        if where:
            w = min(where, key=lambda x: abs(x - pos))
            lines[w:w + len(old)] = new
            delta += (w - pos) + len(new) - len(old)
            states.append(HunkState(fd.path, h.number, h.header, "moved", f"context now at line {w + 1} "
                                    f"({w - pos:+d} lines)"))
            continue
        if _find(lines, new) and not (old != new and _find(lines, old)):
            states.append(HunkState(fd.path, h.number, h.header, "present", "the change is in the release"))
            continue
        states.append(HunkState(fd.path, h.number, h.header, "conflict",
                                f"context gone ({_first_difference(lines, pos, old)})"))
    return states, lines


def classify(patch: Patch, files: dict[str, bytes]) -> PatchVerdict:
    """One patch against the current files (git path -> bytes); on applies / needs refresh (and the fitting
    hunks of a partly-upstream patch) `files` is updated in place for the patches after it."""
    states: list[HunkState] = []
    new_texts: dict[str, list[bytes] | None] = {}
    for fd in patch.files:
        st, text = _walk_file(fd, files.get(fd.old_path) if fd.old_path else files.get(fd.path))
        states += st
        new_texts[fd.path] = text
    kinds = {s.state for s in states}
    if kinds <= {"exact"}:
        trial = dict(files)
        try:
            apply_patch(patch, trial)
        except ApplyError as e:  # e.g. end-of-file newline expectations
            states.append(HunkState(e.file, e.hunk or 0, "", "conflict", e.reason))
            return PatchVerdict(patch.name, patch.logical_id, "conflicts", states)
        files.clear()
        files.update(trial)
        return PatchVerdict(patch.name, patch.logical_id, "applies", states)
    if kinds == {"present"}:
        return PatchVerdict(patch.name, patch.logical_id, "already upstream", states)
    if kinds <= {"exact", "moved", "present"}:
        for fd in patch.files:
            text = new_texts.get(fd.path)
            if text is not None:
                eol = files.get(fd.old_path or fd.path, b"").endswith(b"\n")
                files[fd.path] = b"\n".join(text) + (b"\n" if text and eol else b"")
        verdict = "partly upstream" if "present" in kinds else "needs refresh"
        return PatchVerdict(patch.name, patch.logical_id, verdict, states)
    return PatchVerdict(patch.name, patch.logical_id, "partly upstream" if "present" in kinds else "conflicts",
                        states)


def classify_series(patches: list[Patch], files: dict[str, bytes]) -> list[PatchVerdict]:
    work = dict(files)
    return [classify(p, work) for p in patches]


# ---- the report -------------------------------------------------------------------------------------------------

@dataclass
class PackageDrift:
    package: str
    distribution: str
    pinned: str
    newest: str
    wheel: str | None
    verdicts: list[PatchVerdict]
    note: str = ""


def newest_base(bases: list[Base]) -> Base:
    def key(b: Base):
        try:
            return (0, Version(b.name))
        except InvalidVersion:
            return (-1, Version("0"))

    return max(bases, key=key)


def parse_upstream(spec: str) -> dict[str, str | None]:
    """"latest" -> {} (every package at its newest release); "sglang==0.5.24,flashinfer-python==0.7.4" ->
    those versions (packages not named: newest)."""
    if spec.strip() == "latest":
        return {}
    out: dict[str, str | None] = {}
    for part in spec.split(","):
        name, sep, ver = part.strip().partition("==")
        if not sep or not name or not ver:
            raise UserError(f"--upstream {spec!r}: expected 'latest' or NAME==VERSION[,NAME==VERSION]")
        out[str(canonicalize_name(name))] = ver.strip()
    return out


def drift_report(base: Base, spec: str = "latest", *, cache: Path | None = None,
                 progress: Progress | None = None, limits: Limits | None = None) -> dict[str, Any]:
    """The report (format_report prints it); every read of the index and every download within `limits`
    (--request-timeouts; default httpclient.Limits())."""
    pins = parse_upstream(spec)
    known = {str(canonicalize_name(p.distribution)) for p in base.patched}
    unknown = sorted(set(pins) - known)
    if unknown:
        raise UserError(f"--upstream: base {base.name} does not patch {unknown} (it patches {sorted(known)})")
    packages = []
    for pkg in base.patched:
        series = series_for(base, pkg.package)
        rel = release(pkg.distribution, pins.get(str(canonicalize_name(pkg.distribution))), limits=limits)
        since = {lid: base.absorbed_since(lid) for lid in sorted(base.absorbed)}
        absorbed = ", ".join(f"{lid} since {d} {v}" for lid, (d, v) in since.items() if d == pkg.distribution)
        if not series.patches:
            note = "no patches in the series: nothing to try" + (f" (upstream has {absorbed})" if absorbed else "")
            packages.append(PackageDrift(pkg.package, pkg.distribution, pkg.version, rel.version, None, [], note))
            continue
        art = pick_wheel(rel)
        wheel = fetch(art, cache, progress=progress, limits=limits)
        layout = get_layout(pkg.package)
        needed = {gp for gp in paths_needed(series.patches) if layout.git_to_wheel(gp) is not None}
        files = upstream_files(wheel, pkg.package, needed)
        packages.append(PackageDrift(pkg.package, pkg.distribution, pkg.version, rel.version, art.filename,
                                     classify_series(series.patches, files)))
    counts = {v: sum(1 for p in packages for x in p.verdicts if x.verdict == v) for v in VERDICTS}
    return {"base": base.name, "index": pypi_url(), "upstream": spec, "packages": [asdict(p) for p in packages],
            "counts": counts, "drift": any(x.verdict != "applies" for p in packages for x in p.verdicts)}


def format_report(report: dict[str, Any]) -> str:
    lines = [f"drift report: base {report['base']}'s series against upstream {report['upstream']} "
             f"({report['index']})"]
    for p in report["packages"]:
        moved = "" if p["newest"] == p["pinned"] else " (newer than the pin)"
        head = f"{p['distribution']} {p['newest']}{moved}; base {report['base']} pins {p['pinned']}"
        lines.append(head + (f": {p['note']}" if p["note"] else f" [{p['wheel']}]"))
        for v in p["verdicts"]:
            lid = f" [{v['logical_id']}]" if v["logical_id"] else ""
            lines.append(f"  {v['verdict']:<16}  {v['name']}{lid}")
            if v["verdict"] == "applies":
                continue
            for h in v["hunks"]:
                if h["state"] == "exact":
                    continue
                lines.append(f"      {h['state']:<12} {h['file']} hunk #{h['hunk']} {h['header']}"
                             + (f": {h['detail']}" if h["detail"] else ""))
    c = report["counts"]
    lines.append("summary: " + ", ".join(f"{c[v]} {v}" for v in VERDICTS if c[v] or v == "applies")
                 + ("" if report["drift"] else " (no drift)"))
    if report["drift"]:
        lines.append("next: needs refresh -> `sglang-blackwell checkout` on a base pinned to the new release, "
                     "`git rebase`, `export`; conflicts -> port the patch; already upstream -> drop it and record "
                     "base.toml `absorbed`")
    return "\n".join(lines)
