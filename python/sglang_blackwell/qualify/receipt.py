"""qualify's one receipt (the receipts envelope, kind "qualify") and the pack that carries it with every step's
files."""

from __future__ import annotations

import contextlib
import fcntl
import os
import tarfile
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

from .. import leftovers
from ..errors import UserError
from ..paths import os_reason
from .attachments import Attachment
from .attachments import summary as attachment_summary
from .plan import STEPS, Plan, file_identity
from .steps import StepResult, _read_json, allreduce_tp

KIND = "qualify"
SCHEMA = "sglang-blackwell/qualify/1"
RECEIPT_NAME = "qualify.json"


def overall(results: list[StepResult]) -> str:
    """failed: a step failed; passed: every step ran and passed; partial: nothing failed, something skipped."""
    if any(r.verdict == "failed" for r in results):
        return "failed"
    return "passed" if all(r.verdict == "passed" for r in results) else "partial"


def installed_base() -> str | None:
    from ..box.stackinfo import dist_facts

    f = dist_facts("sglang")
    return ((f or {}).get("marker") or {}).get("base") if f else None


def build_receipt(plan: Plan, results: list[StepResult], *, interrupted: str | None,
                  versions: dict[str, Any] | None = None,
                  attachments: list[Attachment] | None = None) -> dict[str, Any]:
    from ..box import nvidia_smi as nvidia
    from ..receipts import make_receipt

    attachments = attachments or []

    topo = plan.topology
    machine = topo.machine()
    summary = {
        "status": overall(results),
        "machine": nvidia.machine_label(machine) if topo.gpu_count else topo.summary(),
        "gpus": topo.gpu_count,
        "capability": machine["capability"],
        "topology_class": topo.topology_class(),
        "topology_source": topo.source,
        "steps": {r.step: {k: getattr(r, k) for k in ("verdict", "reason", "receipt", "log", "rc", "wall_s",
                                                        "headline")} for r in results},
        "passed": [r.step for r in results if r.verdict == "passed"],
        "failed": [r.step for r in results if r.verdict == "failed"],
        "skipped": [r.step for r in results if r.verdict == "skipped"],
        "attachments": attachment_summary(attachments),
    }
    if topo.is_simulated:
        summary["note"] = (f"topology simulated ({topo.source}): the GPU steps ran against a machine "
                           "that may not be this one")
    tp = allreduce_tp(plan) if plan.gpus else plan.tp
    return make_receipt(KIND, summary, base=installed_base(), tp=tp, machine=machine, versions=versions,
                        qualify_schema=SCHEMA, steps=[asdict(r) for r in results], topology=topo.to_dict(),
                        options=plan.options, checkout=str(plan.checkout) if plan.checkout else None,
                        eagle3_config=_eagle3_record(plan), interrupted=interrupted,
                        complete=interrupted is None, pack=str(plan.pack) if plan.pack else None,
                        warnings=plan.warnings, attachments=[a.to_dict() for a in attachments])


def _eagle3_record(plan: Plan) -> dict[str, Any] | None:
    e = plan.eagle3
    if e is None:
        return None
    return {"source": e.why, "path": str(e.config_path), "derived": e.derived, "tp": e.tp, "name": e.name,
            "model": {"target": e.raw["model"].get("target"), "draft": e.raw["model"].get("draft")}}


def _pack_filter(ti: tarfile.TarInfo) -> tarfile.TarInfo | None:
    import fnmatch

    name = Path(ti.name).name
    if fnmatch.fnmatch(name, "*-TP-[1-9]*.trace.json*") or (name.startswith(".") and name.endswith(".tmp")):
        return None  # rank > 0 profiler traces (rank 0's is enough, as on the lab) and unfinished writes
    return ti


PACK_PREFIX = ".sglang-blackwell-pack-"  # the pack being written: <prefix><pid>-<random>.tmp (leftovers.py)


def pack(out: Path, dest: Path, found: tuple[int, ...] | None = None) -> Path:
    """out/ as dest (tar.gz, top folder = out's name). Written under a private temporary name of its own in dest's
    folder (never through a file or link someone put there), read back whole, then renamed over dest only if dest
    is still what this run found there when it began (`found`: plan.file_identity, None for absent): a second
    qualify that packed to the same file meanwhile keeps its pack, and this one raises a UserError saying so."""
    try:
        fd, tmp = leftovers.make_file(PACK_PREFIX, ".tmp", dest.parent)  # sweeps what killed runs left there
    except OSError as e:
        raise UserError(f"--pack {dest}: cannot write in {dest.parent} ({os_reason(e)}); the results are in "
                        f"{out}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            with tarfile.open(fileobj=f, mode="w:gz") as tf:
                tf.add(out, arcname=out.name, filter=_pack_filter)
            f.flush()
            os.fsync(f.fileno())
        _read_back(Path(tmp), out.name)
        os.chmod(tmp, 0o666 & ~_umask())
        with _locked(dest.parent):
            now = file_identity(dest)
            if now != found:
                raise UserError(f"--pack {dest}: changed while this run ran (another qualify packed to it); it was "
                                f"left as it is and this run's pack was not written (its results are in {out}: run "
                                f"again with another --pack, or tar -czf OTHER.tar.gz -C {out.parent} {out.name})")
            os.replace(tmp, dest)
    except (OSError, tarfile.TarError, EOFError) as e:
        reason = os_reason(e) if isinstance(e, OSError) else str(e)
        raise UserError(f"--pack {dest}: cannot write it ({reason}); nothing was written there, the results are in "
                        f"{out}") from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return dest


def _read_back(path: Path, top: str) -> None:
    """Every member of the written tarball read to its end (gzip's CRC checked), all under `top`/."""
    with tarfile.open(path, "r:gz") as tf:
        for ti in tf:
            if ti.name != top and not ti.name.startswith(top + "/"):
                raise tarfile.TarError(f"member {ti.name} is outside {top}/")
            if ti.isfile():
                src = tf.extractfile(ti)
                while src is not None and src.read(1 << 20):
                    pass


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """An exclusive flock on `folder` while the pack is compared and renamed (two qualify runs packing into one
    folder do that one at a time); where the file system has no locks, the comparison alone."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _step_versions(plan: Plan, results: list[StepResult]) -> dict[str, Any] | None:
    """The stack versions a step recorded in its receipt (doctor's first: it has the driver too; same keys as
    receipts.collect_versions), so this process need not import torch to say them again."""
    for r in sorted((r for r in results if r.receipt), key=lambda r: r.step != "doctor"):
        v = (_read_json(plan.out / r.receipt) or {}).get("versions")
        if isinstance(v, dict) and any(v.values()):
            return v
    return None


def format_table(results: list[StepResult]) -> str:
    w = max(len(s) for s in STEPS)
    lines = []
    for r in results:
        t = f"{r.wall_s:7.0f} s" if r.wall_s is not None else " " * 9
        lines.append(f"  {r.step.ljust(w)}  {r.verdict.upper():7s} {t}  {r.receipt or '-'}"
                     + (f"\n  {' ' * w}  {r.reason}" if r.reason else ""))
    return "\n".join(lines)


def format_attachments(attachments: list[Attachment]) -> str:
    lines = ["issue files (what upstream's issue templates ask for):"]
    for a in attachments:
        lines.append(f"  {a.name.ljust(15)}  {a.status:11s}  {a.file or '-'}" + (f"  ({a.reason})" if a.reason else ""))
    return "\n".join(lines)
