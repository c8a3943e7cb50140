"""Simulate a CUDA machine on a CPU-only host, for tests that exercise upstream *dispatch logic* (which GPU
generation, how many GPUs, multicast, P2P atomics) from the patched wheels. Call before importing sglang.

Nothing here runs a kernel: tensors stay on the CPU. What is simulated is only what the code under test
queries: torch.cuda capability/availability/device count and NVML's P2P status.
"""

from __future__ import annotations

import sys
import types

STATE = {"p2p_atomics": False}


def simulate_cuda(capability: tuple[int, int] = (12, 0), device_count: int = 8, cuda_version: str = "13.0",
                  p2p_atomics: bool = False, name: str = "NVIDIA RTX PRO 6000 Blackwell (simulated)") -> None:
    """May be called again to switch the simulated machine; sglang's cached capability predicates
    (is_sm90_supported & co., lru_cached) are cleared so they see the new one."""
    import torch

    torch.cuda.is_available = lambda: True
    torch.version.cuda = cuda_version
    torch.cuda.get_device_capability = lambda device=None: capability
    torch.cuda.device_count = lambda: device_count
    torch.cuda.get_device_name = lambda device=None: name
    torch.cuda.current_device = lambda: 0
    torch.cuda.set_device = lambda device: None
    STATE.update(p2p_atomics=p2p_atomics, device_count=device_count)
    if "pynvml" not in sys.modules or not getattr(sys.modules["pynvml"], "_simulated", False):
        _install_fake_nvml()
    fake = sys.modules["pynvml"]
    for name, mod in list(sys.modules.items()):  # sglang modules imported before the simulation began
        if name.startswith("sglang.") and getattr(mod, "pynvml", None) not in (None, fake):
            mod.pynvml = fake
    common = sys.modules.get("sglang.srt.utils.common")
    if common is not None:
        for fn in vars(common).values():
            if hasattr(fn, "cache_clear") and getattr(fn, "__module__", "") in ("functools", common.__name__):
                fn.cache_clear()


def _install_fake_nvml() -> None:
    """A pynvml with the P2P status queries sglang makes; atomics as simulated (STATE), NVLink never."""
    m = types.ModuleType("pynvml")
    m._simulated = True
    m.NVML_P2P_CAPS_INDEX_READ = 0
    m.NVML_P2P_CAPS_INDEX_WRITE = 1
    m.NVML_P2P_CAPS_INDEX_NVLINK = 2
    m.NVML_P2P_CAPS_INDEX_ATOMICS = 3
    m.NVML_P2P_STATUS_OK = 0
    m.NVML_P2P_STATUS_NOT_SUPPORTED = 5
    m.calls = []

    class NVMLError(Exception):
        pass

    m.NVMLError = NVMLError
    m.nvmlInit = lambda: None
    m.nvmlShutdown = lambda: None
    m.nvmlDeviceGetCount = lambda: STATE["device_count"]
    m.nvmlDeviceGetHandleByIndex = lambda i: ("gpu", i)

    def p2p_status(a, b, index):
        m.calls.append((a[1], b[1], index))
        if index == m.NVML_P2P_CAPS_INDEX_ATOMICS:
            return m.NVML_P2P_STATUS_OK if STATE["p2p_atomics"] else m.NVML_P2P_STATUS_NOT_SUPPORTED
        if index == m.NVML_P2P_CAPS_INDEX_NVLINK:
            return m.NVML_P2P_STATUS_NOT_SUPPORTED
        return m.NVML_P2P_STATUS_OK

    m.nvmlDeviceGetP2PStatus = p2p_status
    sys.modules["pynvml"] = m
