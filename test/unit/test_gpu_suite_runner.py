"""benchmark/lab/gpu_suite.sh, the one-call lab runner of the GPU suite, on a CPU machine.

The GPUs are simulated by a stand-in `nvidia-smi` on PATH (2x H200, idle) and the serving stack by empty
`sglang`, `flashinfer`, `torch` packages: the runner's checks and messages are real, and in the end-to-end case
the real suite runs under the real pytest, every server launch fails at once (`python -m sglang.launch_server`
does not exist), and the runner must still leave the receipt, the JUnit XML, the log and the artifacts tarball,
and exit non-zero.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmark" / "lab" / "gpu_suite.sh"

FAKE_SMI = """#!/bin/bash
# stand-in nvidia-smi: $GPUS idle H200s
n=${FAKE_GPUS:-2}
case "$*" in
  *--query-gpu=index*) for i in $(seq 0 $((n-1))); do echo $i; done ;;
  *--query-gpu=memory.used*) for i in $(seq 1 $n); do echo 0; done ;;
  *--query-gpu=name,compute_cap*) for i in $(seq 1 $n); do echo "NVIDIA H200, 9.0"; done ;;
  *--query-compute-apps*) ;;
  *"topo -m"*) printf '\\tGPU0\\tGPU1\\nGPU0\\t X \\tNV18\\nGPU1\\tNV18\\t X \\n' ;;
  *) echo "fake nvidia-smi: $*" ;;
esac
"""


@pytest.fixture
def lab(tmp_path: Path) -> dict:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(FAKE_SMI)
    smi.chmod(0o755)
    site = tmp_path / "site"
    for pkg in ("sglang", "flashinfer", "torch"):
        (site / pkg).mkdir(parents=True)
        (site / pkg / "__init__.py").write_text("")
    pair = tmp_path / "lab"
    for d in ("target", "draft"):
        (pair / d).mkdir(parents=True)
        (pair / d / "config.json").write_text(json.dumps({"num_hidden_layers": 10, "hidden_size": 7168}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLB_", "PYTEST_"))}
    env.update(PATH=f"{bin_dir}:{env['PATH']}", SGLB_SITE=str(site), SGLB_PYTHON=sys.executable,
               SGLB_LAB_TARGET=str(pair / "target"), SGLB_LAB_DRAFT=str(pair / "draft"),
               SGLB_OUT=str(tmp_path / "artifacts"), OUT=str(tmp_path / "out"), SGLB_DEADLINE_S="400")
    return {"env": env, "tmp": tmp_path}


def run(lab: dict, *args: str, timeout: float = 60, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=ROOT, env={**lab["env"], **env}, capture_output=True,
                          text=True, timeout=timeout)


def test_help(lab):
    r = run(lab, "--help")
    assert r.returncode == 0 and "SGLB_DEADLINE_S" in r.stdout and "lab-line-gpu-suite-<date>.json" in r.stdout


@pytest.mark.parametrize(("value", "why"), [("abc", "expected whole seconds"), ("60", "below 120 s")])
def test_bad_deadline(lab, value, why):
    r = run(lab, SGLB_DEADLINE_S=value)
    assert r.returncode == 2 and f"SGLB_DEADLINE_S={value}" in r.stdout and why in r.stdout


def test_refuses_to_empty_a_dangerous_out_dir(lab):
    r = run(lab, SGLB_OUT="/")
    assert r.returncode == 2 and "refusing to empty it" in r.stdout


def test_needs_two_gpus(lab):
    r = run(lab, FAKE_GPUS="1")
    assert r.returncode == 3 and "needs >= 2 GPUs, nvidia-smi lists 1" in r.stdout


def test_needs_the_model_pair(lab):
    r = run(lab, SGLB_LAB_DRAFT=str(lab["tmp"] / "nowhere"))
    assert r.returncode == 3 and f"SGLB_LAB_DRAFT={lab['tmp'] / 'nowhere'}: no config.json" in r.stdout


def test_needs_the_stack_on_pythonpath(lab):
    r = run(lab, SGLB_SITE=str(lab["tmp"] / "empty-site"))
    assert r.returncode == 3 and "not importable: sglang, flashinfer" in r.stdout


def test_needs_pytest_or_its_wheels(lab, tmp_path):
    venv = tmp_path / "nopytest"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    r = run(lab, SGLB_PYTHON=str(venv / "bin" / "python"), SGLB_PYTEST_WHEELS=str(tmp_path / "no-wheels"))
    assert r.returncode == 3 and "has no pytest" in r.stdout and "pluggy, iniconfig" in r.stdout


@pytest.mark.slow
def test_everything_failing_still_leaves_the_receipt_and_artifacts(lab):
    r = run(lab, timeout=400)
    out = lab["tmp"] / "out"
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
    names = sorted(p.name for p in out.iterdir())
    receipts = [n for n in names if n.startswith("lab-line-gpu-suite-") and n.endswith(".json")]
    assert len(receipts) == 1 and {"gpu-suite-junit.xml", "gpu-suite-pytest.log",
                                   "gpu-suite-artifacts.tar.gz"} <= set(names), names
    assert len(names) <= 8
    s = json.loads((out / receipts[0]).read_text())["summary"]
    assert s["tests_failed"] > 0 and s["passed"] is False and s["machine"] == "2x NVIDIA H200"
    assert s["fusion_in_verify"] is None and s["greedy_equal"] is None
    with tarfile.open(out / "gpu-suite-artifacts.tar.gz") as t:
        members = {Path(m).relative_to("artifacts").as_posix() for m in t.getnames() if m != "artifacts"}
    assert {"facts.json", "progress.log", "logs/server_A.log", "logs/server_B.log", "logs/server_C.log",
            "dist/dist-rank0.log", "gpu-suite-pytest.log"} <= members, members
    facts = json.loads((lab["tmp"] / "artifacts" / "facts.json").read_text())
    for arm in "ABC":
        assert "launch_error" in facts["arms"][arm], facts["arms"][arm]
        assert facts["arms"][arm]["teardown_check"]["session_gone"] is True
    log = (out / "gpu-suite-pytest.log").read_text()
    assert "server did not start" in log and "No module named sglang.launch_server" in log
