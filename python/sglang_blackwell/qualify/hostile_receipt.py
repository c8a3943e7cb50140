"""The receipt of one hostile-request GPU suite run (kind `lab-hostile`, test/gpu/hostile; issue 31 item 3): a
user's TP=1 server on 0.0.0.0 with --api-key, without and with EAGLE-3, sent requests meant to take it down, leak
its KV pool or open its admin endpoints. Built from pytest's JUnit XML and the facts file the suite writes, as every
suite receipt is (suite_receipt).

    python3 -m sglang_blackwell.qualify.hostile_receipt --junit J.xml --facts facts.json --out DIR [--pytest-rc N]

writes DIR/lab-hostile-<UTC date>.json: `cases`, one row per arm x case of CASES (arm, case, verdict, status,
message, why), and the summary: machine, tp (1), cases (rows), one count per verdict, deaths, leaks,
reference_changed, admin_accepted, not_run, restarts and startup_s per arm, the test counts, passed. A case the
facts do not hold is a row with verdict `not-run` and the reason (the suite skipped it, or never got to it): no case
is ever absent from the receipt.
"""

from __future__ import annotations

import sys
from typing import Any

from .suite_receipt import SuiteReceipt, all_passed, summary_counts

KIND = "lab-hostile"
FACTS_SCHEMA = "sglang-blackwell/hostile-facts/1"
BASE = "0.5.14"
TP = 1
ARMS = ("baseline", "eagle3")  # in the order the suite runs them: the baseline arm first
# every case the suite has, in its order (test/gpu/hostile/hostile_cases.py implements exactly these)
CASES = (
    "oov_ids_generate", "negative_ids_generate", "oov_ids_completions", "negative_ids_completions",
    "admin_endpoints_unkeyed", "empty_prompt", "prompt_equals_context", "prompt_over_context",
    "max_tokens_over_context", "n_64", "logprobs_at_limits", "logprobs_past_limits", "stop_strings_10k",
    "logit_bias_bad_keys", "json_schema_invalid", "regex_invalid", "ebnf_invalid", "json_100k_deep", "body_64mib",
    "body_invalid_utf8", "stream_disconnect_200", "abort_storm", "overload_c256",
)
VERDICTS = ("clean", "wrong", "leak", "server-died")
NOT_RUN = "not-run"
NEVER_REACHED = "absent from the facts: the suite never got to it (cut off, or a collection error)"
MESSAGE_CHARS = 300


def case_rows(facts: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per arm x case, in ARMS x CASES order; a case missing from the facts is `not-run`."""
    arms = facts.get("arms") or {}
    rows = []
    for arm in ARMS:
        cases = (arms.get(arm) or {}).get("cases") or {}
        for case in CASES:
            rec = cases.get(case)
            if not isinstance(rec, dict) or rec.get("verdict") not in (*VERDICTS, NOT_RUN):
                rec = {"verdict": NOT_RUN, "why": NEVER_REACHED}
            rows.append({"arm": arm, "case": case, "verdict": rec["verdict"], "status": rec.get("status"),
                         "message": (rec.get("message") or "")[:MESSAGE_CHARS] or None, "why": rec.get("why"),
                         "reference_changed": bool(rec.get("reference_changed")),
                         "admin_accepted": int(rec.get("admin_accepted") or 0), "elapsed_s": rec.get("elapsed_s")})
    return rows


def build_summary(facts: dict[str, Any], junit: dict[str, Any], machine_label: str,
                  pytest_rc: int | None) -> dict[str, Any]:
    rows = case_rows(facts)
    count = {v: sum(1 for r in rows if r["verdict"] == v) for v in (*VERDICTS, NOT_RUN)}
    arms = facts.get("arms") or {}
    return {
        "machine": machine_label,
        "tp": TP,
        "cases": len(rows),
        **{v.replace("-", "_"): n for v, n in count.items()},
        "deaths": count["server-died"],
        "leaks": count["leak"],
        "reference_changed": sum(1 for r in rows if r["reference_changed"]),
        "admin_accepted": sum(r["admin_accepted"] for r in rows),
        "restarts": {arm: max(0, len((arms.get(arm) or {}).get("starts") or []) - 1) for arm in ARMS},
        "startup_s": {arm: [s.get("startup_s") for s in (arms.get(arm) or {}).get("starts") or []] for arm in ARMS},
        **summary_counts(junit),
        "passed": all_passed(junit, pytest_rc) and count["clean"] == len(rows),
    }


def _extra(facts: dict[str, Any]) -> dict[str, Any]:
    return {"cases": case_rows(facts)}


RECEIPT = SuiteReceipt(kind=KIND, facts_schema=FACTS_SCHEMA, base=BASE, tp=TP, file_prefix="lab-hostile",
                       facts_writer="the suite", summarize=build_summary, extra=_extra)
load_facts, build_receipt, receipt_name = RECEIPT.load_facts, RECEIPT.build_receipt, RECEIPT.receipt_name


def main(argv: list[str] | None = None) -> int:
    return RECEIPT.main(argv, prog="python3 -m sglang_blackwell.qualify.hostile_receipt",
                        description=(__doc__ or "").strip().splitlines()[0])


if __name__ == "__main__":
    sys.exit(main())
