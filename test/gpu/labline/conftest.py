"""Fixtures of the lab-line GPU suite (marker `gpu`; run it with benchmark/lab/gpu_suite.sh on the GPU lab).

Three server launches in all, one after the other, each measured completely and taken down before the next:
`arm_a`, `arm_b`, `arm_c` (session scope, see labline_arms.ARMS) are evaluated on first use, in file order
(test_2_arm_a, test_3_arm_b, test_4_arm_c); test_5_across_arms compares what they recorded. `dist_run` is the
standalone two-process check (P6 symm-mem, P5 workspace bytes). Whatever would not fit in SGLB_DEADLINE_S is
skipped, not overrun. SIGTERM/SIGHUP unwind like Ctrl-C, so a running server is always taken down.
Everything measured goes to $SGLB_OUT/facts.json as soon as it is known (the receipt is built from it).
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from labline_env import Facts, LabConfig, model_config

if TYPE_CHECKING:
    from suite_env import Deadline, Progress

HERE = Path(__file__).resolve().parent


@dataclass
class Lab:
    cfg: LabConfig
    deadline: Deadline
    facts: Facts
    progress: Progress
    target: dict[str, Any]


@pytest.fixture(scope="session")
def lab() -> Lab:
    from sglang_blackwell.box import nvidia_smi as nvidia

    cfg = LabConfig.from_env()
    gpus = nvidia.memory_used_mib()
    if len(gpus) < 2:
        pytest.skip(f"needs >= 2 CUDA GPUs (nvidia-smi lists {len(gpus)})")
    for mod in ("sglang", "flashinfer", "torch"):
        if importlib.util.find_spec(mod) is None:
            pytest.skip(f"{mod} is not importable (PYTHONPATH must hold the patched lab-line stack)")
    for what, d in (("SGLB_LAB_TARGET", cfg.target), ("SGLB_LAB_DRAFT", cfg.draft)):
        if not (d / "config.json").is_file():
            pytest.skip(f"{what}={d}: no config.json (generate the lab pair: benchmark/models/gen_lab_pair.py)")
    cfg.out.mkdir(parents=True, exist_ok=True)
    progress = cfg.progress()
    facts = Facts(cfg.out / "facts.json", cfg)
    facts.set("gpus_before_mib", gpus)
    progress(f"lab-line GPU suite: target {cfg.target}, draft {cfg.draft}, out {cfg.out}, deadline "
             f"{cfg.deadline_s:.0f} s; GPU memory used before: {gpus} MiB")
    return Lab(cfg, cfg.deadline(), facts, progress, model_config(cfg.target))


@pytest.fixture(scope="session", autouse=True)
def _signals_unwind():
    from sglang_blackwell.procs import signals_as_interrupt

    with signals_as_interrupt():
        yield


def _left_behind(lab: Lab) -> str | None:
    """Why the GPUs are not clean for the next server: an earlier server or rank that could not be taken down."""
    for name, arm in lab.facts.data["arms"].items():
        if arm.get("teardown_error"):
            return f"arm {name} could not be taken down: {arm['teardown_error']}"
    for r in ((lab.facts.data.get("dist") or {}).get("report") or {}).get("ranks", []):
        if not (r.get("teardown") or {}).get("group_gone", True):
            return f"rank {r['rank']} of the two-process check could not be taken down: {r['teardown']}"
    return None


def _arm(lab: Lab, name: str) -> dict[str, Any]:
    from labline_arms import ARMS, run_arm

    why = _left_behind(lab)
    if why:
        lab.facts.set_arm(name, {"name": name, "skipped": f"not launched: {why}"})
        pytest.skip(f"arm {name} not launched: {why}")
    rec = run_arm(ARMS[name], lab.cfg, lab.deadline, lab.progress)
    lab.facts.set_arm(name, rec)
    if rec.get("skipped"):
        pytest.skip(rec["skipped"])
    return rec


@pytest.fixture(scope="session")
def arm_a(lab: Lab) -> dict[str, Any]:
    return _arm(lab, "A")


@pytest.fixture(scope="session")
def arm_b(lab: Lab) -> dict[str, Any]:
    return _arm(lab, "B")


@pytest.fixture(scope="session")
def arm_c(lab: Lab) -> dict[str, Any]:
    return _arm(lab, "C")


DIST_TIMEOUT_S = 150.0  # imports ~10-20 s per rank, NCCL init, a few all-reduces, three workspaces
DIST_TIMEOUT_COLD_S = 330.0  # + FlashInfer's trtllm_comm JIT build (~150 s on the lab) when it is not prebuilt


def trtllm_comm_prebuilt() -> str | None:
    """Where a built FlashInfer trtllm_comm module is (AOT slot in the package, or the JIT cache), if any."""
    spec = importlib.util.find_spec("flashinfer")
    roots = [Path(p) / "data" / "aot" for p in (spec.submodule_search_locations or [])] if spec else []
    base = os.environ.get("FLASHINFER_WORKSPACE_BASE")
    if base:
        roots.append(Path(base))
    for root in roots:
        if root.is_dir():
            for hit in root.rglob("trtllm_comm*.so"):
                return str(hit)
    return None


@pytest.fixture(scope="session")
def dist_run(lab: Lab) -> dict[str, Any]:
    from labline_ranks import run_ranks

    left = lab.deadline.left()
    if left < 60:
        pytest.skip(f"deadline: {left:.0f} s left, the two-process check needs about 60 s")
    built = trtllm_comm_prebuilt()
    # a cold build here also serves the servers after (same JIT cache); leave them time to run
    timeout = min(DIST_TIMEOUT_S, left - 30) if built else min(DIST_TIMEOUT_COLD_S, max(60.0, left - 300))
    lab.facts.set("trtllm_comm_prebuilt", built)
    lab.progress(f"two-process check (symm-mem P6, workspace bytes P5), <= {timeout:.0f} s; FlashInfer "
                 f"trtllm_comm {'prebuilt: ' + built if built else 'NOT prebuilt: its first use compiles it'}")
    report = run_ranks(lab.cfg.python, HERE / "labline_dist_worker.py", 2,
                       ["--hidden", str(lab.target["hidden_size"])], env=lab.cfg.child_env(),
                       out_dir=lab.cfg.out / "dist", timeout_s=timeout, tag="dist")
    phases = [((r.get("result") or {}).get("phases") or {}) for r in report["ranks"]]
    symm = [p.get("symm_mem") or {} for p in phases]
    ws = [p.get("workspace") or {} for p in phases]
    bits = [s.get("bit_identical") for s in symm]
    lab.facts.set("dist", {
        "report": report,
        "symm_mem": {"bit_identical": None if not bits or None in bits else all(bits), "per_rank": symm},
        "workspace": {"measured_bytes": ws[0].get("measured_bytes") if ws else None, "per_rank": ws},
    })
    lab.progress(f"two-process check done in {report['wall_s']} s: return codes "
                 f"{[r['returncode'] for r in report['ranks']]}")
    return report
