"""`sglang-blackwell changelog`: what changed in the patch series between two git refs (release notes), or
between two base lines (what moving from one upstream release to another does to the series).

Patches are matched by their DEP-3 Logical-Id (P1, P2, ...), so renumbering a file is not a change. Per base and
package it reports the upstream version and local label moves, and each patch as
  added      a Logical-Id the old series did not have
  changed    same id, different +/- lines (the change itself moved)
  refreshed  same id, same +/- lines, other context or line numbers (rebased onto new upstream code)
  status     same change, new Upstream-Status (e.g. Pending -> Submitted [url])
  absorbed   dropped because upstream has it: the new base.toml's `absorbed` or its series file says so (a
             comment `# absorbed: P1 <where upstream has it>`), or (inferred) the patch was a Backport/Accepted
             one and the upstream version moved
  dropped    gone for another reason
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import InvalidVersion, Version

from .. import procs
from ..errors import UserError
from ..tomlio import tomllib
from .series import Patch, parse_patch, read_series_file

WORKTREE = "WORKTREE"
ABSORBED_RE = re.compile(r"^#\s*absorbed:\s*(P\d+)\b[\s:,-]*(.*)$")


@dataclass
class PackageSeries:
    version: str
    patches: dict[str, Patch]  # Logical-Id -> patch
    absorbed: dict[str, str] = field(default_factory=dict)  # Logical-Id -> where upstream has it


@dataclass
class BaseSnapshot:
    name: str
    local_label: str
    packages: dict[str, PackageSeries]


class Source:
    """Files of the repository at a git ref, or in the working tree."""

    def __init__(self, root: Path, ref: str | None):
        """ref None: an empty repository (what a first release is compared with)."""
        self.root, self.ref = root, ref
        if ref not in (WORKTREE, None):
            r = self._git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
            if r.returncode != 0:
                raise UserError(f"changelog: {ref!r} is not a git ref of {root}")

    def _git(self, *args: str) -> subprocess.CompletedProcess:
        return procs.run(["git", "-C", str(self.root), *args], capture_output=True)

    def read(self, rel: str) -> bytes | None:
        if self.ref is None:
            return None
        if self.ref == WORKTREE:
            p = self.root / rel
            return p.read_bytes() if p.is_file() else None
        r = self._git("show", f"{self.ref}:{rel}")
        return r.stdout if r.returncode == 0 else None

    def listdir(self, rel: str) -> list[str]:
        if self.ref is None:
            return []
        if self.ref == WORKTREE:
            p = self.root / rel
            return sorted(c.name for c in p.iterdir()) if p.is_dir() else []
        r = self._git("ls-tree", "--name-only", f"{self.ref}:{rel}")
        return sorted(r.stdout.decode().split()) if r.returncode == 0 else []


def snapshot(src: Source, base: str) -> BaseSnapshot | None:
    raw = src.read(f"patches/{base}/base.toml")
    if raw is None:
        return None
    data = tomllib.loads(raw.decode())
    # [base] absorbed in base.toml (what `check` reads) counts like a `# absorbed:` comment in a series file
    declared = {str(k): str(v) for k, v in data.get("base", {}).get("absorbed", {}).items()}
    packages = {}
    with tempfile.TemporaryDirectory() as td:
        for p in data.get("patched", []):
            pkg = p["package"]
            series_text = src.read(f"patches/{base}/{pkg}/series")
            patches: dict[str, Patch] = {}
            absorbed: dict[str, str] = dict(declared)
            if series_text is not None:
                sp = Path(td) / f"{pkg}-series"
                sp.write_bytes(series_text)
                for line in series_text.decode().splitlines():
                    m = ABSORBED_RE.match(line.strip())
                    if m:
                        absorbed[m[1]] = m[2].strip()
                for name in read_series_file(sp):
                    body = src.read(f"patches/{base}/{pkg}/{name}")
                    if body is None:
                        raise UserError(f"changelog: {src.ref}: patches/{base}/{pkg}/series lists {name}, missing")
                    f = Path(td) / name
                    f.write_bytes(body)
                    patch = parse_patch(f)
                    patches[patch.logical_id or name] = patch
            for lid, since in (data["base"].get("absorbed") or {}).items():  # base.toml says since when
                if str(since).split(" ", 1)[0] in (pkg, p.get("distribution")):
                    absorbed.setdefault(lid, str(since))
            packages[pkg] = PackageSeries(p["version"], patches, absorbed)
    return BaseSnapshot(base, data["base"]["local_label"], packages)


def bases_at(src: Source) -> list[str]:
    names = [d for d in src.listdir("patches") if src.read(f"patches/{d}/base.toml") is not None]

    def key(n: str):
        try:
            return (0, Version(n), n)
        except InvalidVersion:
            return (1, Version("0"), n)

    return sorted(names, key=key)


def _change_lines(p: Patch) -> list[tuple[str, bytes]]:
    return [(fd.path, ln) for fd in p.files for h in fd.hunks for ln in h.lines if ln[:1] in (b"+", b"-")]


def compare_package(pkg: str, old: PackageSeries | None, new: PackageSeries | None) -> list[str]:
    out: list[str] = []
    if old is None and new is not None:
        return [f"{pkg} {new.version}: new, with {_ids(new)}"]
    if new is None and old is not None:
        return [f"{pkg}: no longer patched (was {old.version} with {_ids(old)})"]
    assert old is not None and new is not None
    moved = old.version != new.version
    if moved:
        out.append(f"{pkg}: upstream {old.version} -> {new.version}")
    for lid, p in new.patches.items():
        q = old.patches.get(lid)
        if q is None:
            out.append(f"{pkg}: added {lid} `{p.name}`: {p.subject} (Upstream-Status: {p.upstream_status})")
            continue
        if q.raw == p.raw:
            continue
        out += _patch_changes(pkg, lid, q, p)
    for lid, q in old.patches.items():
        if lid in new.patches:
            continue
        out.append(f"{pkg}: dropped {lid} `{q.name}`: " + _why_dropped(lid, q, new, moved))
    return out


def _why_dropped(lid: str, q: Patch, new: PackageSeries, moved: bool) -> str:
    """Absorbed upstream only on evidence: the new series says so, or the old Upstream-Status names the upstream
    version that has it and the new upstream is at least that."""
    if lid in new.absorbed:
        return f"absorbed upstream ({new.absorbed[lid]})"
    since = _fixed_in(q.upstream_status)
    if moved and since is not None:
        if Version(new.version) >= since:
            return f"absorbed upstream (its Upstream-Status says upstream has it from {since}; upstream is now " \
                   f"{new.version})"
        return f"NOT absorbed: upstream has it from {since}, this line is on {new.version} ({q.subject})"
    if moved and q.upstream_status.startswith(("Backport", "Accepted")):
        return (f"{q.subject} (a backport; whether upstream {new.version} has it is not recorded: add "
                f"`# absorbed: {lid} <where>` to the series if it does)")
    return q.subject


FIXED_IN_RE = re.compile(r"\b(?:in|by|since|from)\s+(?:[A-Za-z][\w-]*\s+)?v?(\d+\.\d+(?:\.\d+)?)\+?")


def _fixed_in(status: str) -> Version | None:
    m = FIXED_IN_RE.search(status)
    return Version(m[1]) if m else None


def _hunks(p: Patch) -> list:
    return [(f.path, [(h.old_start, h.new_start, h.lines) for h in f.hunks]) for f in p.files]


def _patch_changes(pkg: str, lid: str, q: Patch, p: Patch) -> list[str]:
    """One patch present in both series with different bytes."""
    out = []
    if _change_lines(q) != _change_lines(p):
        out.append(f"{pkg}: changed {lid} `{p.name}`: {p.subject}")
    elif _hunks(q) != _hunks(p):
        out.append(f"{pkg}: refreshed {lid} `{p.name}` (same change; context or line numbers moved)")
    if q.name != p.name:
        out.append(f"{pkg}: {lid} renamed `{q.name}` -> `{p.name}`")
    if q.upstream_status != p.upstream_status:
        out.append(f"{pkg}: {lid} Upstream-Status: {q.upstream_status} -> {p.upstream_status}")
    if not out:
        out.append(f"{pkg}: {lid} `{p.name}`: description or headers updated")
    return out


def _ids(s: PackageSeries) -> str:
    return ", ".join(s.patches) if s.patches else "no patches"


def compare_bases(old: BaseSnapshot | None, new: BaseSnapshot | None, title: str) -> list[str]:
    if old is None and new is None:
        return []
    lines = [f"### {title}", ""]
    if new is None:
        assert old is not None
        return lines + [f"- base line {old.name} removed", ""]
    if old is None:
        lines.append(f"- new base line {new.name} (+{new.local_label})")
        for pkg, s in new.packages.items():
            lines.append(f"- {pkg} {s.version}: {_ids(s)}")
        return lines + [""]
    items = []
    if old.local_label != new.local_label:
        items.append(f"local label +{old.local_label} -> +{new.local_label}")
    for pkg in dict.fromkeys([*old.packages, *new.packages]):
        items += compare_package(pkg, old.packages.get(pkg), new.packages.get(pkg))
    return lines + ([f"- {i}" for i in items] or ["- no change to the series"]) + [""]


def changelog_refs(root: Path, old_ref: str | None, new_ref: str = WORKTREE) -> str:
    """old_ref None: the first release (every base line is new)."""
    old, new = Source(root, old_ref), Source(root, new_ref)
    names = list(dict.fromkeys([*bases_at(new), *bases_at(old)]))
    out = [f"## Patch series: {old_ref or '(first release)'} -> "
           f"{'working tree' if new_ref == WORKTREE else new_ref}", ""]
    for b in names:
        out += compare_bases(snapshot(old, b), snapshot(new, b), f"base {b}")
    return "\n".join(out).rstrip() + "\n"


def changelog_bases(root: Path, old_base: str, new_base: str, ref: str = WORKTREE) -> str:
    src = Source(root, ref)
    old, new = snapshot(src, old_base), snapshot(src, new_base)
    for name, s in ((old_base, old), (new_base, new)):
        if s is None:
            raise UserError(f"changelog: no base {name} (patches/{name}/base.toml) in {ref}")
    out = [f"## Patch series: base {old_base} -> base {new_base}", ""]
    out += compare_bases(old, new, f"{old_base} -> {new_base}")
    return "\n".join(out).rstrip() + "\n"


def previous_tag(root: Path, ref: str = "HEAD") -> str | None:
    """The newest tag reachable from ref's parent (the release before a tagged commit), or None."""
    r = procs.run(["git", "-C", str(root), "describe", "--tags", "--abbrev=0", f"{ref}^"],
                  capture_output=True, text=True)
    return r.stdout.strip() or None if r.returncode == 0 else None
