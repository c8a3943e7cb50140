"""suite_receipt: what the GPU suites' receipts share. The JUnit XML comes from running pytest for real on a small
generated test module (conftest's junit_xml: pass, fail, skip, a fixture error, a teardown error). Each receipt of
these kinds committed under benchmark/results/ is rebuilt from the inputs it records and must come out as written.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest

from sglang_blackwell.qualify import gpu_suite_receipt, suite_receipt, userpath_receipt

RESULTS = Path(__file__).resolve().parents[3] / "benchmark" / "results"
BUILDERS: dict[str, ModuleType] = {"lab-gpu-suite": gpu_suite_receipt, "lab-userpath": userpath_receipt}


def test_parse_junit_from_a_real_pytest_run(junit_xml):
    j = suite_receipt.parse_junit(junit_xml)
    assert j["counts"] == {"passed": 2, "failed": 1, "error": 2, "skipped": 1}
    by_name = {c["name"].split("::")[-1]: c for c in j["cases"]}
    assert by_name["test_fails"]["outcome"] == "failed" and "18 times" in by_name["test_fails"]["message"]
    assert by_name["test_fixture_error"]["outcome"] == "error"
    assert by_name["test_teardown_error"]["outcome"] == "error"  # passed, then its teardown failed
    assert by_name["test_skipped"]["outcome"] == "skipped" and "deadline" in by_name["test_skipped"]["message"]
    assert suite_receipt.summary_counts(j) == {"tests_passed": 2, "tests_failed": 3, "tests_skipped": 1}


def committed_receipts() -> list[Path]:
    out = []
    for p in sorted(RESULTS.glob("*.json")):
        r = json.loads(p.read_text())
        if isinstance(r, dict) and r.get("kind") in BUILDERS:
            out.append(p)
    return out


def test_every_suite_kind_has_a_committed_receipt():
    kinds = {json.loads(p.read_text())["kind"] for p in committed_receipts()}
    assert kinds == set(BUILDERS)


@pytest.mark.parametrize("path", committed_receipts(), ids=lambda p: p.name)
def test_a_committed_receipt_is_what_its_builder_writes_from_its_inputs(path):
    """The receipt records every input (facts, the JUnit cases, pytest's rc, machine, versions, installed stack,
    command): rebuilt from them it is the same, key for key and in the same order; only `created` and
    `git_commit` (the moment and the checkout) are taken over."""
    r = json.loads(path.read_text())
    cases = r["tests"]
    counts = {k: sum(1 for c in cases if c["outcome"] == k) for k in ("passed", "failed", "error", "skipped")}
    junit = {"counts": counts, "cases": cases}
    if r["junit_missing"] is not None:
        junit["missing"] = r["junit_missing"]
    built = BUILDERS[r["kind"]].build_receipt(r["facts"], junit, pytest_rc=r["pytest_rc"], machine=r["machine"],
                                              versions=r["versions"], installed=r["installed"], command=r["command"])
    built = json.loads(json.dumps(built)) | {"created": r["created"], "git_commit": r["git_commit"]}
    assert built == r
    assert list(built) == list(r) and list(built["summary"]) == list(r["summary"])
