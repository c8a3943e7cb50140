"""benchmark/lab/hostile.sh on a CPU machine: its --help, the settings it refuses (exit 2) and the machine states it
refuses to run on (exit 3), each with the line that says why, before anything is started or emptied; and shellcheck
on it. The GPU is a stand-in `nvidia-smi` on PATH (one idle H200, or none listed)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TEST_ROOT = Path(__file__).resolve().parents[2]
if str(TEST_ROOT) not in sys.path:
    sys.path.insert(0, str(TEST_ROOT))

from support.tools import SHELLCHECK, ToolUnavailable, pip_tool  # noqa: E402

ROOT = TEST_ROOT.parent
SCRIPT = ROOT / "benchmark" / "lab" / "hostile.sh"
FAKE_SMI = """#!/bin/bash
# stand-in nvidia-smi: one idle H200 (FAKE_SMI_GPUS=0: none)
if [ "${FAKE_SMI_GPUS:-1}" = 0 ]; then exit 0; fi
case "$*" in
  -L) echo "GPU 0: NVIDIA H200 (UUID: GPU-0)" ;;
  *--query-gpu=index*) echo 0 ;;
  *--query-gpu=memory.used*) echo 0 ;;
  *--query-compute-apps*) ;;
  *) echo "fake nvidia-smi: $*" ;;
esac
"""


@pytest.fixture
def lab(tmp_path: Path) -> dict:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(FAKE_SMI)
    (bin_dir / "nvidia-smi").chmod(0o755)
    target, draft = tmp_path / "lab" / "target", tmp_path / "lab" / "draft"
    target.mkdir(parents=True)
    draft.mkdir()
    (target / "tokenizer.json").write_text("{}")
    (draft / "config.json").write_text("{}")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLB_", "PYTEST_", "NCCL_"))}
    env.update(PATH=f"{bin_dir}:{env['PATH']}", SGLB_SITE=str(tmp_path / "site"), SGLB_PYTHON=sys.executable,
               SGLB_LAB_TARGET=str(target), SGLB_LAB_DRAFT=str(draft), SGLB_OUT=str(tmp_path / "artifacts"),
               OUT=str(tmp_path / "out"), SGLB_DEADLINE_S="300", PYTHONPATH="")
    return {"env": env, "tmp": tmp_path}


def run(lab: dict, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=ROOT, env={**lab["env"], **env}, capture_output=True,
                          text=True, timeout=120)


def test_help_is_the_scripts_header(lab):
    r = run(lab, "--help")
    assert r.returncode == 0 and "lab-hostile-<date>.json" in r.stdout and "#" not in r.stdout
    assert "SGLB_DEADLINE_S (300" in r.stdout


@pytest.mark.parametrize(("env", "line"), [
    ({"SGLB_DEADLINE_S": "100"}, "SGLB_DEADLINE_S=100: below 150 s not even one server fits"),
    ({"SGLB_DEADLINE_S": "5m"}, "SGLB_DEADLINE_S=5m: expected whole seconds"),
    ({"SGLB_OUT": "/"}, "SGLB_OUT=/: refusing to empty it"),
], ids=["deadline too short", "deadline not seconds", "out is the root"])
def test_bad_settings_exit_2(lab, env, line):
    r = run(lab, **env)
    assert r.returncode == 2 and line in r.stdout, r.stdout + r.stderr
    assert not (lab["tmp"] / "out").exists()  # nothing was started or written


def test_outside_the_repository_root_exits_2(lab, tmp_path):
    r = subprocess.run(["bash", str(SCRIPT)], cwd=tmp_path, env=lab["env"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and "run from the sglang-blackwell repository root" in r.stdout


def test_a_machine_not_prepared_exits_3(lab):
    r = run(lab, FAKE_SMI_GPUS="0")
    assert r.returncode == 3 and "nvidia-smi lists no GPU" in r.stdout
    r = run(lab, SGLB_LAB_TARGET=str(lab["tmp"] / "nowhere"))
    assert r.returncode == 3 and "no tokenizer.json (generate the pair: python3 benchmark/models/gen_lab_pair.py" \
                                 in r.stdout
    r = run(lab, SGLB_LAB_DRAFT=str(lab["tmp"] / "nowhere"))
    assert r.returncode == 3 and "no config.json (generate the pair)" in r.stdout
    r = run(lab)  # the bundle is not installed in SGLB_SITE: no sglang to import
    assert r.returncode == 3 and "not importable: sglang" in r.stdout and "install the bundle" in r.stdout
    assert not (lab["tmp"] / "artifacts").exists()


@pytest.mark.network
def test_the_runner_is_shellcheck_clean():
    try:
        exe = pip_tool(*SHELLCHECK)
    except ToolUnavailable as e:
        pytest.skip(str(e))
    r = subprocess.run([str(exe), "--severity=style", str(SCRIPT), str(SCRIPT.parent / "lib.sh")],
                       capture_output=True, text=True, timeout=120)
    assert (r.returncode, r.stdout + r.stderr) == (0, "")
