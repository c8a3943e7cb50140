"""Prebuilt FlashInfer modules (`sglang-blackwell build --aot <arch>`) load and compute on a real GPU with JIT
compilation disabled (FLASHINFER_DISABLE_JIT=1 makes any compile an error): the "no first-start compile" claim.

Needs the installed flashinfer to be a wheel built with --aot for this GPU's arch (the lab: --aot 9.0a on the
0.5.14 line; the target box: --aot 12.0a). norm: rmsnorm on one GPU against a torch fp32 reference.
trtllm_comm: the fused AR+residual+RMSNorm and AR-only one-shot backends of `bench allreduce` at TP=2, whose
correctness checks compare with NCCL / fp32 (needs 2 GPUs).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
REPO = Path(__file__).resolve().parents[2]
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def _env() -> dict[str, str]:
    major, minor = torch.cuda.get_device_capability()
    return {**os.environ, **NO_MULTICAST, "FLASHINFER_DISABLE_JIT": "1",
            "FLASHINFER_CUDA_ARCH_LIST": f"{major}.{minor}{'a' if major >= 9 else ''}",
            "PYTHONPATH": os.pathsep.join([str(REPO / "python"), os.environ.get("PYTHONPATH", "")])}


NORM = """
import json, torch, flashinfer
from flashinfer.jit.norm import gen_norm_module
spec = gen_norm_module()
x = torch.randn(3, 7168, dtype=torch.bfloat16, device="cuda")
w = torch.randn(7168, dtype=torch.bfloat16, device="cuda")
y = flashinfer.norm.rmsnorm(x, w, 1e-6)
xf = x.float()
ref = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()
print(json.dumps({"is_aot": spec.is_aot, "path": str(spec.get_library_path()),
                  "max_abs": float((y.float() - ref).abs().max()), "ref_max": float(ref.abs().max())}))
"""


def test_prebuilt_norm_runs_without_compiling():
    r = subprocess.run([sys.executable, "-c", NORM], capture_output=True, text=True, env=_env(), timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["is_aot"], f"flashinfer has no AOT norm module ({got['path']}): install a wheel built with --aot"
    assert got["max_abs"] <= 0.02 * got["ref_max"], got


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_prebuilt_trtllm_comm_allreduce_matches_nccl(tmp_path):
    out = tmp_path / "ar.json"
    cmd = [sys.executable, "-m", "sglang_blackwell.cli", "bench", "allreduce", "--tp", "2",
           "--backends", "nccl,fi_ar_oneshot,fi_fused_oneshot", "--tokens", "1,3,64", "--calls", "2",
           "--reps", "1", "--warmup", "0", "--no-plot", "--timeout", "240", "--out", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=420)
    assert out.is_file(), f"no receipt (rc {r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    res = json.loads(out.read_text())["results"]
    assert "failure" not in res, res.get("failure")
    for name in ("fi_ar_oneshot", "fi_fused_oneshot"):
        b = res["backends"][name]
        # with JIT disabled, a module missing from the AOT slots shows up here as the reason
        assert b["available"], f"{name}: {b['reason']}"
        errors = {t: m for t, m in res["errors"].get(name, {}).items() if not m.startswith("skipped")}
        assert not errors, errors
        checks = res["checks"][name]
        assert checks and all(c["ok"] for c in checks.values()), checks
