"""Upstream trees at a chosen point of a series, for per-patch tests.

    tree(base, package, upto=k)  -> site dir holding the package with the first k patches applied
    built_tree(base, package)    -> site dir unpacked from the wheel `sglang-blackwell build` writes

A patch's test must pass on the built tree and fail on the tree made of the patches before it
(test/unit/patches: `assert_needs_patch`).

The trees are read-only for the tests. One factory serves the whole run (test/unit/conftest.py: `tree_factory`),
in a directory every pytest-xdist worker shares: each tree and each base's build is made once per run, by the
first worker that asks, under a lock (support/shared_tmp.py); a worker that asks meanwhile waits for it.
"""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path

from sglang_blackwell.artifacts.build import build
from sglang_blackwell.patchset.apply import apply_series
from sglang_blackwell.patchset.bases import Base, get_base, series_for
from sglang_blackwell.patchset.fetch import fetch
from sglang_blackwell.patchset.layouts import get_layout
from support.shared_tmp import made_once

ROOT = Path(__file__).resolve().parents[2]


class TreeFactory:
    def __init__(self, workdir: Path):
        self.workdir = workdir
        self._built: dict[str, Path] = {}

    def _upstream_wheel(self, base: Base, package: str) -> Path:
        pkg = base.package(package)
        arts = pkg.files_for("3.11") or pkg.files_for(None)
        return fetch(arts[0])

    def tree(self, base_name: str, package: str, upto: int) -> Path:
        """The package's files with the first `upto` patches of its series applied (0 = upstream)."""
        base = get_base(base_name)
        dest = self.workdir / base_name / package / f"upto-{upto}"
        if dest.exists():
            return dest
        if not series_for(base, package).patches:  # nothing to apply: the built wheel holds upstream's files
            return self.built_tree(base_name, package)
        with made_once(dest.with_name(f".{dest.name}.lock")):
            if not dest.exists():
                self._make_tree(base, package, upto, dest)
        return dest

    def _make_tree(self, base: Base, package: str, upto: int, dest: Path) -> None:
        series = series_for(base, package)
        layout = get_layout(base.package(package).package)
        tmp = dest.with_name(dest.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        with zipfile.ZipFile(self._upstream_wheel(base, package)) as z:
            z.extractall(tmp)
        files = {}
        for p in series.patches[:upto]:
            for fd in p.files:
                for gp in (fd.old_path, fd.new_path):
                    if gp and gp not in files:
                        f = tmp / layout.git_to_wheel(gp)
                        if f.exists():
                            files[gp] = f.read_bytes()
        before = set(files)
        apply_series(series.patches[:upto], files)
        for gp in before - set(files):
            (tmp / layout.git_to_wheel(gp)).unlink()
        for gp, data in files.items():
            target = tmp / layout.git_to_wheel(gp)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        tmp.rename(dest)

    def built_tree(self, base_name: str, package: str) -> Path:
        """The package as `sglang-blackwell build` ships it (the whole series), unpacked."""
        base = get_base(base_name)
        key = f"{base_name}/{package}"
        if key not in self._built:
            dest = self.workdir / base_name / package / "built"
            with made_once(self.workdir / base_name / ".built.lock"):
                dist = self.workdir / base_name / "dist"
                if not (dist / ".complete").exists():
                    shutil.rmtree(dist, ignore_errors=True)  # a build that died part way
                    build(base, dist, python="3.11")
                    (dist / ".complete").write_text("")
                if not dest.exists():
                    dist_name = base.package(package).distribution.replace("-", "_")
                    wheel = next(dist.glob(f"{dist_name}-*.whl"))
                    tmp = dest.with_name(dest.name + ".tmp")
                    shutil.rmtree(tmp, ignore_errors=True)
                    with zipfile.ZipFile(wheel) as z:
                        z.extractall(tmp)
                    tmp.rename(dest)
            self._built[key] = dest
        return self._built[key]

    def patch_index(self, base_name: str, package: str, logical_id: str) -> int | None:
        """Position of the patch with this Logical-Id in the series, or None if the base does not carry it."""
        series = series_for(get_base(base_name), package)
        for i, p in enumerate(series.patches):
            if p.logical_id == logical_id:
                return i
        return None
