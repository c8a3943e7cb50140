"""The receipt of one user-path GPU test run (kind `lab-userpath`, test/gpu/userpath): a user's TP=1 server started
by `sglang-blackwell serve` with the tokenizer and the default grammar backend, driven by the `openai` client.
Built from pytest's JUnit XML (gpu_suite_receipt.parse_junit) and the facts file the tests write.

    python3 -m sglang_blackwell.qualify.userpath_receipt --junit J.xml --facts facts.json --out DIR [--pytest-rc N]

writes DIR/lab-userpath-<UTC date>.json and prints its summary: machine, tp (1), api ("openai"), tests_passed,
tests_failed (failures + errors), tests_skipped, grammar_backend (what the server reported using, /server_info),
accept_len (the EAGLE-3 server's), startup_s of each server, passed. A value is null where nothing measured it.
"""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path
from typing import Any

from .. import receipts
from .gpu_suite_receipt import installed_stack, receipt_cli
from .gpu_suite_receipt import load_facts as suite_facts

KIND = "lab-userpath"
FACTS_SCHEMA = "sglang-blackwell/userpath-facts/1"
BASE = "0.5.14"
TP = 1
API = "openai"


def load_facts(path: Path) -> dict[str, Any]:
    return suite_facts(path, FACTS_SCHEMA)


def _server(facts: dict[str, Any], name: str) -> dict[str, Any]:
    return (facts.get("servers") or {}).get(name) or {}


def build_summary(facts: dict[str, Any], junit: dict[str, Any], machine_label: str,
                  pytest_rc: int | None) -> dict[str, Any]:
    n = junit["counts"]
    plain, spec = _server(facts, "openai"), _server(facts, "eagle3")
    accept = spec.get("accept_len_after_tests", spec.get("accept_len"))
    failed = n["failed"] + n["error"]
    return {
        "machine": machine_label,
        "tp": TP,
        "api": API,
        "tests_passed": n["passed"],
        "tests_failed": failed,
        "tests_skipped": n["skipped"],
        "grammar_backend": plain.get("grammar_backend"),
        "accept_len": accept,
        "startup_s": {name: _server(facts, name).get("startup_s") for name in ("openai", "eagle3")},
        "passed": pytest_rc == 0 and failed == 0 and n["skipped"] == 0 and n["passed"] > 0
        and plain.get("grammar_backend") not in (None, "none"),
    }


def build_receipt(facts: dict[str, Any], junit: dict[str, Any], *, pytest_rc: int | None,
                  machine: dict[str, Any] | None = None, versions: dict[str, Any] | None = None,
                  installed: dict[str, Any] | None = None, command: list[str] | None = None) -> dict[str, Any]:
    from ..box import nvidia_smi as nvidia

    m = machine if machine is not None else nvidia.machine()
    summary = build_summary(facts, junit, nvidia.machine_label(m), pytest_rc)
    return receipts.make_receipt(
        KIND, summary, base=BASE, tp=TP, machine=m,
        versions=versions if versions is not None else receipts.collect_versions(),
        command=command, pytest_rc=pytest_rc, junit_missing=junit.get("missing"), tests=junit["cases"],
        installed=installed if installed is not None else installed_stack(), facts=facts)


def receipt_name(now: dt.datetime | None = None) -> str:
    now = now or dt.datetime.now(dt.timezone.utc)
    return f"lab-userpath-{now.strftime('%Y-%m-%d')}.json"


def main(argv: list[str] | None = None) -> int:
    return receipt_cli(argv, prog="python3 -m sglang_blackwell.qualify.userpath_receipt",
                       description=(__doc__ or "").strip().splitlines()[0], what="the tests",
                       receipt_name=receipt_name, build=build_receipt, load=load_facts)


if __name__ == "__main__":
    sys.exit(main())
