"""bench/trace_kernels: fused all-reduce launches per target-verify step, from synthetic torch-profiler traces.

The traces (test/support/kineto_trace.py) are written in the Chrome trace format torch's Kineto profiler
exports; the GPU is simulated. With overlap scheduling the GPU runs step i while the CPU is already inside step
i+1's span: the synthetic traces do the same, and the draft model's own fused kernels run inside the verify's
GPU time. Eager launches (cudaLaunchKernelExC, one correlation per kernel) are covered too.
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest

TEST_ROOT = Path(__file__).resolve().parents[3]
if str(TEST_ROOT) not in sys.path:
    sys.path.insert(0, str(TEST_ROOT))

from sglang_blackwell.bench.eagle3 import trace  # noqa: E402
from sglang_blackwell.bench.eagle3.trace_kernels import (  # noqa: E402
    FUSED_ALLREDUCE_KERNEL,
    NCCL_ALLREDUCE_KERNEL,
    fusion_in_verify_verdict,
    is_verify_span,
    kernels_per_span,
)
from support.kineto_trace import FUSED_ONESHOT, FUSED_TWOSHOT, NCCL_AR, OTHER, Trace, spec_trace  # noqa: E402

PATTERNS = {"fused": FUSED_ALLREDUCE_KERNEL, "nccl_ar": NCCL_ALLREDUCE_KERNEL}


def verify_counts(events: list[dict], label: str = "fused") -> list[int]:
    return [s["counts"][label] for s in kernels_per_span(events, is_verify_span, PATTERNS)["spans"]]


def test_counts_fused_kernels_per_verify_step_through_graph_launches():
    tr = spec_trace(5, 19)
    r = kernels_per_span(tr.events, is_verify_span, PATTERNS)
    assert r["method"] == "correlation"
    assert [s["counts"]["fused"] for s in r["spans"]] == [19] * 5
    assert [s["counts"]["nccl_ar"] for s in r["spans"]] == [2] * 5
    assert r["kernels_matched"] == {"fused": 5 * 19 + 5 * 3, "nccl_ar": 10}
    assert r["unattributed"]["fused"] == 15  # the draft's own fused kernels are not the verify's


def test_draft_kernels_overlapping_the_verify_on_the_gpu_are_not_counted():
    tr = spec_trace(3, 19, draft_fused=5)
    # the draft's fused kernels do run inside the verify's GPU window...
    drafts = [e for e in tr.events if e.get("cat") == "kernel" and "oneshot" in e["name"]]
    windows = [e for e in tr.events if e.get("cat") == "gpu_user_annotation"]
    inside = sum(1 for k in drafts for w in windows if w["ts"] <= k["ts"] <= w["ts"] + w["dur"])
    assert inside > 3 * 19
    # ...and are still attributed to the draft step, not to the verify
    assert verify_counts(tr.events) == [19, 19, 19]
    every = kernels_per_span(tr.events, lambda n: n.startswith("step["), PATTERNS)
    assert [s["counts"]["fused"] for s in every["spans"]] == [0] + [5, 19] * 3  # prefill, then rounds


def test_eager_launches_each_with_its_own_correlation():
    tr = Trace()
    for step in range(3):
        ts = 1000.0 + 500 * step
        tr.span("step[TARGET_VERIFY bs=2]", ts, 300.0)
        for k in range(7):
            corr = tr.launch("cudaLaunchKernelExC", ts + 10 + 20 * k)
            tr.kernel(FUSED_TWOSHOT if k % 2 else FUSED_ONESHOT, ts + 400 + 5 * k, corr)
    assert verify_counts(tr.events) == [7, 7, 7]


def test_gpu_only_trace_falls_back_to_merged_gpu_windows():
    tr = spec_trace(4, 19, draft_fused=0, cpu=False, gpu_windows=2)
    r = kernels_per_span(tr.events, is_verify_span, PATTERNS)
    assert r["method"] == "gpu_window"
    assert [s["counts"]["fused"] for s in r["spans"]] == [19] * 4  # two windows per step merged, not doubled


def test_launches_that_link_to_no_span_use_gpu_windows():
    tr = spec_trace(3, 19, draft_fused=0)
    for e in tr.events:  # correlations broken: kernels point at launches that are not in the trace
        if e.get("cat") == "kernel":
            e["args"]["correlation"] += 10_000
    r = kernels_per_span(tr.events, is_verify_span, PATTERNS)
    assert r["method"] == "gpu_window" and "fallback" in r
    assert [s["counts"]["fused"] for s in r["spans"]] == [19] * 3


def test_trace_without_kernels_counts_zero_and_fails_the_verdict():
    tr = spec_trace(3, 19)
    tr.events = [e for e in tr.events if e.get("cat") != "kernel"]
    counts = verify_counts(tr.events)
    assert counts == [0, 0, 0]
    v = fusion_in_verify_verdict(counts, 19)
    assert not v["ok"] and "0 times" in v["why"]


def test_fusion_off_trace_has_nccl_but_no_fused_kernels():
    tr = spec_trace(4, 0, draft_fused=0)
    assert verify_counts(tr.events) == [0] * 4
    assert verify_counts(tr.events, "nccl_ar") == [2] * 4


def test_names_that_are_not_the_fusion_kernel_do_not_match():
    assert FUSED_ALLREDUCE_KERNEL.search(FUSED_ONESHOT) and FUSED_ALLREDUCE_KERNEL.search(FUSED_TWOSHOT)
    assert NCCL_ALLREDUCE_KERNEL.search(NCCL_AR)
    assert NCCL_ALLREDUCE_KERNEL.search("ncclKernel_AllReduce_RING_LL_Sum_bfloat16(ncclDevComm*, ...)")
    moe = ["void flashinfer::trtllm_moe_allreduce_fusion::moereduce_allreduce_fusion_kernel_oneshot_lamport"
           "<__nv_bfloat16, 2, true, true, true, false>(...)",
           "void flashinfer::trtllm_moe_allreduce_fusion::moefinalize_allreduce_fusion_kernel_oneshot_lamport<...>"]
    for name in OTHER + moe + ["ncclDevKernel_AllGather_RING_LL(...)", "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL"]:
        assert not FUSED_ALLREDUCE_KERNEL.search(name)
        assert not NCCL_ALLREDUCE_KERNEL.search(name)


def test_gzipped_trace_file_round_trip(tmp_path):
    tr = spec_trace(3, 19)
    path = tmp_path / "A-1764460800.1-TP-0.trace.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(tr.document(), f)
    assert verify_counts(trace.load_trace(path)) == [19, 19, 19]


@pytest.mark.parametrize(("counts", "ok", "why"), [
    ([19, 19, 19, 19], True, "4 of 4"),
    ([19, 19, 19, 7], True, "3 of 4"),  # the last step cut by the end of the window
    ([19, 19, 0], True, "2 of 3"),
    ([19, 18, 19, 19], False, "step 1 launched the fused kernel 18 times"),
    ([19, 19, 38], False, "more than 19"),
    ([19], False, "only 1 target-verify step"),
    ([], False, "only 0 target-verify step"),
    ([19, 5], False, "only 1 verify step(s) with 19"),
    ([0, 0, 0], False, "launched the fused kernel 0 times"),
])
def test_verdict(counts, ok, why):
    v = fusion_in_verify_verdict(counts, 19)
    assert v["ok"] is ok, v
    assert why in v["why"], v["why"]


def test_verdict_needs_a_positive_expectation():
    assert not fusion_in_verify_verdict([0, 0, 0], 0)["ok"]
