"""The order in which a parallel `make test` (pytest-xdist, --dist loadfile) hands test files to its workers.

xdist gives each worker a whole file at a time, in collection order (the Makefile passes --no-loadscope-reorder:
xdist's own reorder, by the number of tests in a file, would put the per-patch probe files, a few tests each but
up to two minutes of module fixtures, last, and the run would end on one worker still probing). So in a worker the
files are collected longest first, by the seconds SECONDS says a file took (its tests' setup + call + teardown,
summed), the files it does not name after them in their usual order: the long units start while the short ones
can still fill the other workers at the end. A serial run keeps pytest's order.

SECONDS: a warm-cache `make test` run's JUnit XML (2-core Intel Xeon, 3 workers, 2026-12-08, 499ac46), files of 10 s
or more. Only the order is taken from it: a stale number costs balance, never a test.
"""

from __future__ import annotations

from pathlib import Path

import pytest

UNIT = Path(__file__).resolve().parents[1] / "unit"

SECONDS = {
    "patches/test_p11_splitkv_draft_extend.py": 217,
    "patches/test_p8_splitkv_verify_cuda.py": 185,
    "patches/test_p12_admin_endpoints.py": 92,
    "patches/test_p10_request_fields.py": 87,
    "artifacts/test_aot.py": 77,
    "patches/test_p9_batch_size_warmup.py": 75,
    "qualify/test_hostile_runner.py": 60,
    "patches/test_p13_decode_splits_by_context.py": 56,
    "release/test_install_stack.py": 55,
    "artifacts/test_bundle.py": 53,
    "hostile/test_core.py": 47,
    "bench/eagle3/test_lab_kimi61.py": 44,
    "bench/eagle3/test_lab_pair.py": 43,
    "qualify/test_gpu_suite_runner.py": 42,
    "artifacts/test_build.py": 42,
    "qualify/test_userpath_runner.py": 41,
    "patches/test_p7_allreduce_knobs.py": 41,
    "box/test_nccl_hook.py": 40,
    "patches/test_p5_workspace_before_capture.py": 39,
    "hostile/test_data_loss.py": 35,
    "box/test_doctor.py": 34,
    "patches/test_p6_symm_mem_sm12x.py": 31,
    "artifacts/test_launch_path_probe.py": 30,
    "bench/eagle3/test_bench_grid_e2e.py": 28,
    "hostile/test_doctor_reads_like_sglang.py": 25,
    "patches/test_p3_eagle3_capture.py": 24,
    "artifacts/test_lock.py": 24,
    "artifacts/test_install_venv.py": 19,
    "patches/test_p4_fallback_allreduce.py": 19,
    "patches/test_p2_fusion_gate.py": 19,
    "hostile/test_bench_hostile_net.py": 18,
    "hostile/test_bounded_clients.py": 17,
    "bench/eagle3/test_bench_eagle3_e2e.py": 17,
    "patchset/test_fetch.py": 16,
    "artifacts/test_bundle_network.py": 16,
    "hostile/test_bench_serve_doctor.py": 15,
    "box/test_exposure.py": 14,
    "test_probe_zygote.py": 14,
    "box/test_serve.py": 13,
    "bench/eagle3/test_bench_server.py": 13,
    "bench/eagle3/test_bench_openai_e2e.py": 13,
    "artifacts/test_fatbin.py": 12,
    "artifacts/test_bundle_launch_deps.py": 12,
    "hostile/test_installer_index.py": 11,
    "qualify/test_hostile_verdict.py": 11,
    "qualify/test_qualify.py": 11,
    "bench/test_verify_kernel_bench.py": 11,
    "bench/allreduce/test_bench_allreduce_sim.py": 10,
    "hostile/test_index_runs_no_code.py": 10,
}


def seconds(path: Path) -> int:
    """What SECONDS says `path`'s file took; 0 for a file it does not name (or one outside test/unit)."""
    try:
        return SECONDS.get(path.resolve().relative_to(UNIT).as_posix(), 0)
    except ValueError:
        return 0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not hasattr(config, "workerinput"):  # not an xdist worker
        return
    items.sort(key=lambda item: -seconds(item.path))  # stable: each file's own order is kept, ties keep theirs
