"""`topology.detect()` end to end against a simulated driver (no GPU here): a stand-in `pynvml` module and a
stand-in `libcuda.so.1` compiled here with gcc describe a 4-GPU box (two NVLink pairs, PCIe across NUMA
nodes, CUDA enumerating the GPUs in another order than NVML). What is under test is our own code: the NVML
queries, link classification, and matching CUDA devices to NVML GPUs by PCI bus id."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

FAKE_PYNVML = r'''
"""Stand-in for nvidia-ml-py: 4 GPUs; 0-1 and 2-3 joined by 4 NVLinks each; NUMA 0 = {0,1}, 1 = {2,3}."""
NVML_FEATURE_ENABLED = 1
NVML_NVLINK_MAX_LINKS = 18
NVML_NVLINK_DEVICE_TYPE_GPU, NVML_NVLINK_DEVICE_TYPE_SWITCH = 0, 2
NVML_P2P_STATUS_OK, NVML_P2P_STATUS_NOT_SUPPORTED = 0, 5
NVML_P2P_CAPS_INDEX_READ = (0,)  # as shipped by nvidia-ml-py 13: a tuple
BUS = ["00000000:18:00.0", "00000000:19:00.0", "00000000:3B:00.0", "00000000:3C:00.0"]
PEER = {0: 1, 1: 0, 2: 3, 3: 2}

class NVMLError(Exception):
    pass

class _Pci:
    def __init__(self, bus):
        self.busId = bus

class _Mem:
    total = 97887 << 20

def nvmlInit(): pass
def nvmlShutdown(): pass
def nvmlSystemGetDriverVersion(): return "580.95.05"
def nvmlSystemGetCudaDriverVersion(): return 13000
def nvmlDeviceGetCount(): return 4
def nvmlDeviceGetHandleByIndex(i): return i
def nvmlDeviceGetName(h): return "NVIDIA RTX PRO 6000 Blackwell Server Edition"
def nvmlDeviceGetCudaComputeCapability(h): return (12, 0)
def nvmlDeviceGetPciInfo(h): return _Pci(BUS[h])
def nvmlDeviceGetMemoryInfo(h): return _Mem()
def nvmlDeviceGetNumaNodeId(h): return 0 if h < 2 else 1
def nvmlDeviceGetCurrPcieLinkGeneration(h): return 5
def nvmlDeviceGetMaxPcieLinkGeneration(h): return 5
def nvmlDeviceGetCurrPcieLinkWidth(h): return 16
def nvmlDeviceGetMaxPcieLinkWidth(h): return 16

def nvmlDeviceGetNvLinkState(h, link):
    if link >= 4:
        raise NVMLError("Not Supported")
    return NVML_FEATURE_ENABLED

def nvmlDeviceGetNvLinkRemoteDeviceType(h, link): return NVML_NVLINK_DEVICE_TYPE_GPU
def nvmlDeviceGetNvLinkRemotePciInfo(h, link): return _Pci(BUS[PEER[h]])

def nvmlDeviceGetTopologyCommonAncestor(a, b):
    return 10 if PEER[a] == b else 50  # SINGLE switch for the pairs (unused: NVLink wins), SYSTEM across

def nvmlDeviceGetP2PStatus(a, b, index):
    if not isinstance(index, int):
        raise TypeError(f"p2p index must be an int, got {index!r}")  # what ctypes does with (0,)
    if index == 2:  # NVLINK
        return NVML_P2P_STATUS_OK if PEER[a] == b else NVML_P2P_STATUS_NOT_SUPPORTED
    if index == 3:  # ATOMICS
        return NVML_P2P_STATUS_OK if PEER[a] == b else NVML_P2P_STATUS_NOT_SUPPORTED
    return NVML_P2P_STATUS_OK  # READ, WRITE
'''

FAKE_LIBCUDA = r'''
/* Stand-in for libcuda.so.1: the same 4 GPUs, enumerated fastest-first (not in PCI order). */
#include <string.h>
static const char *bus[4] = {"0000:3B:00.0", "0000:18:00.0", "0000:3C:00.0", "0000:19:00.0"};
/* NVML index of each CUDA ordinal: 3B=GPU2, 18=GPU0, 3C=GPU3, 19=GPU1 */
static const int nvml[4] = {2, 0, 3, 1};
int cuInit(unsigned int flags) { return 0; }
int cuDeviceGetCount(int *n) { *n = 4; return 0; }
int cuDeviceGet(int *dev, int ordinal) { *dev = ordinal; return 0; }
int cuDeviceGetPCIBusId(char *buf, int len, int dev) { strncpy(buf, bus[dev], len); return 0; }
int cuDeviceGetAttribute(int *v, int attr, int dev) {
  if (attr == 132) { *v = 0; return 0; }  /* MULTICAST_SUPPORTED: no */
  return 1;
}
int cuDeviceGetP2PAttribute(int *v, int attr, int src, int dst) {
  int a = nvml[src], b = nvml[dst];
  int lo = a < b ? a : b, hi = a < b ? b : a;
  int nvlink_pair = (lo == 0 && hi == 1) || (lo == 2 && hi == 3);
  if (attr == 2) { *v = !(lo == 0 && hi == 3); return 0; }  /* ACCESS: all but GPU0-GPU3 */
  if (attr == 3) { *v = nvlink_pair; return 0; }            /* NATIVE_ATOMIC: NVLink pairs only */
  return 1;
}
'''


@pytest.fixture
def fake_driver(tmp_path) -> dict[str, str]:
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        pytest.skip("no C compiler to build the stand-in libcuda.so.1")
    (tmp_path / "py").mkdir()
    (tmp_path / "py" / "pynvml.py").write_text(FAKE_PYNVML)
    (tmp_path / "lib").mkdir()
    (tmp_path / "cuda.c").write_text(FAKE_LIBCUDA)
    lib = tmp_path / "lib" / "libcuda.so.1"
    subprocess.run([gcc, "-shared", "-fPIC", "-o", str(lib), str(tmp_path / "cuda.c")], check=True)
    repo = Path(__file__).resolve().parents[3]
    env = {k: v for k, v in os.environ.items() if k != "SGLANG_BLACKWELL_TOPOLOGY"}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "py"), str(repo / "python")])
    env["LD_LIBRARY_PATH"] = str(tmp_path / "lib")
    return env


def detect_in_child(env: dict[str, str], cuda: bool = True) -> dict:
    code = ("import json; from sglang_blackwell.box.topology import detect; "
            f"print(json.dumps(detect(cuda={cuda}).to_dict()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout)


def test_detect_through_nvml_and_the_cuda_driver(fake_driver):
    d = detect_in_child(fake_driver)
    assert d["source"] == "nvml" and d["driver"] == "580.95.05" and d["cuda_driver"] == "13.0"
    buses = ["0000:18:00.0", "0000:19:00.0", "0000:3b:00.0", "0000:3c:00.0"]
    assert [g["pci_bus_id"] for g in d["gpus"]] == buses
    assert [g["numa_node"] for g in d["gpus"]] == [0, 0, 1, 1]
    assert all(g["capability"] == "12.0" and g["multicast"] is False for g in d["gpus"])
    links = {(lk["a"], lk["b"]): lk for lk in d["links"]}
    assert links[(0, 1)]["kind"] == "NV4" and links[(2, 3)]["kind"] == "NV4"
    assert links[(0, 2)]["kind"] == "SYS" and links[(1, 3)]["kind"] == "SYS"
    assert d["class"] == "nvlink"
    assert all(lk["p2p_read"] is True for lk in d["links"]), "NVML READ must be queried with an int index"
    # CUDA facts land on the right NVML pair although CUDA enumerates in another order
    assert links[(0, 3)]["cuda_p2p_access"] is False and links[(0, 2)]["cuda_p2p_access"] is True
    assert links[(0, 1)]["cuda_native_atomics"] is True and links[(2, 3)]["cuda_native_atomics"] is True
    assert links[(1, 2)]["cuda_native_atomics"] is False
    assert d["notes"] == []


def test_detect_without_cuda_driver_queries(fake_driver):
    d = detect_in_child(fake_driver, cuda=False)
    assert all(g["multicast"] is None for g in d["gpus"])
    assert all(lk["cuda_p2p_access"] is None for lk in d["links"])
    assert {(lk["a"], lk["b"]): lk["p2p_atomics"] for lk in d["links"]}[(0, 1)] is True
