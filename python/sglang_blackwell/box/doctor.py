"""`sglang-blackwell doctor`: what works on this box and why not. Every failing or warning item names its fix.

The items, in this order, with stable ids (the JSON lists all of them on every machine, `n/a` where they
cannot apply): gpus, driver, torch, nccl_version, fork_builds, flashinfer_trtllm_comm, kernel_sass, p2p,
multicast, links, iommu, acs, nccl_env, pcie_ipc, allreduce_paths, spec_verify. The last line says whether the
box is ready to serve this fork: `overall: ready` (exit 0), `overall: ready, with N warning(s)` (exit 0) or
`overall: not ready (N failing: ...)` (exit 1). What a box needs to be ready fails its item when missing: an
NVIDIA GPU (`gpus`: NVML, and what nvidia-smi, /proc/driver/nvidia and torch.cuda say), torch, sglang and
flashinfer-python. Without a GPU it still runs, says so and marks the GPU-only items `n/a`. Software items look
at the environment doctor runs in; `--python` picks the environment whose NCCL startup hook `nccl_env` inspects.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..limits import tp_problem
from ..paths import output_problem
from ..receipts import make_receipt, validate_receipt
from . import gpu_presence
from .doctor_allreduce import check_allreduce, check_nccl_env, check_pcie_ipc
from .doctor_check import CHECK_IDS, CHECK_KEYS, STATUSES, Check, Context, item
from .doctor_hardware import check_acs, check_driver, check_gpus, check_iommu, check_links, check_multicast, check_p2p
from .doctor_stack import (
    check_fork_builds,
    check_kernel_sass,
    check_nccl_version,
    check_spec_verify,
    check_torch,
    check_trtllm,
)
from .stackinfo import dist_facts, torch_facts
from .topology import Topology, detect

SCHEMA = "sglang-blackwell/doctor/1"
OVERALL = {"ok": "ready", "warn": "ready", "fail": "not ready"}  # summary.status -> the last line's verdict


@dataclass
class Report:
    checks: list[Check]
    topology: Topology
    versions: dict[str, Any]
    tp: int | None

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if c.status == "fail"]

    def status(self) -> str:
        return next((s for s in ("fail", "warn") if any(c.status == s for c in self.checks)), "ok")


CHECKS: tuple[Callable[[Context], Check], ...] = (
    check_gpus, check_driver, check_torch, check_nccl_version, check_fork_builds, check_trtllm,
    check_kernel_sass, check_p2p, check_multicast, check_links, check_iommu, check_acs, check_nccl_env,
    check_pcie_ipc, check_allreduce, check_spec_verify)


def check_arguments(*, tp: int | None = None, python: str | None = None, out: str | None = None) -> None:
    """doctor's options, before any check runs: bad input is exit 2 naming the option, not a report."""
    if tp is not None and tp < 1:
        raise UserError(f"--tp: expected a positive integer (the tensor-parallel size to plan for), got {tp}")
    if tp is not None and (why := tp_problem(tp)) is not None:
        raise UserError(f"--tp: {why} (limits.MAX_TP), got {tp}")
    if python is not None and shutil.which(python) is None:
        raise UserError(f"--python {python}: no such interpreter" + ("" if os.sep in python else " on PATH"))
    problem = output_problem(Path(out)) if out is not None else None
    if problem:
        raise UserError(f"--out {out}: {problem}")


def run_doctor(*, python: str | None = None, tp: int | None = None, topology: Topology | None = None,
               progress: Callable[[str], None] | None = None) -> Report:
    check_arguments(tp=tp, python=python)
    if progress:
        progress("topology ...")
    topo = topology if topology is not None else detect()
    if progress:
        progress("torch ...")
    ctx = Context(topo=topo, torch=torch_facts(), sglang=dist_facts("sglang"),
                  flashinfer=dist_facts("flashinfer-python"), python=python, tp=tp, progress=progress)
    checks = []
    for cid, fn in zip(CHECK_IDS, CHECKS, strict=True):
        try:
            checks.append(fn(ctx))
        except Exception as e:  # one odd machine must not kill the whole report: say which item broke
            checks.append(item(cid, "warn", f"this check crashed: {type(e).__name__}: {e}",
                               "report it with the output of `sglang-blackwell doctor --json`"))
    versions = {"sglang": ctx.sglang["version"] if ctx.sglang else None,
                "flashinfer": ctx.flashinfer["version"] if ctx.flashinfer else None,
                "torch": ctx.torch.get("version"), "cuda": ctx.torch.get("cuda"),
                "nccl": ctx.torch.get("nccl"), "driver": topo.driver}
    return Report(checks, topo, versions, tp or topo.gpu_count or None)


# ---- output -----------------------------------------------------------------------------------------------
def to_receipt(r: Report) -> dict[str, Any]:
    """The receipts envelope, kind "doctor": summary (small, comparable), then checks and topology."""
    summary = {"status": r.status(), "counts": {s: sum(c.status == s for c in r.checks) for s in STATUSES},
               "gpus": r.topology.gpu_count, "capability": "/".join(r.topology.capabilities()) or None,
               "topology_class": r.topology.topology_class(),
               "failing": [c.id for c in r.checks if c.status == "fail"],
               "warnings": [c.id for c in r.checks if c.status == "warn"]}
    return make_receipt("doctor", summary, tp=r.tp, machine=r.topology.machine(), versions=r.versions,
                        doctor_schema=SCHEMA, checks=[asdict(c) for c in r.checks],
                        topology=r.topology.to_dict())


def validate_doctor(receipt: dict[str, Any]) -> list[str]:
    """Problems with a doctor receipt's shape (empty: it matches SCHEMA)."""
    probs = validate_receipt(receipt)
    if receipt.get("kind") != "doctor":
        probs.append(f"kind is {receipt.get('kind')!r}, expected 'doctor'")
    if receipt.get("doctor_schema") != SCHEMA:
        probs.append(f"doctor_schema is {receipt.get('doctor_schema')!r}, expected {SCHEMA!r}")
    for k in ("status", "counts", "gpus", "capability", "topology_class", "failing", "warnings"):
        if k not in receipt.get("summary", {}):
            probs.append(f"summary lacks {k!r}")
    checks = receipt.get("checks", [])
    ids = [c.get("id") for c in checks]
    if tuple(ids) != CHECK_IDS:
        probs.append(f"check ids {ids} != {list(CHECK_IDS)}")
    for c in checks:
        if tuple(c) != CHECK_KEYS:
            probs.append(f"check {c.get('id')}: keys {list(c)} != {list(CHECK_KEYS)}")
        if c.get("status") not in STATUSES:
            probs.append(f"check {c.get('id')}: status {c.get('status')!r}")
        if c.get("status") in ("fail", "warn") and not c.get("fix"):
            probs.append(f"check {c.get('id')}: {c['status']} without a fix")
    for k in ("schema", "source", "class", "gpus", "links"):
        if k not in receipt.get("topology", {}):
            probs.append(f"topology lacks {k!r}")
    return probs


def format_report(r: Report) -> str:
    mark = {"ok": " ok ", "info": "info", "warn": "WARN", "fail": "FAIL", "n/a": "n/a "}
    t = r.topology
    lines = [f"sglang-blackwell doctor: {t.summary() if t.gpu_count else _no_gpu_headline(r)}"]
    if t.gpu_count == 0:
        lines.append("GPU items are n/a")
    w = max(len(c.id) for c in r.checks)
    pad = " " * (w + 9)
    for c in r.checks:
        lines.append(f"[{mark[c.status]}] {c.id.ljust(w)}  {c.detail}")
        if c.fix and c.status in ("warn", "fail"):
            lines.append(f"{pad}fix: {c.fix}")
        if c.id == "links":
            lines += [f"{pad}{row}" for row in c.data.get("matrix", [])]
    lines.append(f"overall: {overall(r)}")
    return "\n".join(lines)


def _no_gpu_headline(r: Report) -> str:
    s = next((c.data.get("sightings") for c in r.checks if c.id == "gpus"), None)
    seen = gpu_presence.gpus_seen(s) if s else {}
    if seen:
        return f"NVML sees no GPU, but {', '.join(f'{k} sees {n}' for k, n in seen.items())} (the gpus item says why)"
    return "no NVIDIA GPU on this machine (the gpus item says what was asked)"


def overall(r: Report) -> str:
    """The verdict in words, from the same status as the receipt's summary.status (fail / warn / ok)."""
    status = r.status()
    if status == "fail":
        return f"{OVERALL[status]} ({len(r.failed)} failing: {', '.join(c.id for c in r.failed)})"
    warned = [c.id for c in r.checks if c.status == "warn"]
    return f"{OVERALL[status]}, with {len(warned)} warning(s): {', '.join(warned)}" if warned else OVERALL[status]
