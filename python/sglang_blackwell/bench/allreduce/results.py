"""The results dict one `bench allreduce` run produces (rank 0 writes it; report, receipt and tuner read it).

    {"label", "config": {tp, tokens, hidden, dtype, elem_size, plan, ...},
     "meta": {topology, versions, env, facts, ...},
     "backends":   {name: {"op", "reference", "available", "reason", "setup_s"}},
     "producer_us": {T: us},
     "latency_us": {name: {T: {"gross", "net", "per_rank", "min", "max"}}},
     "checks":     {name: {T: {"ok", "rule", "eager": {part: stats}, "graph": {part: stats}}}},
     "errors":     {name: {T | "close": message}},        "skipped: ..." for sizes a backend cannot run
     "nccl_profiles": {profile: {"env", "reused_main_run", "latency_us", "checks", "errors", ...}},
     "failure": "..."  only when the run was cut short}

T keys are strings (JSON). These functions are the only writers, so the format lives in one place.
"""

from __future__ import annotations

from typing import Any


def new_results(config: dict[str, Any], label: str = "main") -> dict[str, Any]:
    return {"label": label, "config": dict(config), "meta": {}, "backends": {}, "producer_us": {},
            "latency_us": {}, "checks": {}, "errors": {}}


def add_backend(results: dict[str, Any], name: str, *, op: str, reference: str, available: bool,
                reason: str = "", setup_s: float | None = None) -> None:
    entry: dict[str, Any] = {"op": op, "reference": reference, "available": available, "reason": reason}
    if setup_s is not None:
        entry["setup_s"] = round(setup_s, 3)
    results["backends"][name] = entry


def add_producer(results: dict[str, Any], tokens: int, us: float) -> None:
    results["producer_us"][str(tokens)] = round(us, 3)


def add_measurement(results: dict[str, Any], name: str, tokens: int, *, gross_us: float, producer_us: float,
                    per_rank: list[float], lo: float, hi: float, ok: bool, rule: str,
                    eager: dict[str, Any], graph: dict[str, Any]) -> None:
    """One backend at one size: its in-graph latency and the verdict of its numerics checks."""
    results["latency_us"].setdefault(name, {})[str(tokens)] = {
        "gross": round(gross_us, 3), "net": round(gross_us - producer_us, 3),
        "per_rank": [round(x, 3) for x in per_rank], "min": round(lo, 3), "max": round(hi, 3)}
    results["checks"].setdefault(name, {})[str(tokens)] = {"ok": ok, "rule": rule, "eager": eager,
                                                           "graph": graph}


def add_error(results: dict[str, Any], name: str, key: str | int, msg: str) -> None:
    results["errors"].setdefault(name, {})[str(key)] = msg
