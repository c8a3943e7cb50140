"""The receipt of one user-path GPU test run (kind `lab-userpath`, test/gpu/userpath): a user's TP=1 server started
by `sglang-blackwell serve` with the tokenizer and the default grammar backend, driven by the `openai` client.
Built from pytest's JUnit XML and the facts file the tests write, as every suite receipt is (suite_receipt).

    python3 -m sglang_blackwell.qualify.userpath_receipt --junit J.xml --facts facts.json --out DIR [--pytest-rc N]

writes DIR/lab-userpath-<UTC date>.json and prints its summary: machine, tp (1), api ("openai"), tests_passed,
tests_failed (failures + errors), tests_skipped, grammar_backend (what the server reported using, /server_info),
accept_len (the EAGLE-3 server's), startup_s of each server, passed. A value is null where nothing measured it.
"""

from __future__ import annotations

import sys
from typing import Any

from .suite_receipt import SuiteReceipt, all_passed, summary_counts

KIND = "lab-userpath"
FACTS_SCHEMA = "sglang-blackwell/userpath-facts/1"
BASE = "0.5.14"
TP = 1
API = "openai"


def _server(facts: dict[str, Any], name: str) -> dict[str, Any]:
    return (facts.get("servers") or {}).get(name) or {}


def build_summary(facts: dict[str, Any], junit: dict[str, Any], machine_label: str,
                  pytest_rc: int | None) -> dict[str, Any]:
    plain, spec = _server(facts, "openai"), _server(facts, "eagle3")
    return {
        "machine": machine_label,
        "tp": TP,
        "api": API,
        **summary_counts(junit),
        "grammar_backend": plain.get("grammar_backend"),
        "accept_len": spec.get("accept_len_after_tests", spec.get("accept_len")),
        "startup_s": {name: _server(facts, name).get("startup_s") for name in ("openai", "eagle3")},
        "passed": all_passed(junit, pytest_rc) and plain.get("grammar_backend") not in (None, "none"),
    }


RECEIPT = SuiteReceipt(kind=KIND, facts_schema=FACTS_SCHEMA, base=BASE, tp=TP, file_prefix="lab-userpath",
                       facts_writer="the tests", summarize=build_summary)
load_facts, build_receipt, receipt_name = RECEIPT.load_facts, RECEIPT.build_receipt, RECEIPT.receipt_name


def main(argv: list[str] | None = None) -> int:
    return RECEIPT.main(argv, prog="python3 -m sglang_blackwell.qualify.userpath_receipt",
                        description=(__doc__ or "").strip().splitlines()[0])


if __name__ == "__main__":
    sys.exit(main())
