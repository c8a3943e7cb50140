"""Unpack a pinned upstream wheel, apply a series, relabel it with a PEP 440 local version, rewrite METADATA
requirements for the base, regenerate RECORD and write a byte-reproducible wheel (atomically)."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
import re
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

from ..errors import UserError
from ..patchset.apply import apply_series, paths_needed
from ..patchset.layouts import Layout
from ..patchset.series import Patch
from ..paths import os_reason

ZIP_DATE = (1980, 1, 1, 0, 0, 0)
MARKER_FILE = "sglang_blackwell.json"


@dataclass
class Entry:
    name: str
    data: bytes
    external_attr: int


def read_wheel(path: Path) -> list[Entry]:
    try:
        with zipfile.ZipFile(path) as z:
            bad = z.testzip()
            if bad is not None:
                raise UserError(f"{path.name}: member {bad} is corrupt")
            return [Entry(i.filename, z.read(i), i.external_attr) for i in z.infolist() if not i.is_dir()]
    except zipfile.BadZipFile as e:
        raise UserError(f"{path.name}: not a readable wheel: {e}") from None


def dist_info_dir(entries: list[Entry]) -> str:
    dirs = {e.name.split("/", 1)[0] for e in entries if e.name.split("/", 1)[0].endswith(".dist-info")}
    if len(dirs) != 1:
        raise UserError(f"wheel has {len(dirs)} .dist-info directories, expected 1: {sorted(dirs)}")
    return dirs.pop()


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_record(entries: list[Entry], record_name: str) -> bytes:
    """RECORD is CSV: names with commas (sglang ships 'E=1,N=14336,device_name=....json' configs) are quoted,
    or pip reads extra columns (and cannot uninstall those files)."""
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    for e in entries:
        if e.name != record_name:
            w.writerow([e.name, _record_hash(e.data), len(e.data)])
    w.writerow([record_name, "", ""])
    return out.getvalue().encode()


def rewrite_metadata(text: str, new_version: str, rewrites: dict[str, str], where: str) -> str:
    """Set Version: and replace the named (non-extra) Requires-Dist lines."""
    out, done, saw_version = [], set(), False
    header, sep, body = text.partition("\n\n")
    for line in header.split("\n"):
        if line.startswith("Version: "):
            line, saw_version = f"Version: {new_version}", True
        elif line.startswith("Requires-Dist: "):
            req = Requirement(line[len("Requires-Dist: "):])
            key = canonicalize_name(req.name)
            is_extra = req.marker is not None and "extra" in str(req.marker)
            match = next((k for k in rewrites if canonicalize_name(k) == key), None)
            if match and not is_extra:
                new = Requirement(rewrites[match])
                if req.marker and not new.marker:
                    new.marker = req.marker
                line = f"Requires-Dist: {new}"
                done.add(match)
        out.append(line)
    if not saw_version:
        raise UserError(f"{where}: METADATA has no Version: line")
    missing = sorted(set(rewrites) - done)
    if missing:
        raise UserError(f"{where}: requires_rewrite names {missing}, which METADATA does not require "
                        "(upstream changed its pins: update base.toml)")
    return "\n".join(out) + sep + body


def patched_wheel_filename(filename: str, local_version: str) -> str:
    name, _, build, tags = parse_wheel_filename(filename)
    stem = filename[:-4].split("-")
    # {dist}-{version}(-{build})?-{python}-{abi}-{platform}.whl: replace the version field only
    stem[1] = local_version
    if build:
        raise UserError(f"{filename}: wheels with a build tag are not supported")
    return "-".join(stem) + ".whl"


class WheelWriteError(UserError):
    """A wheel could not be written (a full disk: ENOSPC, EDQUOT, EFBIG); nothing of it is left."""

    def __init__(self, path: Path, reason: str):
        self.path, self.reason = path, reason
        super().__init__(f"{path}: cannot write the wheel ({reason}); nothing was written")


def write_wheel(dest: Path, entries: list[Entry]) -> str:
    """Write entries as a reproducible zip, atomically; returns the sha256 of the file. A write that fails (a full
    disk) is a WheelWriteError naming the wheel, and nothing of it is left: not the temporary file, not a file
    under its name."""
    tmp = None
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix="." + dest.name + ".", suffix=".partial", dir=dest.parent)
        with os.fdopen(fd, "wb") as f, zipfile.ZipFile(f, "w", compression=zipfile.ZIP_DEFLATED,
                                                       compresslevel=6) as z:
            for e in entries:
                zi = zipfile.ZipInfo(e.name, ZIP_DATE)
                zi.compress_type = zipfile.ZIP_DEFLATED
                zi.external_attr = e.external_attr or (0o644 << 16)
                zi.create_system = 3
                z.writestr(zi, e.data, compresslevel=6)
        digest = hashlib.sha256(Path(tmp).read_bytes()).hexdigest()
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, dest)
        return digest
    except OSError as e:
        raise WheelWriteError(dest, os_reason(e)) from None
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


def build_patched_wheel(src: Path, out_dir: Path, *, layout: Layout, patches: list[Patch], local_version: str,
                        requires_rewrite: dict[str, str], marker: dict) -> tuple[Path, str]:
    """Returns (path, sha256) of the patched wheel written to out_dir."""
    entries = read_wheel(src)
    by_name = {e.name: e for e in entries}
    old_dist = dist_info_dir(entries)

    # patch: git paths -> wheel paths
    files: dict[str, bytes] = {}
    for gp in paths_needed(patches):
        wp = layout.git_to_wheel(gp)
        if wp is None:
            owner = next(p.name for p in patches for fd in p.files if gp in (fd.old_path, fd.new_path))
            raise UserError(f"patch {owner}: {gp} is outside what the {layout.name} wheel ships "
                            f"(known prefixes: {', '.join(g for g, _ in layout.rules)})")
        if wp in by_name:
            files[gp] = by_name[wp].data
    apply_series(patches, files)
    needed = paths_needed(patches)
    result: list[Entry] = []
    seen = set()
    for e in entries:
        gp = layout.wheel_to_git(e.name)
        if gp is not None and gp in needed:
            seen.add(gp)
            if gp not in files:  # deleted by a patch
                continue
            e = Entry(e.name, files[gp], e.external_attr)
        result.append(e)
    first_meta = next(i for i, e in enumerate(result) if e.name.startswith(old_dist + "/"))
    created = [Entry(layout.git_to_wheel(gp) or gp, files[gp], 0o644 << 16) for gp in sorted(set(files) - seen)]
    result[first_meta:first_meta] = created  # files the series creates, before the .dist-info

    renamed, new_dist = relabel(result, local_version)
    meta = next(e for e in renamed if e.name == f"{new_dist}/METADATA")
    meta.data = rewrite_metadata(meta.data.decode(), local_version, requires_rewrite, src.name).encode()
    dest = out_dir / patched_wheel_filename(src.name, local_version)
    return dest, finish_wheel(dest, renamed, new_dist, marker)


def relabel(entries: list[Entry], new_version: str) -> tuple[list[Entry], str]:
    """The entries with their .dist-info and .data directories renamed for `new_version`, and the new
    .dist-info name (METADATA's Version is the caller's: rewrite_metadata)."""
    old_dist = dist_info_dir(entries)
    dist_name = old_dist[: -len(".dist-info")].rsplit("-", 1)[0]
    new_dist = f"{dist_name}-{new_version}.dist-info"
    old_data, new_data = old_dist[: -len(".dist-info")] + ".data", new_dist[: -len(".dist-info")] + ".data"
    renamed = []
    for e in entries:
        n = e.name
        if n.startswith(old_dist + "/"):
            n = new_dist + n[len(old_dist):]
        elif n.startswith(old_data + "/"):
            n = new_data + n[len(old_data):]
        renamed.append(Entry(n, e.data, e.external_attr))
    return renamed, new_dist


def finish_wheel(dest: Path, entries: list[Entry], dist: str, marker: dict) -> str:
    """Write `entries` as the wheel `dest` with our marker (<dist>/sglang_blackwell.json) and a fresh RECORD
    (any old RECORD dropped); returns the wheel's sha256."""
    record_name = f"{dist}/RECORD"
    body = [e for e in entries if e.name != record_name]
    body.append(Entry(f"{dist}/{MARKER_FILE}", (json.dumps(marker, indent=1, sort_keys=True) + "\n").encode(),
                      0o644 << 16))
    body.append(Entry(record_name, b"", 0o644 << 16))
    body[-1].data = make_record(body, record_name)
    return write_wheel(dest, body)


def add_files(wheel: Path, files: dict[str, bytes], marker_update: dict, *, mode: int = 0o644) -> str:
    """Put `files` (wheel path -> bytes) into a built wheel of ours, replacing same-named entries, merge
    `marker_update` into its sglang_blackwell.json, regenerate RECORD; rewrite the wheel atomically in place.
    Returns the new sha256. Used for FlashInfer's AOT slots (aot.py)."""
    entries = read_wheel(wheel)
    dist = dist_info_dir(entries)
    marker_name, record_name = f"{dist}/{MARKER_FILE}", f"{dist}/RECORD"
    marker = next((e for e in entries if e.name == marker_name), None)
    if marker is None:
        raise UserError(f"{wheel.name}: has no {MARKER_FILE}: not a wheel built by sglang-blackwell")
    bad = [n for n in files if n.startswith(dist + "/") or n.startswith("/") or ".." in n.split("/")]
    if bad:
        raise UserError(f"{wheel.name}: refusing to add {bad} (metadata or paths outside the package)")
    kept = [e for e in entries if e.name not in files and e.name != record_name]
    first_meta = next(i for i, e in enumerate(kept) if e.name.startswith(dist + "/"))
    kept[first_meta:first_meta] = [Entry(n, files[n], mode << 16) for n in sorted(files)]
    data = json.loads(marker.data)
    data.update(marker_update)
    for e in kept:
        if e.name == marker_name:
            e.data = (json.dumps(data, indent=1, sort_keys=True) + "\n").encode()
    kept.append(Entry(record_name, b"", 0o644 << 16))
    kept[-1].data = make_record(kept, record_name)
    return write_wheel(wheel, kept)


def check_record(path: Path) -> list[str]:
    """Problems with a wheel's RECORD (empty: it lists every file with a correct hash and size)."""
    entries = read_wheel(path)
    dist = dist_info_dir(entries)
    rec = next((e for e in entries if e.name == f"{dist}/RECORD"), None)
    if rec is None:
        return ["no RECORD"]
    listed, probs = {}, []
    for row in csv.reader(io.StringIO(rec.data.decode())):
        if len(row) != 3:
            probs.append(f"RECORD row {row!r} does not have 3 columns (unquoted comma in a file name?)")
            continue
        name, h, size = row
        listed[name] = (h, size)
    for e in entries:
        if e.name == rec.name:
            continue
        if e.name not in listed:
            probs.append(f"{e.name} not in RECORD")
        elif listed[e.name] != (_record_hash(e.data), str(len(e.data))):
            probs.append(f"{e.name}: RECORD hash/size wrong")
    probs += [f"RECORD lists missing file {n}" for n in listed if n != rec.name and n not in {e.name for e in entries}]
    return probs


def wheel_version_ok(path: Path) -> bool:
    name, ver, _, _ = parse_wheel_filename(path.name)
    entries = read_wheel(path)
    dist = dist_info_dir(entries)
    meta = next(e for e in entries if e.name == f"{dist}/METADATA").data.decode()
    m = re.search(r"^Version: (.+)$", meta, re.M)
    return bool(m) and m[1] == str(ver)
