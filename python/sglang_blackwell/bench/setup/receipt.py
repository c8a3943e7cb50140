"""The `bench-setup` receipt: the envelope of receipts.py (git_commit = the commit the clone measured), the
machine, the tools' versions, the caches before and after, and one record per step; `summary` holds what the
README block shows. Written whole (receipts.write_receipt) under a name no other receipt has."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...errors import UserError
from ...receipts import make_receipt, write_receipt
from .source import Source

KIND = "bench-setup"


def summary(steps: list[dict[str, Any]], facts: dict[str, Any], caches_before: dict[str, Any]) -> dict[str, Any]:
    ran = [s for s in steps if "exit_code" in s]
    per_step = {}
    for s in ran:
        row: dict[str, Any] = {"wall_s": s["wall_s"], "exit_code": s["exit_code"], "timed_out": s["timed_out"]}
        for key in ("pytest", "probes"):
            if s.get(key):
                row[key] = {k: v for k, v in s[key].items() if k != "line"}
        per_step[s["name"]] = row
    return {
        "passed": len(ran) == len(steps) and all(s["exit_code"] == 0 for s in ran),
        "steps": per_step,
        "not_run": [s["name"] for s in steps if "exit_code" not in s],
        "machine": facts["cpu_model"], "nproc": facts["nproc"], "memory_gib": facts["memory_gib"],
        "load_at_start": (facts["load"] or [None])[0],
        "cache": caches_before["state"],
    }


def build(src: Source, facts: dict[str, Any], versions: dict[str, Any], caches_before: dict[str, Any],
          caches_after: dict[str, Any], clone_s: float, steps: list[dict[str, Any]]) -> dict[str, Any]:
    return make_receipt(KIND, summary(steps, facts, caches_before), machine=facts, versions=versions,
                        git_commit=src.commit, source=src.as_dict(), clone_s=round(clone_s, 2),
                        caches={"before": caches_before, "after": caches_after}, steps=steps)


def stem(created: str) -> str:
    """"2026-12-02T10:11:12+00:00" -> "bench-setup_20261202T101112Z"."""
    return f"{KIND}_{created[:19].replace('-', '').replace(':', '')}Z"


def write(r: dict[str, Any], out: Path) -> Path:
    """out/bench-setup_<created>.json, or -2, -3, ... where a receipt of the same second is there."""
    base = stem(r["created"])
    for n in range(1, 1000):
        path = out / (f"{base}.json" if n == 1 else f"{base}-{n}.json")
        if not path.exists():
            return write_receipt(r, path)
    raise UserError(f"--out {out}: 999 set-up receipts of {r['created']} are there already")
