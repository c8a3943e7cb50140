"""Topology: detection on this CPU-only machine (real: it must say "no GPU"), simulated boxes (said so), and
the dict round trip that doctor receipts and SGLANG_BLACKWELL_TOPOLOGY use."""

from __future__ import annotations

import json

import pytest

from sglang_blackwell.box.topology import TOPOLOGY_ENV, Topology, canonical_bus_id, detect
from sglang_blackwell.errors import UserError


def test_detect_without_gpu_says_why():
    t = detect(environ={})
    try:
        import pynvml

        pynvml.nvmlInit()
        pytest.skip("this machine has a working NVML: the no-GPU path is not what runs here")
    except Exception:
        pass
    assert t.gpu_count == 0 and t.topology_class() == "no-gpu" and t.source == "none"
    assert t.notes and ("NVML" in t.notes[0] or "nvidia-ml-py" in t.notes[0])
    assert t.summary().startswith("no NVIDIA GPU")
    assert t.machine() == {"gpu_name": None, "gpu_count": 0, "capability": None, "links": None}


def test_simulated_pcie_box_facts():
    t = Topology.simulated(8, "12.0", kind="SYS", p2p=True, atomics=False, multicast=False)
    assert t.topology_class() == "pcie" and t.pcie_only and not t.has_nvlink
    assert len(t.links) == 28 and t.link(5, 2).kind == "SYS"
    assert t.all_p2p is True and t.all_native_atomics is False and t.multicast is False
    assert t.links_summary() == "PCIe: SYS x28"
    assert t.gpus[0].arch == "sm_120a"
    assert t.matrix()[1].startswith("GPU0  X")
    nv = Topology.simulated(2, "9.0", kind="NV18", atomics=True)
    assert nv.topology_class() == "nvlink" and nv.all_nvlink and nv.links_summary() == "NV18"
    assert Topology.simulated(1).topology_class() == "single"


def test_unknown_p2p_stays_unknown():
    t = Topology.simulated(4, p2p=None, atomics=None, multicast=None)
    assert t.all_p2p is None and t.all_native_atomics is None and t.multicast is None
    t.links[0].cuda_p2p_access = False
    assert t.all_p2p is False


def test_round_trip_and_env_file(tmp_path):
    t = Topology.simulated(8, "12.0", kind="PIX")
    d = t.to_dict()
    assert d["class"] == "pcie" and d["schema"].startswith("sglang-blackwell/topology/")
    back = Topology.from_dict(json.loads(json.dumps(d)))
    assert back.to_dict() == d
    f = tmp_path / "box.json"
    f.write_text(json.dumps({"kind": "doctor", "topology": d}))  # a doctor receipt works too
    loaded = detect(environ={TOPOLOGY_ENV: str(f)})
    assert loaded.source == f"file:{f}" and loaded.is_simulated and loaded.gpu_count == 8
    assert f"[file:{f}]" in loaded.summary()


@pytest.mark.parametrize("bad, match", [
    ({"gpus": [{"index": 0, "name": "x", "capability": "twelve"}]}, "capability 'twelve'"),
    ({"gpus": [{"index": 0, "name": "x", "capability": "12.0", "speed": 1}]}, r"gpus\[0\]: unknown key"),
    ({"gpus": [{"index": 0, "name": "x", "capability": "12.0"}], "links": [{"a": 0, "b": 3, "kind": "SYS"}]},
     r"link \(0, 3\)"),
    ([], "expected an object"),
])
def test_bad_topology_data(bad, match):
    with pytest.raises(UserError, match=match):
        Topology.from_dict(bad)


def test_bad_topology_file(tmp_path):
    f = tmp_path / "t.json"
    f.write_text("{")
    with pytest.raises(UserError, match="not valid JSON"):
        detect(environ={TOPOLOGY_ENV: str(f)})


def test_canonical_bus_id():
    assert canonical_bus_id("00000000:18:00.0") == "0000:18:00.0"
    assert canonical_bus_id(b"0000:1A:00.0\x00") == "0000:1a:00.0"
