"""Numerics of every all-reduce backend the installed stack offers, at several sizes, against NCCL / fp32, at
TP=2, through the real `bench allreduce` command (spawned ranks, CUDA graphs). Needs >= 2 CUDA GPUs.

AR-only backends must be bit-identical to NCCL at TP=2; AR+residual+RMSNorm backends must be within the
stated bf16 tolerance of the fp32 reference, both eagerly and replayed from a CUDA graph. Timing is cut to
the minimum: this is about numbers, not speed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_blackwell.box.allreduce_catalog import CATALOG

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                       reason="needs >= 2 GPUs"),
]

TOKENS = [1, 3, 8, 64, 512]
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("ar") / "r.json"
    env = {**os.environ, "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
           "NVSHMEM_DISABLE_NVLS": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO / "python"), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "sglang_blackwell.cli", "bench", "allreduce", "--tp", "2",
           "--tokens", ",".join(map(str, TOKENS)), "--calls", "2", "--reps", "1", "--warmup", "0",
           "--no-plot", "--timeout", "240", "--out", str(out)]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert out.is_file(), f"no receipt (rc {r.returncode}):\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
    return json.loads(out.read_text())["results"]


def test_run_complete(results):
    assert "failure" not in results, results.get("failure")
    assert results["backends"]["nccl"]["available"]
    assert results["backends"]["nccl_norm"]["available"]


@pytest.mark.parametrize("name", [n for n, b in CATALOG.items() if not b.multicast])
def test_backend_numerics(results, name):
    b = results["backends"][name]
    if not b["available"]:
        pytest.skip(f"{name} not offered here: {b['reason']}")
    checks = results["checks"].get(name, {})
    errors = {t: m for t, m in results["errors"].get(name, {}).items() if not m.startswith("skipped")}
    assert not errors, errors
    measured = sorted(int(t) for t in checks)
    skipped = sorted(int(t) for t, m in results["errors"].get(name, {}).items() if m.startswith("skipped"))
    assert sorted(measured + skipped) == TOKENS, "every size is either checked or skipped with a reason"
    assert measured, f"{name} ran at no size"
    for t, c in checks.items():
        assert c["ok"], f"{name} T={t}: {c}"
        if b["op"] == "ar":
            assert c["rule"].startswith("bit-identical to NCCL"), c["rule"]
            assert c["graph"]["sum"]["max_abs"] == 0.0
