"""soak_receipt: the `lab-soak` receipt from a real pytest JUnit XML and a facts file written by the soak's own
Facts class (test/gpu/soak/soak_env.py): the verdict judged again from the buckets with the bounds the soak ran
with, one check row per arm x check, the buckets carried; the CLI as the runner calls it, after a run cut short,
and refusing another suite's facts. The soak and the receipt agree on the schema and the arms."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from sglang_blackwell import receipts
from sglang_blackwell.qualify import hostile_receipt as hr
from sglang_blackwell.qualify import soak_receipt as sk
from sglang_blackwell.qualify import soak_verdict as sv
from sglang_blackwell.qualify import suite_receipt as sr

from .suite_fixtures import MACHINE, cut_short, receipt_cli, run_cli, stub_machine
from .test_gpu_suite_receipt import VERSIONS
from .test_soak_verdict import arm

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "gpu" / "soak"))
import soak_env  # noqa: E402

PASSED = {"counts": {"passed": 1, "failed": 0, "error": 0, "skipped": 0}, "cases": []}


def facts(tmp_path: Path, **cfg_over) -> dict:
    cfg = soak_env.Config(target=tmp_path / "target", draft=tmp_path / "draft", out=tmp_path, deadline_s=900,
                          python=sys.executable, **cfg_over)
    f = soak_env.Facts(tmp_path / "facts.json", cfg, {"seed": 31})
    for name in soak_env.ARMS:
        f.arm(name).update(arm())
    f.save()
    return json.loads(f.path.read_text())


def test_the_receipt_judges_the_buckets_again(tmp_path, junit_xml):
    data = facts(tmp_path)
    r = sk.build_receipt(data, sr.parse_junit(junit_xml), pytest_rc=0, machine=MACHINE, versions=VERSIONS,
                         installed={})
    assert receipts.validate_receipt(r) == [] and r["kind"] == "lab-soak" and r["tp"] == 1
    assert len(r["checks"]) == 2 * len(sv.CHECKS) and all(c["ok"] for c in r["checks"])
    assert len(r["buckets"]["eagle3"]) == 11
    s = r["summary"]
    assert s["arms"]["baseline"]["first"]["minute"] == 1 and s["arms"]["baseline"]["last"]["minute"] == 9
    assert s["arms"]["baseline"]["errors"] == 0 and s["bounds_default"] is True and s["failed_checks"] == []
    assert s["passed"] is False  # the sample JUnit has failures: pytest must be green too
    assert sk.build_summary(data, PASSED, "1x NVIDIA H200", 0)["passed"] is True

    data["arms"]["eagle3"]["buckets"][4]["errors"] = 2
    s = sk.build_summary(data, PASSED, "1x NVIDIA H200", 0)
    assert s["passed"] is False and s["failed_checks"] == ["eagle3 errors: none"]


def test_the_bounds_the_soak_ran_with_are_the_receipts(tmp_path):
    loose = sv.Bounds(itl_tol=1000.0, min_gaps=1)
    data = facts(tmp_path, bounds=loose)
    data["arms"]["baseline"]["buckets"][9]["itl_p99_ms"] = 500.0
    s = sk.build_summary(data, PASSED, "x", 0)
    assert s["passed"] is True and s["bounds_default"] is False and s["bounds"]["itl_tol"] == 1000.0
    data["bounds"] = sv.DEFAULT.as_facts()
    assert sk.build_summary(data, PASSED, "x", 0)["failed_checks"][0].startswith("baseline itl_p99")


def test_cli_writes_the_dated_receipt_and_survives_a_run_cut_short(tmp_path, junit_xml, monkeypatch):
    stub_machine(monkeypatch)
    facts(tmp_path)
    rc, path = receipt_cli(sk.main, junit_xml, tmp_path / "facts.json", tmp_path / "out", "lab-soak", "1")
    assert rc == 0 and path.name == sk.receipt_name() and json.loads(path.read_text())["pytest_rc"] == 1
    rc, r = cut_short(sk.main, tmp_path, "lab-soak")
    assert rc == 0 and "not written" in r["junit_missing"] and r["summary"]["passed"] is False
    assert {c["why"] for c in r["checks"]} == {"the arm did not run"}


def test_cli_refuses_a_foreign_facts_file(tmp_path, junit_xml, capsys):
    bad = tmp_path / "facts.json"
    bad.write_text(json.dumps({"schema": hr.FACTS_SCHEMA}))
    assert run_cli(sk.main, junit_xml, bad, tmp_path / "o") == 2
    assert "--facts" in capsys.readouterr().err


def test_the_soak_and_the_receipt_agree():
    assert soak_env.FACTS_SCHEMA == sk.FACTS_SCHEMA and soak_env.ARMS == sk.ARMS == tuple(soak_env.ARM_SPECULATIVE)
