"""On a box with >= 2 GPUs: the pcie-ll profile installed by `sglang-blackwell nccl install` reaches NCCL in
spawned workers (see nccl_profile_check.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu


def test_profile_reaches_nccl_in_spawned_workers(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    r = subprocess.run([sys.executable, str(Path(__file__).with_name("nccl_profile_check.py")), "--keep",
                        str(tmp_path)], capture_output=True, text=True, timeout=600)
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["pass"], out
