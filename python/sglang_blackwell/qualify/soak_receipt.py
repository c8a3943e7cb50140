"""The receipt of one soak (kind `lab-soak`, test/gpu/soak; issue 31 item 4): the baseline and the EAGLE-3 server on
one GPU at once, driven by one client with the same seeded schedule of mixed prompt lengths (256-32k tokens),
output lengths and concurrency, a tenth of the requests cut by the client. Built from pytest's JUnit XML and the
facts file the soak writes, as every suite receipt is (suite_receipt); judged again here from the facts' buckets
(soak_verdict.judge, with the bounds the soak ran with).

    python3 -m sglang_blackwell.qualify.soak_receipt --junit J.xml --facts facts.json --out DIR [--pytest-rc N]

writes DIR/lab-soak-<UTC date>.json: `checks`, one row per arm x check (arm, check, ok, value, bound, why);
`buckets`, each arm's per-minute buckets (requests ok / aborted / errors, ITL p50/p90/p99, GPU memory, host RSS,
KV use); and the summary: machine, tp (1), soak_s, per arm the requests, intended aborts, errors and the first and
last minute's p99 ITL and memory, the failed checks, the bounds and whether they are soak_verdict's defaults, the
test counts, passed.
"""

from __future__ import annotations

import sys
from typing import Any

from . import soak_verdict
from .suite_receipt import SuiteReceipt, all_passed, summary_counts

KIND = "lab-soak"
FACTS_SCHEMA = "sglang-blackwell/soak-facts/1"
BASE = "0.5.14"
TP = 1
ARMS = ("baseline", "eagle3")
FIRST_LAST_KEYS = ("minute", "itl_p99_ms", "gpu_mib_max", "gpu_total_mib_max", "rss_mib_max", "kv_used_max")


def checks(facts: dict[str, Any]) -> list[soak_verdict.Check]:
    return soak_verdict.judge(facts.get("arms") or {}, ARMS, soak_verdict.Bounds.from_facts(facts.get("bounds")))


def _arm_summary(arm: dict[str, Any]) -> dict[str, Any]:
    buckets = arm.get("buckets") or []
    pair = soak_verdict.compared(buckets)
    total = {k: sum(int(b.get(k) or 0) for b in buckets) for k in ("ok", "aborted", "errors")}
    return {**total, "minutes": len([b for b in buckets if b.get("full")]),
            "first": {k: pair[0].get(k) for k in FIRST_LAST_KEYS} if pair else None,
            "last": {k: pair[1].get(k) for k in FIRST_LAST_KEYS} if pair else None,
            "startup_s": (arm.get("start") or {}).get("startup_s")}


def build_summary(facts: dict[str, Any], junit: dict[str, Any], machine_label: str,
                  pytest_rc: int | None) -> dict[str, Any]:
    rows = checks(facts)
    bounds = soak_verdict.Bounds.from_facts(facts.get("bounds"))
    arms = facts.get("arms") or {}
    return {
        "machine": machine_label,
        "tp": TP,
        "soak_s": (facts.get("config") or {}).get("soak_s"),
        "arms": {name: _arm_summary(arms.get(name) or {}) for name in ARMS},
        "failed_checks": [f"{c.arm} {c.check}: {c.why}"[:300] for c in rows if not c.ok],
        "bounds": bounds.as_facts(),
        "bounds_default": bounds == soak_verdict.DEFAULT,
        **summary_counts(junit),
        "passed": all_passed(junit, pytest_rc) and soak_verdict.passed(rows),
    }


def _extra(facts: dict[str, Any]) -> dict[str, Any]:
    arms = facts.get("arms") or {}
    return {"checks": [c.as_row() for c in checks(facts)],
            "buckets": {name: (arms.get(name) or {}).get("buckets") or [] for name in ARMS}}


RECEIPT = SuiteReceipt(kind=KIND, facts_schema=FACTS_SCHEMA, base=BASE, tp=TP, file_prefix="lab-soak",
                       facts_writer="the soak", summarize=build_summary, extra=_extra)
load_facts, build_receipt, receipt_name = RECEIPT.load_facts, RECEIPT.build_receipt, RECEIPT.receipt_name


def main(argv: list[str] | None = None) -> int:
    return RECEIPT.main(argv, prog="python3 -m sglang_blackwell.qualify.soak_receipt",
                        description=(__doc__ or "").strip().splitlines()[0])


if __name__ == "__main__":
    sys.exit(main())
