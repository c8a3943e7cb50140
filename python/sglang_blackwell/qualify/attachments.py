"""What upstream's issue templates ask for, carried in the qualify pack so that a report can be filed as it is:

  check_env        `python -m sglang.check_env` (sgl-project/sglang .github/ISSUE_TEMPLATE/1-bug-report.yml:
                   "Issues without this will be closed")
  nvidia_smi_topo  `nvidia-smi topo -m` (NVIDIA/nccl .github/ISSUE_TEMPLATE/ISSUE.yaml: "GPU & Network")
  nccl_topo_dump   NCCL's topology as NCCL sees it, NCCL_TOPO_DUMP_FILE (the same template, "Share Your Debug
                   Logs"), written by NCCL (rank 0) at communicator init in the allreduce step

Each is a file in the output folder, listed in the receipt with its status: recorded, failed (the command ran
and failed: its output is kept, it says why) or unavailable (why it cannot be had here: no sglang, no
nvidia-smi, no GPU, the step did not run).
"""

from __future__ import annotations

import importlib.util
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .plan import Plan
from .runner import child_env, run_command

ISSUE_DIR = "issue"
CHECK_ENV_FILE = f"{ISSUE_DIR}/check_env.txt"
TOPO_FILE = f"{ISSUE_DIR}/nvidia-smi-topo.txt"
NCCL_TOPO_FILE = "allreduce/nccl-topo.xml"
NCCL_TOPO_ENV = "NCCL_TOPO_DUMP_FILE"
TIMEOUT_S = {"check_env": 300.0, "nvidia_smi_topo": 60.0}
ASKED_BY = {
    "check_env": "sgl-project/sglang bug report template (Environment)",
    "nvidia_smi_topo": "NVIDIA/nccl issue template (GPU & Network)",
    "nccl_topo_dump": "NVIDIA/nccl issue template (Share Your Debug Logs: NCCL_TOPO_DUMP_FILE)",
}


@dataclass
class Attachment:
    name: str
    status: str  # recorded | failed | unavailable
    file: str | None  # relative to the output folder
    reason: str | None = None
    command: list[str] | None = None
    rc: int | None = None
    asked_by: str = ""

    def __post_init__(self):
        self.asked_by = self.asked_by or ASKED_BY[self.name]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _run(plan: Plan, name: str, rel: str, cmd: list[str], env: dict[str, str]) -> Attachment:
    path = plan.out / rel
    o = run_command(cmd, env=env, cwd=None, log_path=path, timeout_s=TIMEOUT_S[name], grace_s=5.0, echo=False)
    if o.rc == 0 and not o.timed_out and not o.interrupted:
        return Attachment(name, "recorded", rel, command=cmd, rc=0)
    if o.interrupted:
        why = f"interrupted ({o.interrupted})"
    elif o.timed_out:
        why = f"timed out after {TIMEOUT_S[name]:.0f} s"
    else:
        last = next((ln.strip() for ln in reversed(o.tail) if ln.strip()), "")
        why = f"exited with {o.rc}" + (f": {last[:300]}" if last else "")
    return Attachment(name, "failed", rel, f"{why} (its output is in the file)", cmd, o.rc)


def check_env(plan: Plan) -> Attachment:
    env = child_env(gpu=False)
    if importlib.util.find_spec("sglang") is None:
        return Attachment("check_env", "unavailable", None, f"sglang is not installed in {plan.python}")
    return _run(plan, "check_env", CHECK_ENV_FILE, [plan.python, "-m", "sglang.check_env"], env)


def nvidia_smi_topo(plan: Plan) -> Attachment:
    env = child_env(gpu=False)
    exe = shutil.which("nvidia-smi", path=env.get("PATH"))
    if exe is None:
        why = "nvidia-smi is not on PATH" + ("" if plan.gpus else " (no NVIDIA driver here: no GPU)")
        return Attachment("nvidia_smi_topo", "unavailable", None, why)
    return _run(plan, "nvidia_smi_topo", TOPO_FILE, [exe, "topo", "-m"], env)


def before_steps(plan: Plan) -> list[Attachment]:
    """check_env and nvidia-smi topo -m: cheap, and first, so that an interrupted run still carries them."""
    (plan.out / ISSUE_DIR).mkdir(parents=True, exist_ok=True)
    out = [check_env(plan), nvidia_smi_topo(plan)]
    for a in out:
        plan.progress(f"issue files: {a.name}: {a.status}" + (f" ({a.file})" if a.file else "")
                      + (f": {a.reason}" if a.reason else ""))
    return out


def nccl_topo_env(plan: Plan, environ: dict[str, str]) -> dict[str, str]:
    """The allreduce step's NCCL_TOPO_DUMP_FILE: ours in the output folder, unless the user set one."""
    return {} if environ.get(NCCL_TOPO_ENV) else {NCCL_TOPO_ENV: str(plan.out / NCCL_TOPO_FILE)}


def nccl_topo_dump(plan: Plan, step: dict[str, Any] | None, environ: dict[str, str]) -> Attachment:
    """After the allreduce step: the dump NCCL wrote, or why there is none. step: its StepResult as a dict."""
    dest = plan.out / NCCL_TOPO_FILE
    users = environ.get(NCCL_TOPO_ENV)
    if users and Path(users).is_file() and not dest.exists():  # the user's own path: a copy in the pack
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(users, dest)
    if dest.is_file() and dest.stat().st_size > 0:
        note = f"copied from the user's {NCCL_TOPO_ENV}={users}" if users else None
        return Attachment("nccl_topo_dump", "recorded", NCCL_TOPO_FILE, note)
    if step is None or step.get("verdict") == "skipped" or step.get("rc") is None:
        why = (step or {}).get("reason") or "not run"
        return Attachment("nccl_topo_dump", "unavailable", None, f"the allreduce step did not run NCCL: {why}")
    return Attachment("nccl_topo_dump", "unavailable", None,
                      f"bench allreduce ran (exit {step.get('rc')}) but NCCL wrote no {NCCL_TOPO_ENV}: NCCL "
                      "writes it when rank 0 creates a communicator, so none was created"
                      + (f" ({step['reason']})" if step.get("reason") else ""))


def summary(attachments: list[Attachment]) -> dict[str, dict[str, Any]]:
    return {a.name: {"status": a.status, "file": a.file, "reason": a.reason} for a in attachments}
