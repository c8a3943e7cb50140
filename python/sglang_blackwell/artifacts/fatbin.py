"""Which SASS and PTX architectures a CUDA binary holds, read from the file itself (no cuobjdump needed).

Understands: ELF host objects and shared libraries (.o, .so) with `.nv_fatbin` / `__nv_relfatbin`
sections, bare fatbin files (`nvcc -fatbin`), and cubins (`nvcc -cubin`, ELF machine EM_CUDA). Only headers
are read, with seeks, so a 400 MB kernel library costs a few KB of I/O.

Fatbin layout (as produced by nvcc 12/13): containers of
    u32 magic 0xBA55ED50, u16 version, u16 header_size, u64 payload_size
followed by entries of
    u16 kind (1 = PTX, 2 = ELF/SASS), u16 version, u32 header_size, u64 payload_size, u32 compressed_size,
    u32 -, u16 -, u16 -, u32 arch (e.g. 120), u32 name_offset, u32 name_length, u64 flags, ...
Flag bits used here: 0x100000 = arch-specific ("sm_120a"), 0x200000 = family-specific ("sm_120f"),
0x8000 = compressed payload.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from ..errors import UserError

FATBIN_MAGIC = 0xBA55ED50
ELF_MAGIC = b"\x7fELF"
EM_CUDA = 190
FATBIN_SECTIONS = (".nv_fatbin", "__nv_relfatbin")
KIND_PTX, KIND_ELF = 1, 2
FLAG_ARCH_SPECIFIC = 0x100000
FLAG_FAMILY_SPECIFIC = 0x200000
FLAG_COMPRESSED = 0x8000

_CONTAINER = struct.Struct("<IHHQ")
_ENTRY = struct.Struct("<HHIQIIHHIIIQ")  # the fields up to and including flags (48 bytes)


@dataclass(frozen=True, order=True)
class Arch:
    """One architecture: number 120 plus suffix '' / 'a' / 'f'."""

    number: int
    suffix: str = ""

    @property
    def major(self) -> int:
        return self.number // 10

    @property
    def minor(self) -> int:
        return self.number % 10

    def sass_name(self) -> str:
        return f"sm_{self.number}{self.suffix}"

    def ptx_name(self) -> str:
        return f"compute_{self.number}{self.suffix}"

    def runs_on(self, major: int, minor: int) -> bool:
        """Can SASS of this arch run on a GPU of capability major.minor?
        Plain SASS runs on the same major with an equal or higher minor; 'a' only on the exact arch;
        'f' on the same major (family) with an equal or higher minor."""
        if self.suffix == "a":
            return (self.major, self.minor) == (major, minor)
        return self.major == major and minor >= self.minor


@dataclass
class FatbinEntry:
    kind: str  # "sass" or "ptx"
    arch: Arch
    size: int
    compressed: bool

    @property
    def name(self) -> str:
        return self.arch.sass_name() if self.kind == "sass" else self.arch.ptx_name()


@dataclass
class CudaBinary:
    path: Path
    entries: list[FatbinEntry] = field(default_factory=list)
    cubin_arch: Arch | None = None  # set when the file itself is a cubin

    @property
    def sass(self) -> list[Arch]:
        archs = {e.arch for e in self.entries if e.kind == "sass"}
        if self.cubin_arch:
            archs.add(self.cubin_arch)
        return sorted(archs)

    @property
    def ptx(self) -> list[Arch]:
        return sorted({e.arch for e in self.entries if e.kind == "ptx"})

    def sass_names(self) -> list[str]:
        return [a.sass_name() for a in self.sass]

    def ptx_names(self) -> list[str]:
        return [a.ptx_name() for a in self.ptx]

    def has_sass_for(self, major: int, minor: int) -> bool:
        return any(a.runs_on(major, minor) for a in self.sass)

    def has_ptx_for(self, major: int, minor: int) -> bool:
        """PTX the driver can JIT for this GPU (plain PTX of an equal or lower arch; 'a'/'f' PTX only within
        its arch/family)."""
        for a in self.ptx:
            if a.suffix == "a" and (a.major, a.minor) == (major, minor):
                return True
            if a.suffix == "f" and a.major == major and minor >= a.minor:
                return True
            if not a.suffix and (a.major, a.minor) <= (major, minor):
                return True
        return False

    def to_dict(self) -> dict:
        return {"path": str(self.path), "sass": self.sass_names(), "ptx": self.ptx_names(),
                "entries": len(self.entries) + (1 if self.cubin_arch else 0)}


def _suffix(flags: int) -> str:
    if flags & FLAG_ARCH_SPECIFIC:
        return "a"
    if flags & FLAG_FAMILY_SPECIFIC:
        return "f"
    return ""


def _read_exact(f: BinaryIO, offset: int, size: int, where: str) -> bytes:
    f.seek(offset)
    data = f.read(size)
    if len(data) != size:
        raise UserError(f"{where}: truncated (wanted {size} bytes at offset {offset})")
    return data


def parse_fatbin(f: BinaryIO, start: int, size: int, where: str) -> list[FatbinEntry]:
    """Entries of every fatbin container in [start, start+size) of an open file."""
    out: list[FatbinEntry] = []
    pos, end = start, start + size
    while pos + _CONTAINER.size <= end:
        magic, _version, header_size, payload = _CONTAINER.unpack(_read_exact(f, pos, _CONTAINER.size, where))
        if magic != FATBIN_MAGIC:
            pos += 8  # containers are 8-byte aligned; skip padding
            continue
        if header_size < _CONTAINER.size or pos + header_size + payload > end:
            raise UserError(f"{where}: fatbin container at offset {pos} is malformed "
                            f"(header {header_size} B, payload {payload} B, section ends at {end})")
        q, cend = pos + header_size, pos + header_size + payload
        while q + _ENTRY.size <= cend:
            (kind, _ver, ehs, esize, _csize, _u1, _u2, _u3, arch, _no, _nl, flags) = _ENTRY.unpack(
                _read_exact(f, q, _ENTRY.size, where))
            if ehs < _ENTRY.size or q + ehs + esize > cend:
                raise UserError(f"{where}: fatbin entry at offset {q} is malformed "
                                f"(header {ehs} B, payload {esize} B, container ends at {cend})")
            if kind in (KIND_PTX, KIND_ELF):
                kind_name = "ptx" if kind == KIND_PTX else "sass"
                compressed = bool(flags & FLAG_COMPRESSED)
                out.append(FatbinEntry(kind_name, Arch(arch, _suffix(flags)), esize, compressed))
            q += ehs + esize
        pos = cend
    return out


def _elf_sections(f: BinaryIO, where: str) -> tuple[int, int, list[tuple[str, int, int, int]]]:
    """(e_machine, e_flags, [(name, type, offset, size)]) of a 64-bit little-endian ELF file."""
    ident = _read_exact(f, 0, 64, where)
    if ident[4] != 2 or ident[5] != 1:
        raise UserError(f"{where}: only 64-bit little-endian ELF files are supported")
    e_machine, = struct.unpack_from("<H", ident, 18)
    e_shoff, = struct.unpack_from("<Q", ident, 0x28)
    e_flags, = struct.unpack_from("<I", ident, 0x30)
    e_shentsize, e_shnum, e_shstrndx = struct.unpack_from("<HHH", ident, 0x3A)
    if e_shoff == 0 or e_shnum == 0:
        return e_machine, e_flags, []
    table = _read_exact(f, e_shoff, e_shentsize * e_shnum, where)
    raw = [struct.unpack_from("<IIQQQQ", table, i * e_shentsize) for i in range(e_shnum)]
    if e_shstrndx >= e_shnum:
        raise UserError(f"{where}: ELF section name table index {e_shstrndx} out of range")
    _, _, _, _, str_off, str_size = raw[e_shstrndx]
    names = _read_exact(f, str_off, str_size, where)
    secs = []
    for name_off, sh_type, _fl, _addr, off, size in raw:
        end = names.find(b"\0", name_off)
        secs.append((names[name_off:end].decode("ascii", "replace"), sh_type, off, size))
    return e_machine, e_flags, secs


_PTXAS_ARCH = re.compile(rb"-arch sm_(\d+)([af]?)\b")


def _cubin_arch(f: BinaryIO, e_flags: int, path: Path) -> Arch:
    number = (e_flags >> 8) & 0xFF  # nvcc >= 12 cubins (EI_ABIVERSION 8): SM number in bits 8..15
    # the 'a'/'f' suffix is not in e_flags; ptxas records its options ("-arch sm_120a -m 64") in the cubin
    size = path.stat().st_size
    suffix = ""
    if size <= 64 << 20:
        f.seek(0)
        m = _PTXAS_ARCH.search(f.read())
        if m and int(m[1]) == number:
            suffix = m[2].decode()
    return Arch(number, suffix)


def read_cuda_binary(path: Path | str) -> CudaBinary:
    """SASS/PTX archs of a .so/.o (its fatbin sections), a bare fatbin or a cubin. A host ELF without any
    fatbin section gives an empty result."""
    path = Path(path)
    where = str(path)
    try:
        f = path.open("rb")
    except OSError as e:
        raise UserError(f"{where}: cannot read: {e.strerror}") from None
    with f:
        head = f.read(16)
        if len(head) >= 4 and struct.unpack_from("<I", head)[0] == FATBIN_MAGIC:
            return CudaBinary(path, parse_fatbin(f, 0, path.stat().st_size, where))
        if head[:4] != ELF_MAGIC:
            raise UserError(f"{where}: neither an ELF file nor a fatbin")
        e_machine, e_flags, secs = _elf_sections(f, where)
        if e_machine == EM_CUDA:
            return CudaBinary(path, cubin_arch=_cubin_arch(f, e_flags, path))
        entries: list[FatbinEntry] = []
        for name, sh_type, off, size in secs:
            if name in FATBIN_SECTIONS and sh_type != 8:  # SHT_NOBITS has no file bytes
                entries += parse_fatbin(f, off, size, f"{where} [{name}]")
        return CudaBinary(path, entries)


def scan_tree(root: Path, pattern: str = "*.so") -> list[CudaBinary]:
    """Every matching file under root (sorted), parsed."""
    return [read_cuda_binary(p) for p in sorted(root.rglob(pattern)) if p.is_file()]


def cubin_kernel_sizes(path: Path | str) -> dict[str, int]:
    """Bytes of SASS per kernel (`.text.<mangled name>` sections) in a cubin: tells a real kernel from one
    compiled to (almost) nothing, e.g. by an `#if __CUDA_ARCH__ < ...` guard."""
    path = Path(path)
    with path.open("rb") as f:
        e_machine, _, secs = _elf_sections(f, str(path))
    if e_machine != EM_CUDA:
        raise UserError(f"{path}: not a cubin (ELF machine {e_machine})")
    return {name[len(".text."):]: size for name, _t, _o, size in secs if name.startswith(".text.")}
