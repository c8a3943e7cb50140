"""`sglang-blackwell build`: patched wheels for one base plus a build manifest (the lock of what went in)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .. import __version__, leftovers
from ..errors import UserError
from ..patchset.bases import Base, series_for
from ..patchset.check import gate
from ..patchset.fetch import fetch
from ..patchset.layouts import get_layout
from ..patchset.plural import counted
from ..paths import os_reason, read_json
from .aot import AotRequest, add_aot_modules
from .wheel import WheelWriteError, build_patched_wheel

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


def read_manifest(out_dir: Path, base: Base) -> dict | None:
    """The build manifest of `base` in out_dir (None: there is none), its shape checked: a file that is no
    manifest of ours is an error naming it, never a traceback halfway through an install."""
    path = manifest_path(out_dir, base)
    if not path.exists() and not path.is_symlink():
        return None
    m = read_json(path)

    def bad(what: str) -> UserError:
        return UserError(f"{path}: not a build manifest of sglang-blackwell ({what}); rebuild it with "
                         f"`sglang-blackwell build --base {base.name} --out {out_dir}`")

    if not isinstance(m, dict):
        raise bad("not a JSON object")
    if m.get("schema") != MANIFEST_SCHEMA:
        raise bad(f"schema {m.get('schema')!r}, expected {MANIFEST_SCHEMA!r}")
    for key in ("base", "local_label"):
        if not isinstance(m.get(key), str):
            raise bad(f"{key!r} is not a string")
    if not isinstance(m.get("packages"), list):
        raise bad("'packages' is not a list")
    for i, pkg in enumerate(m["packages"]):
        where = f"packages[{i}]"
        if not isinstance(pkg, dict) or not all(isinstance(pkg.get(k), str) for k in
                                                ("package", "local_version", "series_sha256")):
            raise bad(f"{where} lacks package / local_version / series_sha256")
        if not isinstance(pkg.get("wheels"), list):
            raise bad(f"{where}.wheels is not a list")
        for j, w in enumerate(pkg["wheels"]):
            up, out = (w.get("upstream"), w.get("output")) if isinstance(w, dict) else (None, None)
            if not (isinstance(up, dict) and isinstance(out, dict) and isinstance(up.get("filename"), str)
                    and isinstance(up.get("sha256"), str) and isinstance(out.get("filename"), str)
                    and isinstance(out.get("sha256"), str) and isinstance(out.get("size"), int)):
                raise bad(f"{where}.wheels[{j}] lacks upstream filename/sha256 or output filename/sha256/size")
            if "/" in out["filename"] or not out["filename"].endswith(".whl"):
                raise bad(f"{where}.wheels[{j}].output.filename {out['filename']!r} is not a wheel file name")
    return m


def build(base: Base, out_dir: Path, *, python: str | None = None, cache: Path | None = None,
          progress: Callable[[str], None] | None = None, aot: AotRequest | None = None,
          out_flag: str = "--out", python_flag: str = "--python") -> tuple[list[BuiltWheel], Path]:
    """Build every patched wheel of `base` (optionally only those for CPython `python`) into out_dir.

    aot: also compile FlashInfer modules into the flashinfer wheel's AOT slots (aot.py; minutes, cached).
    All-or-nothing: wheels are written to a private temp dir first and moved into out_dir together with the
    manifest only when every one of them built.
    """
    say = progress or (lambda s: None)
    if aot is not None and not any(p.package == "flashinfer" for p in base.patched):
        raise UserError(f"--aot: base {base.name} does not patch flashinfer: there is no wheel to put modules in")
    gate(base)  # a series `check` refuses (DEP-3 headers, patch paths, the label lock) is never built
    wanted = planned_files(base, python, python_flag)
    created = _make_out_dir(out_dir, out_flag)
    _remove_stale_partials(out_dir)
    try:
        tmp = leftovers.make_dir(TMP_PREFIX, out_dir)  # sweeps the work folders of killed builds first
    except OSError as e:
        if created:
            _remove_created(out_dir, created)
        raise UserError(f"{out_flag} {out_dir}: cannot write there ({os_reason(e)}); nothing was built") from None
    built: list[BuiltWheel] = []
    pkgs = []
    done = False
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
            arts = wanted[pkg.package]
            wheels = []
            for art in arts:
                src = fetch(art, cache, progress=say)
                dest, digest = build_patched_wheel(
                    src, tmp, layout=layout, patches=series.patches, local_version=local_version,
                    requires_rewrite=pkg.requires_rewrite, marker=dict(marker, upstream_filename=art.filename,
                                                                       upstream_sha256=art.sha256))
                say(f"built {dest.name} ({counted(len(series.patches), 'patch')})")
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
        try:
            (tmp / manifest_path(out_dir, base).name).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
        except OSError as e:
            raise UserError(f"{manifest_path(out_dir, base)}: cannot write the build manifest ({os_reason(e)}); "
                            "nothing was built") from None
        for f in sorted(tmp.iterdir()):
            os.replace(f, out_dir / f.name)
        done = True
        return built, manifest_path(out_dir, base)
    except WheelWriteError as e:  # it names the private temp dir: the user knows the wheel by its place in out_dir
        raise UserError(f"{out_dir / e.path.name}: cannot write the wheel ({e.reason}); nothing was built") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if created and not done:
            _remove_created(out_dir, created)  # it did not exist before: a failed build leaves no trace


def planned_files(base: Base, python: str | None, python_flag: str = "--python") -> dict[str, list]:
    """package -> the upstream files a build for `python` (None: every pinned Python) patches; an error naming
    the flag when a package has none for it (a build never ends with fewer wheels than packages)."""
    out = {}
    for pkg in base.patched:
        arts = pkg.files_for(python)
        if not arts:
            pins = sorted({t for a in pkg.files_for(None) for t in a.python_tags})
            raise UserError(f"{python_flag} {python}: base {base.name} pins no {pkg.distribution} wheel for "
                            f"Python {python} (pinned: {', '.join(pins) or 'no x86_64 wheel'}); nothing was built")
        out[pkg.package] = arts
    return out


def _make_out_dir(out_dir: Path, flag: str) -> Path | None:
    """Create the output directory (and missing parents); the topmost directory created here, for the cleanup of
    a failed build (None: it existed). A path through a file is an error naming it."""
    if out_dir.is_dir():
        return None
    blocker = next((p for p in [out_dir, *out_dir.parents] if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        raise UserError(f"{flag} {out_dir}: {blocker} is a file, not a directory; nothing was built")
    top = out_dir
    while not top.parent.exists():
        top = top.parent
    try:
        out_dir.mkdir(parents=True)
    except OSError as e:
        raise UserError(f"{flag} {out_dir}: cannot create it ({os_reason(e)}); nothing was built") from None
    return top


def _remove_created(out_dir: Path, top: Path) -> None:
    d = out_dir
    while True:
        try:
            d.rmdir()
        except OSError:
            return
        if d == top:
            return
        d = d.parent


TMP_PREFIX = ".sglang-blackwell-tmp-"  # a build's work folder in --out: <prefix><pid>-<random> (leftovers.py)


def _remove_stale_partials(out_dir: Path) -> None:
    for f in out_dir.glob(".*.whl.*.partial"):
        f.unlink(missing_ok=True)
