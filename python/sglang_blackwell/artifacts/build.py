"""`sglang-blackwell build`: patched wheels for one base plus a build manifest (the lock of what went in)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .. import __version__, procs
from ..errors import UserError
from ..patchset.bases import Base, series_for
from ..patchset.fetch import fetch
from ..patchset.layouts import get_layout
from .aot import AotRequest, add_aot_modules
from .wheel import build_patched_wheel

MANIFEST_SCHEMA = "sglang-blackwell/build-manifest/1"


@dataclass
class BuiltWheel:
    package: str
    path: Path
    sha256: str
    upstream_filename: str
    upstream_sha256: str


def manifest_path(out_dir: Path, base: Base) -> Path:
    return out_dir / f"manifest-{base.name}.json"


def build(base: Base, out_dir: Path, *, python: str | None = None, cache: Path | None = None,
          progress: Callable[[str], None] | None = None,
          aot: AotRequest | None = None) -> tuple[list[BuiltWheel], Path]:
    """Build every patched wheel of `base` (optionally only those for CPython `python`) into out_dir.

    aot: also compile FlashInfer modules into the flashinfer wheel's AOT slots (aot.py; minutes, cached).
    All-or-nothing: wheels are written to a private temp dir first and moved into out_dir together with the
    manifest only when every one of them built.
    """
    say = progress or (lambda s: None)
    if aot is not None and not any(p.package == "flashinfer" for p in base.patched):
        raise UserError(f"--aot: base {base.name} does not patch flashinfer: there is no wheel to put modules in")
    out_dir.mkdir(parents=True, exist_ok=True)
    _remove_stale_tmp(out_dir)
    tmp = Path(tempfile.mkdtemp(prefix=f".sglang-blackwell-tmp-{os.getpid()}-", dir=out_dir))
    built: list[BuiltWheel] = []
    pkgs = []
    try:
        for pkg in base.patched:
            series = series_for(base, pkg.package)
            layout = get_layout(pkg.package)
            local_version = base.local_version(pkg)
            marker = {
                "base": base.name,
                "package": pkg.distribution,
                "local_version": local_version,
                "series_sha256": series.sha256,
                "patches": [{"name": p.name, "logical_id": p.logical_id, "sha256": p.sha256,
                             "upstream_status": p.upstream_status, "subject": p.subject} for p in series.patches],
            }
            arts = pkg.files_for(python)
            wheels = []
            for art in arts:
                src = fetch(art, cache, progress=say)
                dest, digest = build_patched_wheel(
                    src, tmp, layout=layout, patches=series.patches, local_version=local_version,
                    requires_rewrite=pkg.requires_rewrite, marker=dict(marker, upstream_filename=art.filename,
                                                                       upstream_sha256=art.sha256))
                say(f"built {dest.name} ({len(series.patches)} patches)")
                entry = {"upstream": {"filename": art.filename, "sha256": art.sha256}}
                if aot is not None and pkg.package == "flashinfer":
                    digest, entry["aot"] = add_aot_modules(dest, aot, cache, progress=say)
                    say(f"AOT modules {', '.join(entry['aot']['modules'])} for {' '.join(aot.archs)} "
                        f"in {dest.name}")
                built.append(BuiltWheel(pkg.package, out_dir / dest.name, digest, art.filename, art.sha256))
                entry["output"] = {"filename": dest.name, "sha256": digest, "size": dest.stat().st_size}
                wheels.append(entry)
            pkgs.append({"package": pkg.package, "distribution": pkg.distribution, "version": pkg.version,
                         "local_version": local_version, "series_sha256": series.sha256,
                         "requires_rewrite": pkg.requires_rewrite, "patches": marker["patches"],
                         "wheels": wheels})
        manifest = {
            "schema": MANIFEST_SCHEMA,
            "tool": f"sglang-blackwell {__version__}",
            "base": base.name,
            "local_label": base.local_label,
            "cuda": base.cuda,
            "python": python,
            "packages": pkgs,
            "runtime": [{"name": r.name, "version": r.version, "index_url": r.index_url,
                         "requirement": r.requirement,
                         "files": [{"filename": f.filename, "sha256": f.sha256} for f in r.files]}
                        for r in base.runtime],
        }
        (tmp / manifest_path(out_dir, base).name).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
        for f in sorted(tmp.iterdir()):
            os.replace(f, out_dir / f.name)
        return built, manifest_path(out_dir, base)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _remove_stale_tmp(out_dir: Path) -> None:
    for d in out_dir.glob(".sglang-blackwell-tmp-*"):
        try:
            pid = int(d.name.split("-")[3])
        except (IndexError, ValueError):
            continue
        if not procs.alive(pid):
            shutil.rmtree(d, ignore_errors=True)
    for f in out_dir.glob(".*.whl.*.partial"):
        f.unlink(missing_ok=True)
