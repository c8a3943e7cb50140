"""The whole `bench allreduce --tune --nccl-profile none,pcie-ll` pipeline on CPU, through the CLI: launcher,
spawned ranks, backend setup and agreement, per-size checks and timing, NCCL profile runs, report, receipt,
dispatch table, plot.

SIMULATED GPU, said plainly: each spawned rank runs on the CPU with torch.distributed's gloo backend standing
in for NCCL, a CUDA graph is replaced by replaying the captured step eagerly, CUDA events by a wall clock,
the spin kernel and device syncs by no-ops, and the topology by a fake 2-GPU NVLink box with P2P atomics.
The latencies are therefore meaningless; what is tested is that the orchestration produces a complete,
consistent result. The symm-mem backends are offered (simulated atomics) and then fail to set up on CPU,
which exercises the failure path: recorded, agreed on, their shared buffer not retried.
"""

from __future__ import annotations

import json
import time

import pytest

torch = pytest.importorskip("torch")

from sglang_blackwell import cli  # noqa: E402
from sglang_blackwell.bench.allreduce import harness as ar  # noqa: E402
from sglang_blackwell.box import allreduce_table as tbl  # noqa: E402
from sglang_blackwell.receipts import validate_receipt  # noqa: E402

pytestmark = pytest.mark.slow
SAFE = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


class _EagerGraph:
    """Like capture, runs the Python of every step once (here the work really happens); replay re-runs it."""

    def __init__(self, step, calls):
        self.step, self.calls = step, calls
        self.replay()

    def replay(self):
        for _ in range(self.calls):
            self.step()


class _WallEvent:
    def __init__(self, enable_timing=False):
        self.t = 0.0

    def record(self):
        self.t = time.perf_counter()

    def synchronize(self):
        pass

    def elapsed_time(self, end):
        return (end.t - self.t) * 1e3


def simulated_rank(rank, cfg):
    """Runs in each spawned process: swap the CUDA-only pieces for CPU stand-ins, then the real worker."""
    from sglang_blackwell.bench.allreduce import p2p_probe
    from sglang_blackwell.bench.allreduce import timing as ar_timing
    from sglang_blackwell.bench.allreduce import worker as ar_worker
    from sglang_blackwell.box.topology import Topology

    torch.cuda.synchronize = lambda *a, **k: None
    torch.cuda._sleep = lambda *a, **k: None
    torch.cuda.Event = _WallEvent
    torch.cuda.get_device_name = lambda *a, **k: "Simulated GPU"
    ar_timing.capture = lambda step, calls: _EagerGraph(step, calls)
    torch.cuda.device_count = lambda: cfg.tp
    p2p_probe.detect = lambda: Topology.simulated(cfg.tp, "12.0", kind="NV18", atomics=True, name="Simulated GPU")
    cfg.device_type, cfg.dist_backend = "cpu", "gloo"
    ar_worker.main(rank, cfg)


@pytest.fixture
def sim_run(tmp_path, monkeypatch, capfd):
    for k, v in SAFE.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(ar, "worker_main", lambda: simulated_rank)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    out, table = tmp_path / "r.json", tmp_path / "table.json"
    rc = cli.main(["bench", "allreduce", "--tp", "2", "--tokens", "3,1", "--hidden", "64",
                   "--backends", "nccl,nccl_norm,symm_oneshot,symm_twoshot,fi_fused_oneshot",
                   "--calls", "2", "--reps", "2", "--warmup", "1", "--nccl-profile", "none,pcie-ll",
                   "--tune", "--table", str(table), "--out", str(out), "--timeout", "240"])
    return rc, out, table, capfd.readouterr()  # fd level: the ranks print from their own processes


def test_simulated_pipeline(sim_run):
    rc, out, table, cap = sim_run
    assert rc == 0, cap.err[-3000:]
    receipt = json.loads(out.read_text())
    assert validate_receipt(receipt) == []
    res = receipt["results"]
    assert "failure" not in res
    assert res["config"]["tokens"] == [1, 3]

    b = res["backends"]
    assert b["nccl"]["available"] and b["nccl_norm"]["available"]
    assert not b["fi_fused_oneshot"]["available"] and "flashinfer" in b["fi_fused_oneshot"]["reason"]
    assert not b["symm_oneshot"]["available"] and b["symm_oneshot"]["reason"].startswith("setup failed")
    assert "failed to set up earlier" in b["symm_twoshot"]["reason"]  # the shared buffer is not retried

    for name in ("nccl", "nccl_norm"):
        for t in ("1", "3"):
            assert res["checks"][name][t]["ok"], res["checks"][name][t]
            lat = res["latency_us"][name][t]
            assert lat["gross"] > 0 and len(lat["per_rank"]) == 2
    assert res["checks"]["nccl"]["3"]["rule"] == "bit-identical to NCCL (TP=2)"
    assert res["meta"]["facts"]["norm_impl"] == "torch"
    assert set(res["producer_us"]) == {"1", "3"}

    profs = res["nccl_profiles"]
    assert profs["none"]["reused_main_run"] is True  # same NCCL environment as the main run
    assert profs["pcie-ll"]["reused_main_run"] is False and profs["pcie-ll"]["env"]["NCCL_PROTO"] == "LL"
    assert set(profs["pcie-ll"]["latency_us"]) == {"nccl", "nccl_norm"}

    s = receipt["summary"]
    assert s["machine"] == "2x Simulated GPU (sm120, nvlink)" and s["tp"] == 2 and s["checks_passed"]
    assert s["t3_chosen_backend"] == "nccl_norm" and s["per_forward_us_t3"] is not None

    t = tbl.load_table(table)
    assert list(t["entries"]) == ["Simulated GPU|sm120|tp2|nvlink"]
    assert receipt["tune"]["knobs"]["env"]["SGLANG_FLASHINFER_ALLREDUCE_FUSION_MAX_TOKENS"] == "0"
    assert "SGLANG_TORCH_SYMM_MEM_MAX_SIZE=0" in cap.out
    assert (out.with_suffix(".png")).read_bytes()[:4] == b"\x89PNG"
    assert "T=3 (2/2" in cap.out  # progress lines from rank 0
