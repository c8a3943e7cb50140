"""`sglang-blackwell check`: every series applies to its pinned upstream with zero fuzz, headers are valid,
and series files and patch files agree. `gate`: the part of it that needs no upstream file, which build, bundle
and install pass before they make anything (a series `check` refuses is never built)."""

from __future__ import annotations

import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ApplyError, UserError
from .apply import apply_patch, paths_needed
from .bases import Base, PatchedPackage, series_for
from .fetch import fetch
from .labellock import lock_problems
from .layouts import get_layout
from .series import Series, unsafe_path, validate_series


@dataclass
class CheckResult:
    base: str
    lines: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def upstream_files(wheel: Path, layout_name: str, git_paths: set[str]) -> dict[str, bytes]:
    layout = get_layout(layout_name)
    out = {}
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        for gp in git_paths:
            wp = layout.git_to_wheel(gp)
            if wp is not None and wp in names:
                out[gp] = z.read(wp)
    return out


def series_problems(base: Base, pkg: PatchedPackage, series: Series) -> list[str]:
    """What is wrong with one package's series without looking at upstream: headers (DEP-3), Logical-Ids, patch
    paths, patches base.toml says upstream absorbed."""
    probs = validate_series(series)
    layout = get_layout(pkg.package)
    for p in series.patches:
        if p.logical_id in base.absorbed:
            probs.append(f"base {base.name}: patch {p.name} ({p.logical_id}) is carried but base.toml "
                         f"says upstream absorbed it ({base.absorbed[p.logical_id]})")
        for fd in p.files:
            for gp in dict.fromkeys(x for x in (fd.old_path, fd.new_path) if x):
                if not unsafe_path(gp) and layout.git_to_wheel(gp) is None:
                    probs.append(f"patch {p.name}: {gp} is outside what the {pkg.distribution} wheel ships")
    return probs


def gate(base: Base) -> None:
    """Refuse (UserError naming the patch and header, or the label) what `check` would refuse without applying
    anything: series files, DEP-3 headers, patch paths, the label lock. Called by build (and so bundle and
    install) before anything is fetched or written."""
    probs = []
    for pkg in base.patched:
        probs += series_problems(base, pkg, series_for(base, pkg.package))
    probs += lock_problems(base)
    if probs:
        more = f" (and {len(probs) - 1} more problem(s): sglang-blackwell check --base {base.name})" \
            if len(probs) > 1 else ""
        raise UserError(f"base {base.name}: refusing to build: {probs[0]}{more}")


def check_base(base: Base, cache: Path | None = None, progress: Callable[[str], None] | None = None) -> CheckResult:
    res = CheckResult(base.name)
    for pkg in base.patched:
        try:
            series = series_for(base, pkg.package)
        except UserError as e:
            res.problems.append(str(e))
            continue
        res.problems += series_problems(base, pkg, series)
        if not series.patches:
            res.lines.append(f"{base.name} {pkg.package}: no patches")
            continue
        arts = pkg.files_for(None)
        if not arts:
            res.problems.append(f"base {base.name}: no x86_64 {pkg.distribution} wheel pinned")
            continue
        if any(unsafe_path(gp) for p in series.patches for fd in p.files for gp in (fd.old_path, fd.new_path) if gp):
            res.lines.append(f"{base.name} {pkg.package}: not applied (a patch path names no file of the tree)")
            continue
        wheel = fetch(arts[0], cache, progress=progress)
        files = upstream_files(wheel, pkg.package, paths_needed(series.patches))
        for p in series.patches:
            try:
                apply_patch(p, files)
            except ApplyError as e:
                res.problems.append(f"base {base.name}: {e}")
                res.lines.append(f"{base.name} {pkg.package} {p.name}: FAILS ({e.reason})")
                break
            res.lines.append(f"{base.name} {pkg.package} {p.name}: applies [{p.logical_id}] "
                             f"{p.upstream_status}")
    label_probs = lock_problems(base)
    res.problems += label_probs
    res.lines.append(f"{base.name} local label +{base.local_label}: "
                     + ("recorded in LABEL.lock with these inputs" if not label_probs else "NOT LOCKED"))
    return res
