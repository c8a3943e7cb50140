"""What the qualify tests of the TP=1 GPU suites (test/gpu/hostile, test/gpu/userpath, test/gpu/soak) share; no
tests here.

The GPU lab the runner tests (test_hostile_runner, test_userpath_runner, test_soak_runner) run benchmark/lab/*.sh
on: a stand-in `nvidia-smi` (one idle H200), a stand-in `sglang` package whose launch_server is a fake server, the
lab pair's generator and the runner's environment; shellcheck on a runner. The admin routes as sglang's
http_server.py declares them (test_hostile_runner's stand-in serves them, test_hostile_verdict reads them). The
receipt CLIs called as the runners call them, with what they read of this machine stubbed (test_hostile_receipt,
test_userpath_receipt, test_soak_receipt).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from sglang_blackwell import receipts
from sglang_blackwell.box import nvidia_smi as nvidia
from sglang_blackwell.qualify import suite_receipt as sr

from .test_gpu_suite_receipt import VERSIONS

ROOT = Path(__file__).resolve().parents[3]

MACHINE = {"gpu_name": "NVIDIA H200", "gpu_count": 1, "capability": "9.0", "links": None}

# two admin endpoints as sglang's http_server.py declares them (the hostile suite reads its admin routes from there)
ADMIN_ROUTES = '''
@app.api_route("/flush_cache", methods=["GET", "POST"])
@auth_level(AuthLevel.ADMIN_OPTIONAL)
async def flush_cache(): ...

@app.post("/update_weights_from_disk")
@auth_level(AuthLevel.ADMIN_OPTIONAL)
async def update_weights_from_disk(obj): ...
'''

FAKE_SMI = """#!/bin/bash
# stand-in nvidia-smi: one idle H200 (FAKE_SMI_GPUS=0: none)
if [ "${FAKE_SMI_GPUS:-1}" = 0 ]; then exit 0; fi
case "$*" in
  -L) echo "GPU 0: NVIDIA H200 (UUID: GPU-0)" ;;
  *--query-gpu=index*) echo 0 ;;
  *--query-gpu=memory.used*) echo 0 ;;
  *--query-gpu=name,compute_cap*) echo "NVIDIA H200, 9.0" ;;
  *--query-compute-apps*) ;;
  *) echo "fake nvidia-smi: $*" ;;
esac
"""


def lab_pair_generator() -> ModuleType:
    """benchmark/models/gen_lab_pair.py, imported."""
    spec = importlib.util.spec_from_file_location("gen_lab_pair", ROOT / "benchmark" / "models" / "gen_lab_pair.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gen_lab_pair", mod)  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def runner_env(tmp_path: Path, target: Path, draft: Path, **more: str) -> dict[str, str]:
    """A runner's environment: this one without its SGLB_, PYTEST_ and NCCL_ settings, the stand-in nvidia-smi
    (FAKE_SMI, written to tmp_path/bin) first on PATH, the bundle in tmp_path/site, the lab pair at target and
    draft, the suite's artifacts in tmp_path/artifacts, the runner's output in tmp_path/out, 300 s, and `more`."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(FAKE_SMI)
    (bin_dir / "nvidia-smi").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLB_", "PYTEST_", "NCCL_"))}
    env.update(PATH=f"{bin_dir}:{env['PATH']}", SGLB_SITE=str(tmp_path / "site"), SGLB_PYTHON=sys.executable,
               SGLB_LAB_TARGET=str(target), SGLB_LAB_DRAFT=str(draft), SGLB_OUT=str(tmp_path / "artifacts"),
               OUT=str(tmp_path / "out"), SGLB_DEADLINE_S="300", **more)
    return env


def stand_in_sglang(site: Path, fake_server: Path, http_server: str | None = None) -> None:
    """A `sglang` 0.5.14 in `site` whose launch_server runs `fake_server`, with its dist-info (`sglang-blackwell
    serve` reads the installed version) and, where given, the text of its srt/entrypoints/http_server.py."""
    (site / "sglang").mkdir(parents=True)
    (site / "sglang" / "__init__.py").write_text("")
    (site / "sglang" / "launch_server.py").write_text(
        f"import runpy\nrunpy.run_path({str(fake_server)!r}, run_name='__main__')\n")
    if http_server is not None:
        (site / "sglang" / "srt" / "entrypoints").mkdir(parents=True)
        (site / "sglang" / "srt" / "entrypoints" / "http_server.py").write_text(http_server)
    (site / "sglang-0.5.14.dist-info").mkdir()
    (site / "sglang-0.5.14.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\n"
                                                               "Version: 0.5.14\n")


def stub_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a receipt CLI reads of this machine, stubbed: no installed stack, VERSIONS, one H200 (MACHINE)."""
    monkeypatch.setattr(sr, "installed_stack", lambda: {})
    monkeypatch.setattr(receipts, "collect_versions", lambda: VERSIONS)
    monkeypatch.setattr(nvidia, "machine", lambda: MACHINE)


def run_cli(main: Callable[[list[str]], int], junit: Path, facts: Path, out: Path,
            pytest_rc: str | None = None) -> int:
    """A receipt CLI's main, called as its runner calls it."""
    rc = [] if pytest_rc is None else ["--pytest-rc", pytest_rc]
    return main(["--junit", str(junit), "--facts", str(facts), "--out", str(out), *rc])


def receipt_cli(main: Callable[[list[str]], int], junit: Path, facts: Path, out: Path, kind: str,
                pytest_rc: str) -> tuple[int, Path]:
    """run_cli, then the one `kind` receipt it wrote into out: its exit code and the receipt's path."""
    rc = run_cli(main, junit, facts, out, pytest_rc)
    (path,) = out.glob(f"{kind}-*.json")
    return rc, path


def cut_short(main: Callable[[list[str]], int], tmp_path: Path, kind: str) -> tuple[int, dict]:
    """main after a run killed at its limit (pytest rc 124) before the JUnit XML or the facts were written: its
    exit code, and the `kind` receipt it wrote all the same (into tmp_path/cut)."""
    rc, path = receipt_cli(main, tmp_path / "none.xml", tmp_path / "none.json", tmp_path / "cut", kind, "124")
    return rc, json.loads(path.read_text())


def assert_shellcheck_clean(script: Path) -> None:
    """shellcheck --severity=style on a lab runner and the lib.sh beside it; a skip where shellcheck cannot be had
    (the tests that call this are marked `network`: it comes from PyPI)."""
    if str(ROOT / "test") not in sys.path:
        sys.path.insert(0, str(ROOT / "test"))
    from support.tools import SHELLCHECK, ToolUnavailable, pip_tool

    try:
        exe = pip_tool(*SHELLCHECK)
    except ToolUnavailable as e:
        pytest.skip(str(e))
    r = subprocess.run([str(exe), "--severity=style", str(script), str(script.parent / "lib.sh")],
                       capture_output=True, text=True, timeout=120)
    assert (r.returncode, r.stdout + r.stderr) == (0, "")
