"""A minimal topology probe for the all-reduce bench: GPU name, capability, link type, P2P access and native
P2P atomics between the GPUs of the TP group. Runs inside a worker (CUDA initialized).

Link type comes from `sglang_blackwell.topology.detect()` when that module exists (it owns the full picture),
else from NVML (P2P NVLink status between every pair). Native P2P atomics, which torch symm-mem's barriers
need without multicast, always come from the CUDA runtime: cudaDeviceGetP2PAttribute(NativeAtomicSupported),
through ctypes on the libcudart torch loaded or cuda-bindings. A probe that fails answers None (unknown),
never raises: symm-mem is then not offered. Nothing here touches multicast.
"""

from __future__ import annotations

import ctypes
import importlib
import itertools
from dataclasses import asdict, dataclass, field
from typing import Any

P2P_ATTR_NATIVE_ATOMIC = 3  # cudaDevP2PAttrNativeAtomicSupported


@dataclass
class Topology:
    gpu_name: str
    capability: str
    gpu_count: int
    devices: list[int]
    link: str = "unknown"  # nvlink | pcie | unknown
    p2p_access: bool | None = None
    p2p_atomics: bool | None = None
    source: dict[str, str] = field(default_factory=dict)  # which probe answered what
    pairs: dict[str, dict[str, Any]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class _Cudart:
    """The two CUDA runtime calls the probe needs: ctypes on the libcudart torch already loaded (same runtime
    instance), else cuda-bindings. Any failure leaves `via` empty and the answers None: never fatal."""

    def __init__(self) -> None:
        self.via = ""
        self.why = ""
        for name in ("libcudart.so.13", "libcudart.so.12", "libcudart.so"):
            try:
                self._lib = ctypes.CDLL(name)
                self.via = f"ctypes:{name}"
                return
            except OSError:
                continue
        try:
            from cuda.bindings import runtime as rt  # cuda-python >= 12.6

            self._rt, self.via = rt, "cuda-bindings"
        except Exception as e:  # missing, or broken at import
            self.why = f"no libcudart via ctypes, cuda-bindings: {type(e).__name__}: {e}"[:300]

    def _call(self, fn_ctypes, fn_bindings) -> Any:
        try:
            if self.via.startswith("ctypes"):
                return fn_ctypes()
            if self.via == "cuda-bindings":
                return fn_bindings()
        except Exception as e:
            self.why = f"{type(e).__name__}: {e}"[:300]
        return None

    def p2p_attr(self, attr: int, src: int, dst: int) -> int | None:
        def by_ctypes() -> int | None:
            val = ctypes.c_int(0)
            rc = self._lib.cudaDeviceGetP2PAttribute(ctypes.byref(val), ctypes.c_int(attr), src, dst)
            return val.value if rc == 0 else None

        def by_bindings() -> int | None:
            err, val = self._rt.cudaDeviceGetP2PAttribute(self._rt.cudaDeviceP2PAttr(attr), src, dst)
            return int(val) if err == self._rt.cudaError_t.cudaSuccess else None

        return self._call(by_ctypes, by_bindings)

    def pci_bus_id(self, dev: int) -> str | None:
        def by_ctypes() -> str | None:
            buf = ctypes.create_string_buffer(64)
            return buf.value.decode() if self._lib.cudaDeviceGetPCIBusId(buf, 64, dev) == 0 else None

        def by_bindings() -> str | None:
            err, bus = self._rt.cudaDeviceGetPCIBusId(64, dev)
            if err != self._rt.cudaError_t.cudaSuccess:
                return None
            text = bus.decode(errors="replace") if isinstance(bus, (bytes, bytearray)) else str(bus)
            return text.split("\0")[0]

        return self._call(by_ctypes, by_bindings)


def _nvml_link(bus_ids: list[str]) -> tuple[str, str]:
    """("nvlink" if every pair reports NVLink P2P OK else "pcie", how we know) via NVML."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handles = [pynvml.nvmlDeviceGetHandleByPciBusId(b) for b in bus_ids]
        nvlink = pynvml.NVML_P2P_CAPS_INDEX_NVLINK
        ok = all(pynvml.nvmlDeviceGetP2PStatus(a, b, nvlink) == pynvml.NVML_P2P_STATUS_OK
                 for a, b in itertools.combinations(handles, 2))
        return ("nvlink" if ok else "pcie"), "nvml nvmlDeviceGetP2PStatus(NVLINK)"
    except Exception as e:  # NVML missing or a call refused: say so, do not guess
        return "unknown", f"nvml unavailable: {type(e).__name__}: {e}"


def _shared_link() -> tuple[str | None, str]:
    try:
        topo = importlib.import_module("sglang_blackwell.topology").detect()
    except Exception as e:
        return None, f"sglang_blackwell.topology unavailable ({type(e).__name__})"
    link = topo.get("link") if isinstance(topo, dict) else getattr(topo, "link_kind", None)
    return (str(link) if link else None), "sglang_blackwell.topology.detect()"


def fallback(devices: list[int], error: str) -> Topology:
    """What torch alone says, when the probe itself failed: link and atomics unknown."""
    import torch

    props = torch.cuda.get_device_properties(devices[0])
    return Topology(gpu_name=props.name, capability=f"{props.major}.{props.minor}",
                    gpu_count=torch.cuda.device_count(), devices=list(devices), source={"error": error})


def detect(devices: list[int]) -> Topology:
    import torch

    props = torch.cuda.get_device_properties(devices[0])
    topo = Topology(gpu_name=props.name, capability=f"{props.major}.{props.minor}",
                    gpu_count=torch.cuda.device_count(), devices=list(devices))
    rt = _Cudart()
    topo.source["p2p"] = f"cudaDeviceGetP2PAttribute via {rt.via}" if rt.via else rt.why
    access, atomics = [], []
    for a, b in itertools.permutations(devices, 2):
        acc = torch.cuda.can_device_access_peer(a, b)
        atom = rt.p2p_attr(P2P_ATTR_NATIVE_ATOMIC, a, b)
        topo.pairs[f"{a}->{b}"] = {"access": acc, "native_atomics": atom}
        access.append(acc)
        atomics.append(None if atom is None else bool(atom))
    topo.p2p_access = all(access) if access else None
    topo.p2p_atomics = None if None in atomics else all(atomics) if atomics else None
    if topo.p2p_atomics is None and rt.why:
        topo.source["p2p"] += f" ({rt.why})"
    link, why = _shared_link()
    if link is None:
        buses = [rt.pci_bus_id(d) for d in devices]
        link, why2 = _nvml_link([b for b in buses if b]) if all(buses) else ("unknown", "no PCI bus ids")
        why = f"{why}; {why2}"
    topo.link, topo.source["link"] = link, why
    return topo
