"""What the GPU test suites' receipts share (gpu_suite_receipt's `lab-gpu-suite`, userpath_receipt's `lab-userpath`).

Each is built from pytest's JUnit XML (parse_junit: counts and one row per test case) and the facts file the suite
wrote into $SGLB_OUT (load_facts, checked against that suite's schema), with the machine, the versions and the
installed lab-line stack (installed_stack), and written as <prefix>-<UTC date>.json by the same command line:

    python3 -m <module> --junit J.xml --facts facts.json --out DIR [--pytest-rc N]

A suite brings only its own (a SuiteReceipt): kind, facts schema, base, TP, file prefix, its summary (which splices
in summary_counts and ands all_passed) and any top-level keys of its own (extra).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import receipts
from ..errors import UserError

Summarize = Callable[[dict[str, Any], dict[str, Any], str, int | None], dict[str, Any]]


def parse_junit(path: Path) -> dict[str, Any]:
    """Counts and one row per test case: outcome passed | failed | error | skipped (failure wins over a
    teardown error on the same case)."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        raise UserError(f"--junit {path}: cannot read JUnit XML: {e}") from None
    cases = []
    for tc in root.iter("testcase"):
        kinds = {child.tag for child in tc}
        outcome = ("failed" if "failure" in kinds else "error" if "error" in kinds
                   else "skipped" if "skipped" in kinds else "passed")
        msg = next((child.get("message") for child in tc if child.tag in ("failure", "error", "skipped")), None)
        cases.append({"name": f"{tc.get('classname', '')}::{tc.get('name', '')}", "outcome": outcome,
                      "time_s": float(tc.get("time") or 0.0), "message": (msg or "")[:400] or None})
    counts = {k: sum(1 for c in cases if c["outcome"] == k) for k in ("passed", "failed", "error", "skipped")}
    return {"counts": counts, "cases": cases}


def junit_or_missing(path: Path) -> dict[str, Any]:
    """parse_junit, or no cases and `missing` when pytest never wrote the file (it is recorded, not an error)."""
    if path.is_file():
        return parse_junit(path)
    return {"counts": {"passed": 0, "failed": 0, "error": 0, "skipped": 0}, "cases": [],
            "missing": f"{path} not written (pytest did not get to the end)"}


def load_facts(path: Path, schema: str) -> dict[str, Any]:
    """The facts a GPU suite wrote (schema: which suite's), {} when it never got to write them."""
    if not path.is_file():
        return {}  # the suite never got to write one (collection error, killed): the receipt says so
    try:
        facts = json.loads(path.read_text())
    except ValueError as e:
        raise UserError(f"--facts {path}: not JSON: {e}") from None
    if not isinstance(facts, dict) or facts.get("schema") != schema:
        got = facts.get("schema") if isinstance(facts, dict) else type(facts).__name__
        raise UserError(f"--facts {path}: schema {got!r}, expected {schema!r}")
    return facts


def installed_stack() -> dict[str, Any]:
    """Version and our patch marker (wheels.MARKER_FILE) of each installed package of the lab line."""
    from ..box.stackinfo import dist_facts

    out = {}
    for name in ("sglang", "flashinfer-python", "sglang-kernel", "torch"):
        f = dist_facts(name)
        out[name] = None if f is None else {"version": f["version"], "patches": f["patches"],
                                            "base": (f["marker"] or {}).get("base")}
    return out


def summary_counts(junit: dict[str, Any]) -> dict[str, int]:
    """A summary's test counts: tests_failed counts failures and errors."""
    n = junit["counts"]
    return {"tests_passed": n["passed"], "tests_failed": n["failed"] + n["error"], "tests_skipped": n["skipped"]}


def all_passed(junit: dict[str, Any], pytest_rc: int | None) -> bool:
    """pytest exited 0, and every test ran and passed (none failed, errored or skipped; at least one)."""
    n = junit["counts"]
    return pytest_rc == 0 and n["failed"] + n["error"] == 0 and n["skipped"] == 0 and n["passed"] > 0


def _no_extra(facts: dict[str, Any]) -> dict[str, Any]:
    return {}


@dataclass(frozen=True)
class SuiteReceipt:
    """One suite's receipt: what is its own; building, naming and the command line are shared."""

    kind: str
    facts_schema: str
    base: str
    tp: int
    file_prefix: str  # <file_prefix>-<UTC date>.json
    facts_writer: str  # who writes facts.json ("the suite"), for --facts' help
    summarize: Summarize  # (facts, junit, machine label, pytest rc) -> summary
    extra: Callable[[dict[str, Any]], dict[str, Any]] = _no_extra  # facts -> top-level keys after `tests`

    def load_facts(self, path: Path) -> dict[str, Any]:
        return load_facts(path, self.facts_schema)

    def build_receipt(self, facts: dict[str, Any], junit: dict[str, Any], *, pytest_rc: int | None,
                      machine: dict[str, Any] | None = None, versions: dict[str, Any] | None = None,
                      installed: dict[str, Any] | None = None, command: list[str] | None = None) -> dict[str, Any]:
        from ..box import nvidia_smi as nvidia

        m = machine if machine is not None else nvidia.machine()
        return receipts.make_receipt(
            self.kind, self.summarize(facts, junit, nvidia.machine_label(m), pytest_rc), base=self.base,
            tp=self.tp, machine=m, versions=versions if versions is not None else receipts.collect_versions(),
            command=command, pytest_rc=pytest_rc, junit_missing=junit.get("missing"), tests=junit["cases"],
            **self.extra(facts), installed=installed if installed is not None else installed_stack(), facts=facts)

    def receipt_name(self, now: dt.datetime | None = None) -> str:
        now = now or dt.datetime.now(dt.timezone.utc)
        return f"{self.file_prefix}-{now.strftime('%Y-%m-%d')}.json"

    def main(self, argv: list[str] | None, *, prog: str, description: str) -> int:
        """--junit, --facts, --out, --pytest-rc: writes the dated receipt into --out and prints its summary;
        2 on a JUnit file or facts file that cannot be read."""
        ap = argparse.ArgumentParser(prog=prog, description=description)
        ap.add_argument("--junit", required=True, help="pytest --junitxml output")
        ap.add_argument("--facts", required=True, help=f"facts.json {self.facts_writer} wrote into $SGLB_OUT")
        ap.add_argument("--out", required=True, help=f"directory for {self.file_prefix}-<date>.json")
        ap.add_argument("--pytest-rc", type=int, help="pytest's exit code (recorded; 0 is needed for passed)")
        a = ap.parse_args(argv)
        try:
            junit = junit_or_missing(Path(a.junit))
            facts = self.load_facts(Path(a.facts))
            r = self.build_receipt(facts, junit, pytest_rc=a.pytest_rc,
                                   command=[Path(sys.argv[0]).name, *sys.argv[1:]])
            path = receipts.write_receipt(r, Path(a.out) / self.receipt_name())
        except UserError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        print(json.dumps(r["summary"], indent=1))
        print(f"receipt: {path}")
        return 0
