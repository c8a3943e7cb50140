"""Synthetic `bench allreduce` results, built with the same writer functions the GPU workers use
(bench/allreduce/results.py). The GPU, its topology and its timings are simulated: the numbers are the reference
measurement on the lab's 2x H200 (research/lab-allreduce, Table 2, net us per call).
"""

from __future__ import annotations

from sglang_blackwell.bench.allreduce import results as ar_results
from sglang_blackwell.box.allreduce_catalog import CATALOG

TOKENS = [1, 2, 3, 4, 8, 16, 32, 64, 128, 256, 512]
H200_NET_US = {
    "nccl": [7.76, 7.78, 8.34, 7.97, 7.99, 9.19, 10.68, 13.36, 26.79, 31.29, 43.64],
    "nccl_norm": [9.82, 10.02, 10.14, 10.15, 10.18, 11.46, 12.92, 15.67, 29.26, 34.77, 51.94],
    "fi_fused_oneshot": [5.07, 5.29, 5.48, 5.90, 6.10, 6.40, 7.19, 8.69, 10.82, 17.64, 37.35],
    "fi_fused_twoshot": [None, None, 71.44, 71.46, 40.35, 25.18, 17.58, 19.26, 19.02, 23.70, 42.78],
    "fi_ar_oneshot": [3.05, 3.36, 3.61, 3.87, 4.00, 4.30, 4.99, 6.46, 8.85, 14.81, 31.15],
    "symm_twoshot": [6.66, 7.27, 7.90, 8.05, 8.10, 8.23, 8.38, 10.80, 12.82, 17.77, 30.43],
    "symm_oneshot": [7.17, 7.35, 7.67, 7.80, 8.12, 8.79, 10.33, 12.87, 18.30, 27.59, 48.15],
}
H200_TOPOLOGY = {"gpu_name": "NVIDIA H200", "capability": "9.0", "gpu_count": 2, "link": "nvlink",
                 "p2p_access": True, "p2p_atomics": True, "devices": [0, 1], "source": {}, "pairs": {}}
PRODUCER_US = 1.2


def build_results(net_us: dict[str, list[float | None]], *, tokens: list[int] = TOKENS, tp: int = 2,
                  hidden: int = 7168, failed: dict[str, list[int]] | None = None,
                  unavailable: dict[str, str] | None = None, topology: dict | None = None) -> dict:
    failed, unavailable = failed or {}, unavailable or {}
    r = ar_results.new_results({"tp": tp, "tokens": tokens, "hidden": hidden, "dtype": "bf16",
                                "elem_size": 2})
    r["meta"] = {"topology": topology or H200_TOPOLOGY, "facts": {"flashinfer_api": "unified"},
                 "versions": {"torch": "2.11.0", "flashinfer": "0.6.12"}}
    for t in tokens:
        ar_results.add_producer(r, t, PRODUCER_US)
    for name in [*net_us, *unavailable]:
        op = CATALOG[name].op
        ar_results.add_backend(r, name, op=op, reference="nccl" if op == "ar" else "fp32",
                               available=name not in unavailable, reason=unavailable.get(name, ""))
    for name, values in net_us.items():
        for t, us in zip(tokens, values, strict=True):
            if us is None:
                ar_results.add_error(r, name, t, "skipped: two-shot needs token_num > world_size")
                continue
            ok = t not in failed.get(name, [])
            part = {"ok": ok, "max_abs": 0.0 if ok else 0.5, "rel_l2": 1e-3, "max_abs_bound": 0.06}
            ar_results.add_measurement(r, name, t, gross_us=us + PRODUCER_US, producer_us=PRODUCER_US,
                                       per_rank=[us + PRODUCER_US] * tp, lo=us, hi=us + 2, ok=ok,
                                       rule="synthetic", eager={"sum": part}, graph={"sum": part})
    return r
