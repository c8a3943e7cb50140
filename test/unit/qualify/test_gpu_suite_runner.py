"""benchmark/lab/gpu_suite.sh, the one-call lab runner of the GPU suite, on a CPU machine.

The GPUs are simulated by a stand-in `nvidia-smi` on PATH (2x H200, idle) and the serving stack by stand-in
`sglang`, `flashinfer`, `torch` packages: the runner's checks and messages are real. End to end, the real suite
runs under the real pytest against test/support/fake_lab_server.py (a real HTTP server started as
`python -m sglang.launch_server` with the suite's flags, in its own session, logging and profiling like SGLang
0.5.14 on the lab pair): it must pass, catch injected defects (FAKE_LAB_BREAK) by the right tests, skip what
the deadline cannot fit, and when no server can start at all still leave the receipt, the JUnit XML, the log
and the artifacts tarball and exit non-zero. The two-process check needs a real GPU; it fails here (CPU
torch) and is deselected where a test wants a clean pass.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "benchmark" / "lab" / "gpu_suite.sh"
FAKE_SERVER = ROOT / "test" / "support" / "fake_lab_server.py"

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
    for pkg in ("sglang", "flashinfer"):  # torch: the test environment's CPU build (the accept-length check needs it)
        (site / pkg).mkdir(parents=True)
        (site / pkg / "__init__.py").write_text("")
    pair = tmp_path / "lab"
    for d in ("target", "draft"):
        (pair / d).mkdir(parents=True)
        (pair / d / "config.json").write_text(json.dumps({"num_hidden_layers": 10, "hidden_size": 7168}))
    # what gen_lab_pair.py records of the pair (its defaults): the suite's expected accept length follows from it
    (pair / "target" / "lab_pair.json").write_text(json.dumps({"preset": "lab", "seed": 0}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLB_", "PYTEST_"))}
    env.update(PATH=f"{bin_dir}:{env['PATH']}", SGLB_SITE=str(site), SGLB_PYTHON=sys.executable,
               SGLB_LAB_TARGET=str(pair / "target"), SGLB_LAB_DRAFT=str(pair / "draft"),
               SGLB_OUT=str(tmp_path / "artifacts"), OUT=str(tmp_path / "out"), SGLB_DEADLINE_S="400")
    return {"env": env, "tmp": tmp_path, "site": site}


@pytest.fixture
def fake_lab(lab: dict) -> dict:
    """The lab with a stand-in server: `python -m sglang.launch_server` runs test/support/fake_lab_server.py."""
    (lab["site"] / "sglang" / "launch_server.py").write_text(
        f"import runpy\nrunpy.run_path({str(FAKE_SERVER)!r}, run_name='__main__')\n")
    return lab


def outcomes(lab: dict) -> dict[str, str]:
    from sglang_blackwell.qualify.suite_receipt import parse_junit

    return {c["name"].split(".")[-1]: c["outcome"] for c in
            parse_junit(lab["tmp"] / "out" / "gpu-suite-junit.xml")["cases"]}


def receipt(lab: dict) -> dict:
    (path,) = (lab["tmp"] / "out").glob("lab-line-gpu-suite-*.json")
    return json.loads(path.read_text())


def run(lab: dict, *args: str, timeout: float = 60, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=ROOT, env={**lab["env"], **env}, capture_output=True,
                          text=True, timeout=timeout)


def test_help(lab):
    r = run(lab, "--help")
    assert r.returncode == 0 and "SGLB_DEADLINE_S" in r.stdout and "lab-line-gpu-suite-<date>.json" in r.stdout
    assert r.stdout.splitlines()[-1].startswith("Exit code") and "#" not in r.stdout


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


def test_layer_count_is_checked_against_the_pair(lab):
    target = lab["env"]["SGLB_LAB_TARGET"]
    r = run(lab, SGLB_LAB_LAYERS="61")  # the fixture's pair has 10 layers: the wrong pair for a 61-layer run
    assert r.returncode == 3 and f"SGLB_LAB_LAYERS=61, but {target}/config.json says num_hidden_layers=10" in r.stdout
    r = run(lab, SGLB_LAB_LAYERS="sixty")
    assert r.returncode == 2 and "SGLB_LAB_LAYERS=sixty: expected a whole number" in r.stdout


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


@pytest.mark.slow
def test_fake_lab_passes_end_to_end(fake_lab):
    r = run(fake_lab, "-k", "not dist", timeout=400)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    res = outcomes(fake_lab)
    assert len(res) == 20 and set(res.values()) == {"passed"}, res
    s = receipt(fake_lab)["summary"]
    assert s["passed"] is True and s["tests_failed"] == 0 and s["tests_passed"] == 20
    assert s["fusion_in_verify"] is True and s["greedy_equal"] is True
    assert s["fused_ar_per_verify"] == s["expected_fused_ar_per_verify"] == 19
    assert s["accept_len_fusion_on"] == s["accept_len_fusion_off"] == round(8 * 64 / (8 * 21), 4)
    assert s["teardown_clean"] is True
    facts = json.loads((fake_lab["tmp"] / "artifacts" / "facts.json").read_text())
    a = facts["arms"]["A"]
    assert a["profile"]["method"] == "correlation" and a["profile"]["rank1_fused_per_verify"] == [19] * 9
    assert a["log_checks"]["workspace"]["ok"] and len(a["log_checks"]["workspace"]["lines"]) == 4
    assert facts["arms"]["B"]["profile"]["by_mode"]["TARGET_VERIFY"] == {"steps": 5, "fused": 0, "nccl_ar": 5 * 21}
    with tarfile.open(fake_lab["tmp"] / "out" / "gpu-suite-artifacts.tar.gz") as t:
        names = t.getnames()
    assert any(n.startswith("artifacts/traces/A/A-") and n.endswith("-TP-0.trace.json.gz") for n in names)
    assert not any("-TP-1.trace" in n for n in names)  # rank 1 is counted on the lab, not carried back


@pytest.mark.slow
def test_fake_lab_passes_on_the_61_layer_pair(fake_lab):
    # the target-shaped pair (gen_lab_pair.py --preset kimi61: 61 layers, hidden 7168) with SGLB_LAB_LAYERS=61:
    # 2 x 61 - 1 = 121 fused kernels per verify step on both ranks, the verify time across the two ranks' traces
    for d in ("target", "draft"):
        (fake_lab["tmp"] / "lab" / d / "config.json").write_text(json.dumps({"num_hidden_layers": 61,
                                                                             "hidden_size": 7168}))
    r = run(fake_lab, "-k", "not dist", timeout=400, SGLB_LAB_LAYERS="61")
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    s = receipt(fake_lab)["summary"]
    assert s["passed"] is True and s["tests_passed"] == 20
    assert s["fused_ar_per_verify"] == s["expected_fused_ar_per_verify"] == 121
    facts = json.loads((fake_lab["tmp"] / "artifacts" / "facts.json").read_text())
    assert facts["config"]["layers"] == 61
    prof = facts["arms"]["A"]["profile"]
    assert prof["rank_verdicts"]["1"]["ok"] and prof["rank1_fused_per_verify"] == [121] * 9
    assert prof["verify_ranks"]["ranks"] == 2 and prof["verify_ranks"]["fused_per_verify"] == 121
    assert facts["arms"]["B"]["profile"]["verify_ranks"]["fused_per_verify"] == 0


@pytest.mark.slow
def test_fake_lab_defects_are_caught_by_the_right_tests(fake_lab):
    r = run(fake_lab, "-k", "not dist", timeout=400, FAKE_LAB_BREAK="fused,workspace,greedy")
    assert r.returncode == 1
    failed = {k for k, v in outcomes(fake_lab).items() if v != "passed"}
    assert failed == {"test_2_arm_a::test_fused_allreduce_in_every_verify_step",
                      "test_2_arm_a::test_workspace_sized_for_the_verify_graphs",
                      "test_4_arm_c::test_workspace_sized_for_the_decode_graphs",
                      "test_4_arm_c::test_outputs_follow_the_bigram_map",
                      "test_5_across_arms::test_greedy_equal_speculation_on_vs_off"}, failed
    log = (fake_lab["tmp"] / "out" / "gpu-suite-pytest.log").read_text()
    assert "launched the fused kernel 18 times, expected 19" in log
    assert "max_token_num=2048" in log and "prompt 0 differs at output position 40" in log
    s = receipt(fake_lab)["summary"]
    assert s["fusion_in_verify"] is False and s["greedy_equal"] is False and s["passed"] is False


@pytest.mark.slow
def test_what_the_deadline_cannot_fit_is_skipped(fake_lab):
    r = run(fake_lab, "-k", "not dist", timeout=400, SGLB_DEADLINE_S="140")
    assert r.returncode == 0, r.stdout[-3000:]
    res = outcomes(fake_lab)
    assert {k for k, v in res.items() if v == "passed"} == {
        "test_4_arm_c::test_server_is_the_arm", "test_4_arm_c::test_workspace_sized_for_the_decode_graphs",
        "test_4_arm_c::test_outputs_follow_the_bigram_map", "test_4_arm_c::test_teardown_complete"}, res
    assert {v for k, v in res.items() if not k.startswith("test_4")} == {"skipped"}
    assert "deadline:" in (fake_lab["tmp"] / "out" / "gpu-suite-pytest.log").read_text()
    s = receipt(fake_lab)["summary"]
    assert s["passed"] is False and s["tests_skipped"] == 16


def test_rank_worker_refuses_without_the_no_multicast_environment(tmp_path):
    worker = ROOT / "test" / "gpu" / "labline" / "labline_dist_worker.py"
    env = {k: v for k, v in os.environ.items() if k not in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST",
                                                            "NVSHMEM_DISABLE_NVLS")}
    res = tmp_path / "r.json"
    r = subprocess.run([sys.executable, str(worker), "--rank", "0", "--world", "2", "--port", "1", "--result",
                        str(res), "--hidden", "7168"], env={**env, "NCCL_NVLS_ENABLE": "1"}, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 3
    out = json.loads(res.read_text())
    assert not out["ok"] and "no-multicast environment" in out["error"] and "NCCL_NVLS_ENABLE" in out["error"]
