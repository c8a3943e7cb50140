"""What GPUs this machine has and how they are connected: capability, link type per pair (NVLink / PCIe
switch / host bridge / across NUMA), NUMA node, P2P access and native P2P atomics, multicast support.

Sources: NVML (nvidia-ml-py) for GPUs, links, NUMA and NVML's P2P status; the CUDA driver API (libcuda through
ctypes: cuInit, no context, no allocation) for P2P access, native P2P atomics and the multicast attribute,
which NVML does not report. No torch. One `Topology` is shared by `doctor`, `nccl install --profile auto` and
the benchmarks. On a machine without an NVIDIA GPU, `detect()` returns an empty topology that says why.

Simulation (tests, planning for another box): `Topology.from_dict()`, `Topology.simulated()`, or
SGLANG_BLACKWELL_TOPOLOGY=<file.json> (a topology dict, or a doctor receipt holding one under "topology").
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
from collections import Counter
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from ..errors import UserError

TOPOLOGY_ENV = "SGLANG_BLACKWELL_TOPOLOGY"
SCHEMA = "sglang-blackwell/topology/1"

# nvidia-smi topo -m vocabulary, from NVML's common-ancestor levels
ANCESTOR_KINDS = {0: "BOARD", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
PCIE_KINDS = ("BOARD", "PIX", "PXB", "PHB", "NODE", "SYS")
KIND_MEANING = {
    "NV": "NVLink",
    "BOARD": "same board",
    "PIX": "one PCIe switch",
    "PXB": "several PCIe switches",
    "PHB": "through a PCIe host bridge (CPU)",
    "NODE": "across host bridges within a NUMA node",
    "SYS": "across NUMA nodes (SMP interconnect)",
    "unknown": "unknown",
}
# topology classes the NCCL profiles are written for (see nccl_profiles.toml `fits`)
CLASSES = ("no-gpu", "single", "nvlink", "pcie")

# nvmlGpuP2PCapsIndex_t / nvmlGpuP2PStatus_t (nvml.h). Not taken from pynvml: nvidia-ml-py 13 defines
# NVML_P2P_CAPS_INDEX_READ as the tuple (0,), which makes every READ query fail.
NVML_P2P_READ, NVML_P2P_WRITE, NVML_P2P_NVLINK, NVML_P2P_ATOMICS = 0, 1, 2, 3
NVML_P2P_STATUS_OK = 0
CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED = 132
CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED = 2
CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED = 3


@dataclass
class GPU:
    index: int  # NVML index (PCI bus order)
    name: str
    capability: str  # "12.0"
    pci_bus_id: str = ""  # "0000:18:00.0"
    memory_mib: int | None = None
    numa_node: int | None = None
    multicast: bool | None = None  # CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED; None: not known
    pcie_gen: int | None = None
    pcie_width: int | None = None
    pcie_max_gen: int | None = None
    pcie_max_width: int | None = None
    cuda_ordinal: int | None = None  # CUDA's device number in the detecting process (CUDA_VISIBLE_DEVICES applies)

    @property
    def major(self) -> int:
        return int(self.capability.split(".")[0])

    @property
    def minor(self) -> int:
        return int(self.capability.split(".")[1])

    @property
    def arch(self) -> str:
        """SASS arch as nvcc names this GPU's arch-specific target ("sm_120a"; "sm_80" below 9)."""
        return f"sm_{self.major}{self.minor}" + ("a" if self.major >= 9 else "")


@dataclass
class Link:
    a: int
    b: int
    kind: str  # "NV18", "NV", "BOARD", "PIX", "PXB", "PHB", "NODE", "SYS", "unknown"
    nvlinks: int = 0
    p2p_read: bool | None = None  # NVML P2P status, READ
    p2p_write: bool | None = None  # NVML P2P status, WRITE
    p2p_atomics: bool | None = None  # NVML P2P status, ATOMICS
    cuda_p2p_access: bool | None = None  # cuDeviceGetP2PAttribute ACCESS_SUPPORTED
    cuda_native_atomics: bool | None = None  # cuDeviceGetP2PAttribute NATIVE_ATOMIC_SUPPORTED

    @property
    def is_nvlink(self) -> bool:
        return self.kind.startswith("NV")

    @property
    def p2p(self) -> bool | None:
        """Can the two GPUs access each other's memory? (CUDA's answer where known, else NVML read+write.)"""
        if self.cuda_p2p_access is not None:
            return self.cuda_p2p_access
        if self.p2p_read is None or self.p2p_write is None:
            return None
        return self.p2p_read and self.p2p_write

    @property
    def native_atomics(self) -> bool | None:
        """Native P2P atomics over this link (what torch symm-mem barriers need)."""
        if self.cuda_native_atomics is not None:
            return self.cuda_native_atomics
        return self.p2p_atomics


def _all(values: list[bool | None]) -> bool | None:
    """True if all True, False if any False, None if unknown (or empty)."""
    if not values:
        return None
    if any(v is False for v in values):
        return False
    if any(v is None for v in values):
        return None
    return True


@dataclass
class Topology:
    gpus: list[GPU] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)  # one per unordered pair, a < b
    driver: str | None = None
    cuda_driver: str | None = None  # highest CUDA version the driver supports, "13.0"
    source: str = "none"  # "nvml", "simulated", "file:<path>", "none"
    notes: list[str] = field(default_factory=list)

    # ---- derived facts -------------------------------------------------------------------------------------
    @property
    def gpu_count(self) -> int:
        return len(self.gpus)

    @property
    def has_nvlink(self) -> bool:
        return any(lk.is_nvlink for lk in self.links)

    @property
    def all_nvlink(self) -> bool:
        return bool(self.links) and all(lk.is_nvlink for lk in self.links)

    @property
    def pcie_only(self) -> bool:
        return self.gpu_count > 1 and not self.has_nvlink

    @property
    def link_kind(self) -> str:
        """The all-reduce dispatch table's link field: nvlink (every pair), pcie (no NVLink at all), else unknown."""
        return "nvlink" if self.all_nvlink else ("pcie" if self.pcie_only else "unknown")

    @property
    def is_simulated(self) -> bool:
        return self.source not in ("nvml", "cuda", "none")

    def topology_class(self) -> str:
        """One of CLASSES: what the NCCL profiles and `auto` key on."""
        if self.gpu_count == 0:
            return "no-gpu"
        if self.gpu_count == 1:
            return "single"
        return "nvlink" if self.has_nvlink else "pcie"

    @property
    def all_p2p(self) -> bool | None:
        return _all([lk.p2p for lk in self.links])

    @property
    def all_native_atomics(self) -> bool | None:
        return _all([lk.native_atomics for lk in self.links])

    @property
    def multicast(self) -> bool | None:
        return _all([g.multicast for g in self.gpus])

    def capabilities(self) -> list[str]:
        return sorted({g.capability for g in self.gpus})

    def majors(self) -> set[int]:
        """The compute-capability majors of the box's GPUs (12 for every SM12x part); empty without GPUs."""
        return {g.major for g in self.gpus}

    def link(self, a: int, b: int) -> Link | None:
        a, b = min(a, b), max(a, b)
        return next((lk for lk in self.links if (lk.a, lk.b) == (a, b)), None)

    def link_counts(self) -> dict[str, int]:
        return dict(sorted(Counter(lk.kind for lk in self.links).items()))

    def links_summary(self) -> str | None:
        """"NV18" / "PCIe: PIX x4, SYS x24" / None without pairs."""
        if not self.links:
            return None
        counts = self.link_counts()
        if all(k.startswith("NV") for k in counts):
            return ", ".join(f"{k} x{n}" if len(counts) > 1 else k for k, n in counts.items())
        kinds = ", ".join(f"{k} x{n}" for k, n in counts.items())
        return ("mixed: " if self.has_nvlink else "PCIe: ") + kinds

    def summary(self) -> str:
        if not self.gpus:
            return "no NVIDIA GPU" + (f" ({self.notes[0]})" if self.notes else "")
        names = Counter(g.name for g in self.gpus)
        gpus = ", ".join(f"{n}x {name}" for name, n in names.items())
        caps = "/".join(self.capabilities())
        link = self.links_summary()
        text = f"{gpus} (capability {caps})"
        if link:
            text += f", {link}"
        if self.is_simulated:
            text += f" [{self.source}]"
        return text

    def machine(self) -> dict[str, Any]:
        """The receipts envelope's `machine` block."""
        return {
            "gpu_name": self.gpus[0].name if self.gpus else None,
            "gpu_count": self.gpu_count,
            "capability": "/".join(self.capabilities()) or None,
            "links": self.links_summary(),
        }

    def matrix(self) -> list[str]:
        """Text matrix like `nvidia-smi topo -m`, plus NUMA node, P2P and atomics per pair."""
        if not self.gpus:
            return []
        n = self.gpu_count
        width = max(6, *(len(lk.kind) + 1 for lk in self.links)) if self.links else 6
        head = "      " + "".join(f"GPU{j}".ljust(width) for j in range(n)) + "NUMA"
        rows = [head]
        for i, g in enumerate(self.gpus):
            cells = []
            for j in range(n):
                lk = self.link(i, j)
                cells.append(("X" if i == j else lk.kind if lk else "?").ljust(width))
            numa = "-" if g.numa_node is None else str(g.numa_node)
            rows.append(f"GPU{i}".ljust(6) + "".join(cells) + numa)
        return rows

    def cuda_group(self, ordinals: list[int]) -> Topology | None:
        """The GPUs with these CUDA device numbers, in that order and re-indexed 0..n-1, with the links among
        them (a TP group as its ranks see it); None when the CUDA driver did not place every one of them."""
        by_ordinal = {g.cuda_ordinal: g for g in self.gpus if g.cuda_ordinal is not None}
        if not ordinals or any(o not in by_ordinal for o in ordinals):
            return None
        index = {by_ordinal[o].index: i for i, o in enumerate(ordinals)}
        gpus = [replace(by_ordinal[o], index=i) for i, o in enumerate(ordinals)]
        links = []
        for lk in self.links:
            if lk.a in index and lk.b in index:
                a, b = sorted((index[lk.a], index[lk.b]))
                links.append(replace(lk, a=a, b=b))
        links.sort(key=lambda lk: (lk.a, lk.b))
        return Topology(gpus=gpus, links=links, driver=self.driver, cuda_driver=self.cuda_driver,
                        source=self.source, notes=list(self.notes))

    # ---- (de)serialization ------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "source": self.source,
            "driver": self.driver,
            "cuda_driver": self.cuda_driver,
            "class": self.topology_class(),
            "gpus": [asdict(g) for g in self.gpus],
            "links": [asdict(lk) for lk in self.links],
            "notes": list(self.notes),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "topology") -> Topology:
        if not isinstance(d, dict):
            raise UserError(f"{where}: expected an object, got {type(d).__name__}")
        if "topology" in d and "gpus" not in d:  # a doctor receipt
            return cls.from_dict(d["topology"], f"{where}: topology")
        gpus = [_load(GPU, g, f"{where}: gpus[{i}]") for i, g in enumerate(d.get("gpus", []))]
        links = [_load(Link, lk, f"{where}: links[{i}]") for i, lk in enumerate(d.get("links", []))]
        for g in gpus:
            try:
                g.major, g.minor  # noqa: B018 - validates "M.m"
            except (ValueError, IndexError):
                raise UserError(f"{where}: gpu {g.index}: capability {g.capability!r} is not "
                                "'major.minor'") from None
        idx = {g.index for g in gpus}
        for lk in links:
            if lk.a not in idx or lk.b not in idx or lk.a == lk.b:
                raise UserError(f"{where}: link ({lk.a}, {lk.b}) does not name two of the gpus {sorted(idx)}")
        return cls(gpus=gpus, links=links, driver=d.get("driver"), cuda_driver=d.get("cuda_driver"),
                   source=d.get("source", "simulated"), notes=list(d.get("notes", [])))

    @classmethod
    def simulated(cls, n: int, capability: str = "12.0", *, kind: str = "SYS", p2p: bool | None = True,
                  atomics: bool | None = False, multicast: bool | None = False,
                  name: str = "NVIDIA RTX PRO 6000 Blackwell Server Edition") -> Topology:
        """A uniform n-GPU box (every pair the same link kind): the shapes the profiles are written for."""
        nvl = kind.startswith("NV")
        gpus = [GPU(i, name, capability, f"0000:{0x18 + i:02x}:00.0",
                    numa_node=0 if i < max(1, n // 2) else 1, multicast=multicast, cuda_ordinal=i) for i in range(n)]
        links = [Link(a, b, kind, nvlinks=int(kind[2:] or 1) if nvl else 0, p2p_read=p2p, p2p_write=p2p,
                      p2p_atomics=atomics, cuda_p2p_access=p2p, cuda_native_atomics=atomics)
                 for a in range(n) for b in range(a + 1, n)]
        return cls(gpus=gpus, links=links, driver="simulated", cuda_driver=None, source="simulated")


def _load(kind, d: Any, where: str):
    if not isinstance(d, dict):
        raise UserError(f"{where}: expected an object")
    names = {f.name for f in fields(kind)}
    unknown = sorted(set(d) - names)
    if unknown:
        raise UserError(f"{where}: unknown key(s) {unknown} (known: {sorted(names)})")
    try:
        return kind(**d)
    except TypeError as e:
        raise UserError(f"{where}: {e}") from None


# ---- detection --------------------------------------------------------------------------------------------
def canonical_bus_id(bus_id: str | bytes) -> str:
    """'00000000:18:00.0' / '0000:18:00.0' / b'...' -> '0000:18:00.0' (lowercase, 4-digit domain)."""
    if isinstance(bus_id, bytes):
        bus_id = bus_id.decode()
    bus_id = bus_id.strip().rstrip("\x00").lower()
    dom, rest = bus_id.split(":", 1) if bus_id.count(":") == 2 else ("0", bus_id)
    return f"{int(dom, 16):04x}:{rest}"


def _sysfs_numa(bus_id: str) -> int | None:
    try:
        v = int(Path(f"/sys/bus/pci/devices/{bus_id}/numa_node").read_text().strip())
    except (OSError, ValueError):
        return None
    return v if v >= 0 else None


def load_file(path: Path | str) -> Topology:
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except OSError as e:
        raise UserError(f"{TOPOLOGY_ENV}={path}: cannot read: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise UserError(f"{path}: not valid JSON: {e}") from None
    topo = Topology.from_dict(data, str(path))
    topo.source = f"file:{path}"
    return topo


def detect(*, cuda: bool = True, environ: dict[str, str] | None = None) -> Topology:
    """This machine's topology (or the file SGLANG_BLACKWELL_TOPOLOGY names). Never raises for a missing GPU,
    driver or nvidia-ml-py: the result has no GPUs and a note saying why. cuda=False skips the CUDA driver
    queries (P2P access/atomics from NVML only, multicast unknown)."""
    environ = os.environ if environ is None else environ
    if environ.get(TOPOLOGY_ENV):
        return load_file(environ[TOPOLOGY_ENV])
    try:
        import pynvml
    except ImportError:
        return Topology(notes=["nvidia-ml-py is not installed (pip install 'sglang-blackwell[gpu]')"])
    try:
        pynvml.nvmlInit()
    except Exception as e:  # NVMLError_LibraryNotFound / DriverNotLoaded / ...
        return Topology(notes=[f"NVML unavailable: {e}"])
    try:
        topo = _detect_nvml(pynvml)
    except Exception as e:  # an NVML call every GPU must answer failed: report it, do not crash callers
        return Topology(notes=[f"NVML query failed: {type(e).__name__}: {e}"])
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()
    if cuda and topo.gpus:
        try:
            _add_cuda_driver_facts(topo)
        except Exception as e:
            topo.notes.append(f"CUDA driver query failed ({type(e).__name__}: {e}): P2P from NVML only, "
                              "multicast unknown")
    return topo


def _try(fn, *args, default=None):
    try:
        return fn(*args)
    except Exception:
        return default


def _detect_nvml(nv) -> Topology:
    topo = Topology(source="nvml")
    topo.driver = _try(lambda: _s(nv.nvmlSystemGetDriverVersion()))
    cv = _try(nv.nvmlSystemGetCudaDriverVersion)
    if cv:
        topo.cuda_driver = f"{cv // 1000}.{(cv % 1000) // 10}"
    count = _try(nv.nvmlDeviceGetCount, default=0)
    if not count:
        topo.notes.append("NVML found no GPU")
        return topo
    handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    by_bus: dict[str, int] = {}
    for i, h in enumerate(handles):
        major, minor = nv.nvmlDeviceGetCudaComputeCapability(h)
        bus = canonical_bus_id(nv.nvmlDeviceGetPciInfo(h).busId)
        by_bus[bus] = i
        mem = _try(nv.nvmlDeviceGetMemoryInfo, h)
        numa = _try(nv.nvmlDeviceGetNumaNodeId, h) if hasattr(nv, "nvmlDeviceGetNumaNodeId") else None
        if numa is None or numa < 0:
            numa = _sysfs_numa(bus)
        topo.gpus.append(GPU(
            index=i, name=_s(nv.nvmlDeviceGetName(h)), capability=f"{major}.{minor}", pci_bus_id=bus,
            memory_mib=mem.total // (1 << 20) if mem else None, numa_node=numa,
            pcie_gen=_try(nv.nvmlDeviceGetCurrPcieLinkGeneration, h),
            pcie_width=_try(nv.nvmlDeviceGetCurrPcieLinkWidth, h),
            pcie_max_gen=_try(nv.nvmlDeviceGetMaxPcieLinkGeneration, h),
            pcie_max_width=_try(nv.nvmlDeviceGetMaxPcieLinkWidth, h)))
    direct, to_switch = _nvlinks(nv, handles, by_bus)

    def p2p(h1, h2, idx) -> bool | None:
        st = _try(nv.nvmlDeviceGetP2PStatus, h1, h2, idx)
        return None if st is None else st == NVML_P2P_STATUS_OK

    for a in range(count):
        for b in range(a + 1, count):
            ha, hb = handles[a], handles[b]
            nvl_status = p2p(ha, hb, NVML_P2P_NVLINK)
            via_switch = min(to_switch[a], to_switch[b]) if nvl_status is not False else 0
            nvl = direct.get((a, b), 0) + via_switch
            if nvl or nvl_status:
                kind = f"NV{nvl}" if nvl else "NV"
            else:
                level = _try(nv.nvmlDeviceGetTopologyCommonAncestor, ha, hb)
                kind = ANCESTOR_KINDS.get(level, "unknown")
            topo.links.append(Link(a, b, kind, nvlinks=nvl,
                                   p2p_read=p2p(ha, hb, NVML_P2P_READ),
                                   p2p_write=p2p(ha, hb, NVML_P2P_WRITE),
                                   p2p_atomics=p2p(ha, hb, NVML_P2P_ATOMICS)))
    return topo


def _nvlinks(nv, handles, by_bus) -> tuple[dict[tuple[int, int], int], dict[int, int]]:
    """Active NVLinks: {(a, b): links between GPUs a and b}, {gpu: links to an NVSwitch}."""
    direct: dict[tuple[int, int], int] = {}
    to_switch = {i: 0 for i in range(len(handles))}
    max_links = getattr(nv, "NVML_NVLINK_MAX_LINKS", 18)
    for i, h in enumerate(handles):
        for link in range(max_links):
            state = _try(nv.nvmlDeviceGetNvLinkState, h, link)
            if state != getattr(nv, "NVML_FEATURE_ENABLED", 1):
                continue
            remote_type = _try(nv.nvmlDeviceGetNvLinkRemoteDeviceType, h, link)
            if remote_type == getattr(nv, "NVML_NVLINK_DEVICE_TYPE_SWITCH", 2):
                to_switch[i] += 1
                continue
            info = _try(nv.nvmlDeviceGetNvLinkRemotePciInfo, h, link)
            j = by_bus.get(canonical_bus_id(info.busId)) if info is not None else None
            if j is None:  # not one of our GPUs: an NVSwitch whose type NVML did not report
                to_switch[i] += 1 if remote_type is None else 0
                continue
            if i < j:
                direct[(i, j)] = direct.get((i, j), 0) + 1
    return direct, to_switch


def _s(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _add_cuda_driver_facts(topo: Topology) -> None:
    """P2P access, native atomics and multicast from the CUDA driver API, matched to NVML by PCI bus id."""
    try:
        cu = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        topo.notes.append(f"CUDA driver library not loadable ({e}): P2P from NVML only, multicast unknown")
        return
    if cu.cuInit(0) != 0:
        topo.notes.append("cuInit failed: P2P from NVML only, multicast unknown")
        return
    n = ctypes.c_int(0)
    if cu.cuDeviceGetCount(ctypes.byref(n)) != 0:
        return
    ordinal_of: dict[int, int] = {}  # NVML index -> CUDA device handle
    by_bus = {g.pci_bus_id: g.index for g in topo.gpus}
    for ordinal in range(n.value):
        dev = ctypes.c_int(0)
        if cu.cuDeviceGet(ctypes.byref(dev), ordinal) != 0:
            continue
        buf = ctypes.create_string_buffer(64)
        if cu.cuDeviceGetPCIBusId(buf, 64, dev) != 0:
            continue
        idx = by_bus.get(canonical_bus_id(buf.value))
        if idx is not None:
            ordinal_of[idx] = dev.value
            topo.gpus[idx].cuda_ordinal = ordinal

    def attr(dev: int) -> int | None:
        v = ctypes.c_int(0)
        return v.value if cu.cuDeviceGetAttribute(ctypes.byref(v), CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED,
                                                  dev) == 0 else None

    def p2p_attr(kind: int, a: int, b: int) -> bool | None:
        v = ctypes.c_int(0)
        return bool(v.value) if cu.cuDeviceGetP2PAttribute(ctypes.byref(v), kind, a, b) == 0 else None

    for g in topo.gpus:
        if g.index in ordinal_of:
            m = attr(ordinal_of[g.index])
            g.multicast = None if m is None else bool(m)
    for lk in topo.links:
        if lk.a in ordinal_of and lk.b in ordinal_of:
            da, db = ordinal_of[lk.a], ordinal_of[lk.b]
            both = ((da, db), (db, da))
            access = [p2p_attr(CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, x, y) for x, y in both]
            atomics = [p2p_attr(CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED, x, y) for x, y in both]
            lk.cuda_p2p_access = _all(access)
            lk.cuda_native_atomics = _all(atomics)
    missing = [g.index for g in topo.gpus if g.index not in ordinal_of]
    if missing:
        topo.notes.append(f"GPUs {missing} not visible to CUDA (CUDA_VISIBLE_DEVICES?): their P2P facts are "
                          "NVML's")
