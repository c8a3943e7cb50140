"""Stage times from a real torch profiler trace (on the CPU here): the spans SGLang 0.5.14 records, around
real work."""

from __future__ import annotations

from pathlib import Path

import pytest

from sglang_blackwell.bench.eagle3.trace import load_trace, stage_times

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("suffix", [".trace.json", ".trace.json.gz"])
def test_stage_times_from_a_real_profiler_trace(tmp_path: Path, suffix: str) -> None:
    from torch.profiler import ProfilerActivity, profile, record_function

    x = torch.randn(384, 384)
    # one intra-op thread: a span's wall time is then its work, also on a machine whose other cores are busy (the
    # parallel `make test`): a matmul split over two threads waits for the one that another process holds off its
    # core, and a 1x span could read as long as a 6x one
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(6):
                with record_function("step[DECODE bs=1]"):
                    x @ x
                with record_function("draft"):
                    x @ x
                with record_function("step[TARGET_VERIFY bs=1]"):
                    for _ in range(6):  # clearly more work than a decode step
                        x @ x
                with record_function("draft_extend"):
                    x @ x
                with record_function("unrelated"):
                    x @ x
    finally:
        torch.set_num_threads(threads)
    path = tmp_path / f"bench-123-TP-0{suffix}"  # the name sglang's /start_profile gives a trace
    prof.export_chrome_trace(str(path))
    if suffix.endswith(".gz"):
        assert path.read_bytes()[:2] == b"\x1f\x8b"
    res = stage_times(load_trace(path))
    assert res["source"] == "CPU-side spans only (no GPU events)"  # no CUDA on this machine
    assert set(res["stages"]) == {"decode", "draft", "verify", "draft_extend"}
    assert all(s["n"] == 6 for s in res["stages"].values())
    assert res["stages"]["verify"]["median_ms"] > 2 * res["stages"]["decode"]["median_ms"]


def test_no_spans(tmp_path: Path) -> None:
    assert stage_times([{"ph": "X", "cat": "kernel", "name": "gemm", "dur": 5}]) == {
        "source": "no SGLang step spans in the trace", "stages": {}}


def test_stage_times_of_a_lab_trace_count_each_verify_step_once() -> None:
    # a real trace from the lab (2x H200, sglang 0.5.14, EAGLE-3, fusion off; gpu suite arm B, 2026-11-30): the
    # profiler wrote one gpu_user_annotation per stream for every verify step (compute + NCCL), 84 for 4 steps,
    # and a median over them reported 0.13 ms instead of the ~2.8 ms the step took on the GPU
    data = Path(__file__).resolve().parents[3] / "data" / "lab-h200x2-eagle3-fusion-off-TP-0.trace.json.gz"
    res = stage_times(load_trace(data))
    assert res["source"].startswith("GPU (gpu_user_annotation")
    verify = res["stages"]["verify"]
    assert verify["n"] == 4
    assert 2.5 < verify["min_ms"] <= verify["median_ms"] < 3.2


LAB = Path(__file__).resolve().parents[3] / "data"


def test_allreduce_share_of_verify_in_lab_traces_with_fusion_off_and_on() -> None:
    # the same 10-layer lab model (gpu suite, 2026-11-30), rank 0: with fusion off every layer's two all-reduces
    # are NCCL kernels followed by FlashInfer's residual-add+RMSNorm; with fusion on 19 = 2L - 1 of them are the
    # fused AR+residual+RMSNorm kernel and no separate add+RMSNorm is left in the verify step
    off = stage_times(load_trace(LAB / "lab-h200x2-eagle3-fusion-off-TP-0.trace.json.gz"))["stages"]["verify"]
    on = stage_times(load_trace(LAB / "lab-h200x2-eagle3-fusion-on-TP-0.trace.json.gz"))["stages"]["verify"]
    assert off["allreduce_calls"] == on["allreduce_calls"] == 21  # 2 per layer + the embedding's
    assert 0.04 < off["add_rmsnorm_ms"] < 0.08 and on["add_rmsnorm_ms"] < 0.01
    assert 0.1 < off["allreduce_ms"] < 0.3 and 0.1 < on["allreduce_ms"] < 0.5
    # a small share of the step: what fusion can save at most on this machine
    assert off["allreduce_ms"] + off["add_rmsnorm_ms"] < 0.15 * off["median_ms"]


def test_allreduce_time_counts_kernels_of_the_window_and_its_device_only() -> None:
    def x(cat: str, name: str, ts: float, dur: float, pid: int = 0, **args: object) -> dict:
        return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": pid, "args": args}

    fused = "void flashinfer::trtllm_allreduce_fusion::allreduce_fusion_kernel_oneshot_lamport<bf16>(...)"
    events = [
        x("gpu_user_annotation", "step[TARGET_VERIFY bs=1]", 100, 1000, **{"External id": 7}),
        x("kernel", fused, 200, 6),
        x("kernel", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 300, 8),
        x("kernel", "void flashinfer::norm::FusedAddRMSNormKernel<8u, __nv_bfloat16>(...)", 310, 3),
        x("kernel", "fused_moe_kernel", 400, 50),  # not communication
        x("kernel", fused, 1200, 6),  # after the window
        x("kernel", fused, 500, 6, pid=1),  # another device
        x("kernel", "void moefinalize_allreduce_fusion_kernel_oneshot_lamport<...>(...)", 600, 9),  # MoE variant
    ]
    v = stage_times(events)["stages"]["verify"]
    assert (v["allreduce_calls"], v["allreduce_ms"], v["add_rmsnorm_ms"]) == (2, 0.014, 0.003)
