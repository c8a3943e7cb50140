"""On a machine with >= 2 CUDA GPUs and the lab model pair in /tmp/lab/{target,draft}: the lab config passes
its verdict, and the same pair with an untrained draft fails it, naming acceptance (the benchmark can fail).

Runs the real CLI (servers launched in their own sessions, torn down and checked). Wall time: ~65-75 s per arm
launch with warm caches (measured 2026-11-30): 9 launches for lab-synthetic, 2 for the untrained check.
BENCH_EAGLE3_REPEATS=1 makes it 3 + 2 launches. Receipts go to $BENCH_EAGLE3_OUT (default: a temporary directory).
On the GPU lab, after the lab line's install: PYTHONPATH=/tmp/site:python python3 -m pytest -m gpu <this file>
(plus the cache variables benchmark/lab/bench_eagle3.sh exports).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAIR = [Path("/tmp/lab/target/config.json"), Path("/tmp/lab/draft/config.json")]


def _gpu_count() -> int:
    if not shutil.which("nvidia-smi"):
        return 0
    r = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    return sum(1 for ln in r.stdout.splitlines() if ln.startswith("GPU "))


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.slow,
    pytest.mark.skipif(_gpu_count() < 2, reason="needs >= 2 CUDA GPUs"),
    pytest.mark.skipif(not all(p.exists() for p in PAIR),
                       reason="lab model pair not in /tmp/lab/{target,draft}"),
]


def _bench(config: str, out: Path) -> tuple[int, dict]:
    cmd = [sys.executable, "-m", "sglang_blackwell.cli", "bench", "eagle3", "--config",
           str(ROOT / "benchmark" / config), "--out", str(out)]
    if os.environ.get("BENCH_EAGLE3_REPEATS"):
        cmd += ["--repeats", os.environ["BENCH_EAGLE3_REPEATS"]]
    env = {**os.environ, "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
           "NVSHMEM_DISABLE_NVLS": "1"}
    proc = subprocess.run(cmd, env=env, cwd=ROOT, timeout=3600)
    receipts = sorted(out.glob(f"bench-eagle3_{Path(config).stem}_*.json"))
    assert receipts, f"no receipt in {out}"
    return proc.returncode, json.loads(receipts[-1].read_text())


@pytest.fixture
def out(tmp_path: Path) -> Path:
    return Path(os.environ["BENCH_EAGLE3_OUT"]) if os.environ.get("BENCH_EAGLE3_OUT") else tmp_path


def test_lab_synthetic_passes(out: Path) -> None:
    rc, r = _bench("lab-synthetic.toml", out)
    assert all(x["teardown"]["group_gone"] and x["teardown"]["gpu"].get("ours_left") == [] for x in r["runs"])
    assert rc == 0, r["verdict"]["reasons"]
    assert r["summary"]["passed"] and r["summary"]["speedup_c1"] >= 1.3


def test_untrained_draft_fails_on_acceptance(out: Path) -> None:
    rc, r = _bench("lab-synthetic-untrained.toml", out)
    assert rc == 1 and not r["summary"]["passed"]
    (check,) = r["verdict"]["checks"]
    assert "acceptance" in check["diagnosis"]["regressed"]
