"""The backend protocol and the numerics checks with a real 2-process all-reduce. Simulation, said plainly:
two CPU processes and torch.distributed's gloo backend stand in for two GPUs and NCCL (the same
`dist.all_reduce` call the NCCL backend makes); FlashInfer is absent, so the torch add+RMSNorm runs.
Also: which backends refuse to run on this (GPU-less, flashinfer-less) machine, and why."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from sglang_blackwell.bench.allreduce import backends as ab  # noqa: E402
from sglang_blackwell.bench.allreduce import correctness as ac  # noqa: E402

HIDDEN, TOKENS = 64, [1, 3]


class SkipsTheReduce(ab.Backend):
    """A broken backend: returns its input unreduced. The checks must catch it."""

    def __init__(self) -> None:
        super().__init__("nccl")

    def run(self, inp, residual, gamma):
        return (inp,)


def _rank(rank: int, port: int, out_dir: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    ctx = ab.RankContext(rank=rank, world_size=2, device=torch.device("cpu"), group=dist.group.WORLD,
                         hidden=HIDDEN, dtype=torch.bfloat16, tokens=TOKENS, fi_max_tokens=2048)
    verdicts = {}
    for b in [*ab.make(["nccl", "nccl_norm"]), SkipsTheReduce()]:
        key = b.name if not isinstance(b, SkipsTheReduce) else "broken"
        b.setup(ctx)
        for t in TOKENS:
            x0, res0, gamma = ac.make_inputs(ctx, t, seed=100 + t)
            ref = ac.reference(ctx, x0, res0, gamma)
            outs = b.run(x0.clone(), res0.clone(), gamma)
            verdicts[f"{key}@{t}"] = ac.check(b.op, outs, ref, ctx)
    verdicts["norm_impl"] = ctx.facts.get("norm_impl")
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(verdicts))
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory) -> list[dict]:
    out = tmp_path_factory.mktemp("gloo")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.start_processes(_rank, args=(port, str(out)), nprocs=2, start_method="spawn")
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


def test_allreduce_backends_pass(verdicts):
    for v in verdicts:
        assert v["norm_impl"] == "torch"
        for t in TOKENS:
            assert v[f"nccl@{t}"]["ok"], v[f"nccl@{t}"]
            assert v[f"nccl@{t}"]["rule"] == "bit-identical to NCCL (TP=2)"
            assert v[f"nccl_norm@{t}"]["ok"], v[f"nccl_norm@{t}"]


def test_broken_backend_caught(verdicts):
    for v in verdicts:
        for t in TOKENS:
            assert not v[f"broken@{t}"]["ok"]


def _cpu_ctx(world_size: int = 2, **kw) -> ab.RankContext:
    return ab.RankContext(rank=0, world_size=world_size, device=torch.device("cpu"), group=None, hidden=HIDDEN,
                          dtype=torch.bfloat16, tokens=TOKENS, fi_max_tokens=2048, **kw)


def test_symm_mem_gated_on_native_p2p_atomics():
    for atomics, phrase in ((None, "unknown"), (False, "absent on some peer pair")):
        ok, why = ab.SymmTwoShot().available(_cpu_ctx(p2p_atomics=atomics))
        assert not ok and phrase in why
    ok, why = ab.SymmTwoShot().available(_cpu_ctx(p2p_atomics=True))
    assert ok, why  # this torch build has the symm_mem ops


def test_multimem_needs_allow_multicast():
    ok, why = ab.SymmMultimem().available(_cpu_ctx(p2p_atomics=True))
    assert not ok and "--allow-multicast" in why


def test_flashinfer_backends_refuse_without_flashinfer():
    try:
        import flashinfer  # noqa: F401
        pytest.skip("flashinfer is installed here")
    except ImportError:
        pass
    for b in ab.make(["fi_fused_oneshot", "fi_ar_oneshot", "fi_pcie_ipc"]):
        ok, why = b.available(_cpu_ctx())
        assert not ok and "flashinfer.comm does not import" in why


def test_registry_matches_catalog():
    from sglang_blackwell.box.allreduce_catalog import CATALOG

    made = ab.make(list(CATALOG))
    assert [b.name for b in made] == list(CATALOG)
    assert all(b.op == CATALOG[b.name].op for b in made)
    assert {b.name: b.reference for b in made}["fi_fused_oneshot"] == "fp32"


def test_p2p_probe_never_raises_without_a_gpu(monkeypatch):
    import types

    from sglang_blackwell.bench.allreduce import p2p_probe

    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the probe would answer")
    monkeypatch.delenv("SGLANG_BLACKWELL_TOPOLOGY", raising=False)
    props = types.SimpleNamespace(name="stand-in", major=12, minor=0)  # what torch says of device 0 in a rank
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: props)
    facts = p2p_probe.detect_group([0, 1])
    assert facts["p2p_atomics"] is None and facts["link"] == "unknown"  # unknown, so symm-mem is not offered
    assert facts["source"]["error"].startswith("box topology:") and facts["capability"] == "12.0"


def test_pcie_ipc_offered_only_where_the_installed_flashinfer_has_it(monkeypatch):
    """Simulated, said plainly: flashinfer.comm cannot import without CUDA here, so stand-in modules answer
    the one question available() asks: does the installed flashinfer have PcieIpcAllReduceWorkspace (0.7.0+)?
    (tests/unit/test_allreduce_paths reads the real 0.6.12 / 0.7.2 files.)"""
    import sys
    import types

    fi = types.ModuleType("flashinfer")
    old, new = types.ModuleType("flashinfer.comm"), types.ModuleType("flashinfer.comm")
    new.PcieIpcAllReduceWorkspace = object
    monkeypatch.setitem(sys.modules, "flashinfer", fi)
    for comm, ok_at_8 in ((old, False), (new, True)):
        fi.comm = comm
        monkeypatch.setitem(sys.modules, "flashinfer.comm", comm)
        for b in ab.make(["fi_pcie_ipc", "fi_pcie_ipc_norm"]):
            ok, why = b.available(_cpu_ctx(world_size=8))
            assert ok is ok_at_8, (b.name, why)
            if not ok:
                assert "needs flashinfer >= 0.7.0" in why
    ok, why = ab.FlashInferPcieIpc().available(_cpu_ctx(world_size=3))
    assert not ok and "world size 2, 4 or 8" in why
