"""Strip optional parts (kernel_parts.toml) out of a kernel wheel: members removed, RECORD rewritten, the version
relabelled with a PEP 440 local label that names the removed parts, output byte-reproducible.

Why relabel (`sglang_kernel-0.4.4+stripped.fa3.sm100-...whl`, not the upstream file name): a wheel with the
upstream name and version but other bytes is a trap: pip caches, hash-checking installs and `pip list` would take
it for PyPI's. The local label keeps it apart and still satisfies `sglang-kernel==0.4.4` (PEP 440: a specifier
without a local label ignores the candidate's) and sglang's `assert_pkg_version(..., "0.4.4")` (a local version
sorts after its public one). The stripped wheel also carries `<dist-info>/sglang_blackwell.json` naming the
upstream file, its sha256, the parts and every removed member.

Removed members are never read: the 1.7 GB FA3 library of sglang-kernel 0.4.4 costs no time or memory.
"""

from __future__ import annotations

import fnmatch
import zipfile
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import parse_wheel_filename

from ..errors import UserError
from ..patchset.fetch import sha256_file
from ..tomlio import load_file
from .wheel import Entry, finish_wheel, patched_wheel_filename, relabel, rewrite_metadata

PARTS_FILE = Path(__file__).with_name("kernel_parts.toml")


@dataclass(frozen=True)
class KernelPart:
    name: str
    description: str
    paths: tuple[str, ...]
    note: str = ""

    def matches(self, member: str) -> bool:
        return any(member.startswith(p) if p.endswith("/") else fnmatch.fnmatchcase(member, p) for p in self.paths)


@dataclass(frozen=True)
class Removed:
    path: str
    size: int
    part: str


@dataclass(frozen=True)
class StrippedWheel:
    path: Path
    sha256: str
    version: str
    parts: tuple[str, ...]
    removed: tuple[Removed, ...]
    upstream_filename: str
    upstream_sha256: str


def load_parts(path: Path = PARTS_FILE) -> dict[str, KernelPart]:
    data = load_file(path, "the kernel parts file")
    parts = {}
    for name, d in data.get("parts", {}).items():
        if not isinstance(d.get("paths"), list) or not d["paths"]:
            raise UserError(f"{path}: [parts.{name}] needs a non-empty `paths` list")
        parts[name] = KernelPart(name, d.get("description", ""), tuple(d["paths"]), d.get("note", ""))
    return parts


def parse_strip(spec: str | None, parts: dict[str, KernelPart] | None = None) -> list[KernelPart]:
    """`--strip fa3,sm100` -> the parts, in name order. Unknown names are an error naming the known ones."""
    if not spec:
        return []
    parts = parts if parts is not None else load_parts()
    names = sorted({n.strip() for n in spec.split(",") if n.strip()})
    unknown = [n for n in names if n not in parts]
    if unknown:
        raise UserError(f"--strip {spec}: unknown part(s) {', '.join(unknown)} (known: {', '.join(sorted(parts))}; "
                        f"see {PARTS_FILE.name})")
    return [parts[n] for n in names]


def stripped_version(version: str, parts: list[KernelPart]) -> str:
    """0.4.4 -> 0.4.4+stripped.fa3.sm100; 0.3.21+cu130 -> 0.3.21+cu130.stripped.fa3."""
    label = "stripped." + ".".join(sorted(p.name for p in parts))
    return f"{version}.{label}" if "+" in version else f"{version}+{label}"


def strip_kernel_wheel(src: Path, out_dir: Path, parts: list[KernelPart], *, src_sha256: str | None = None
                       ) -> StrippedWheel:
    """Write `src` without the members of `parts` into out_dir (atomically; same input -> same bytes)."""
    if not parts:
        raise UserError("strip_kernel_wheel: no parts to strip")
    _, version, _, _ = parse_wheel_filename(src.name)
    new_version = stripped_version(str(version), parts)
    removed: list[Removed] = []
    kept: list[Entry] = []
    try:
        with zipfile.ZipFile(src) as z:
            infos = [i for i in z.infolist() if not i.is_dir()]
            dists = {i.filename.split("/", 1)[0] for i in infos if i.filename.split("/", 1)[0].endswith(".dist-info")}
            if len(dists) != 1:
                raise UserError(f"{src.name}: {len(dists)} .dist-info directories, expected 1")
            old_dist = dists.pop()
            record_name = f"{old_dist}/RECORD"
            for info in infos:
                part = next((p for p in parts if p.matches(info.filename)), None)
                if part is not None:
                    removed.append(Removed(info.filename, info.file_size, part.name))
                elif info.filename != record_name:
                    kept.append(Entry(info.filename, z.read(info), info.external_attr))  # read() checks the CRC
    except zipfile.BadZipFile as e:
        raise UserError(f"{src.name}: not a readable wheel: {e}") from None
    for p in parts:
        if not any(r.part == p.name for r in removed):
            raise UserError(f"--strip {p.name}: nothing in {src.name} matches {', '.join(p.paths)} "
                            f"(a kernel wheel of another layout? see {PARTS_FILE.name})")
    body, new_dist = relabel(kept, new_version)
    meta = next((e for e in body if e.name == f"{new_dist}/METADATA"), None)
    if meta is None:
        raise UserError(f"{src.name}: no METADATA in {old_dist}")
    meta.data = rewrite_metadata(meta.data.decode(), new_version, {}, src.name).encode()
    upstream_sha = src_sha256 or sha256_file(src)
    marker = {
        "kind": "kernel-stripped",
        "upstream_filename": src.name,
        "upstream_sha256": upstream_sha,
        "stripped": [p.name for p in parts],
        "removed": [{"path": r.path, "size": r.size, "part": r.part} for r in sorted(removed, key=lambda r: r.path)],
    }
    dest = out_dir / patched_wheel_filename(src.name, new_version)
    digest = finish_wheel(dest, body, new_dist, marker)
    return StrippedWheel(dest, digest, new_version, tuple(p.name for p in parts), tuple(removed), src.name,
                         upstream_sha)
