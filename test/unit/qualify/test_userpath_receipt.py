"""userpath_receipt: the `lab-userpath` receipt from a real pytest JUnit XML (conftest's junit_xml: pass,
fail, skip, a fixture error, a teardown error) and a facts file written by the user-path tests' own Facts class
(test/gpu/userpath/userpath_env.py), with the GPU measurements simulated."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from sglang_blackwell import receipts
from sglang_blackwell.box import nvidia_smi as nvidia
from sglang_blackwell.qualify import gpu_suite_receipt as gr
from sglang_blackwell.qualify import suite_receipt as sr
from sglang_blackwell.qualify import userpath_receipt as ur

from .suite_fixtures import MACHINE, cut_short, receipt_cli, run_cli, stub_machine
from .test_gpu_suite_receipt import VERSIONS

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "gpu" / "userpath"))
import userpath_env  # noqa: E402

PASSED = {"counts": {"passed": 26, "failed": 0, "error": 0, "skipped": 0}, "cases": []}


def facts(tmp_path: Path, grammar: str | None = "xgrammar") -> dict:
    cfg = userpath_env.Config(target=tmp_path / "target", draft=tmp_path / "draft", out=tmp_path, deadline_s=420,
                              python=sys.executable)
    f = userpath_env.Facts(tmp_path / "facts.json", cfg)
    f.server("openai").update(startup_s=61.2, grammar_backend=grammar,
                              server={"tp_size": 1, "grammar_backend": "xgrammar"})
    f.server("eagle3").update(startup_s=70.4, accept_len=2.97, accept_len_after_tests=2.99)
    f.save()
    return json.loads((tmp_path / "facts.json").read_text())


def test_summary_has_what_the_issue_asks(tmp_path, junit_xml):
    r = ur.build_receipt(facts(tmp_path), sr.parse_junit(junit_xml), pytest_rc=1, machine=MACHINE,
                         versions=VERSIONS, installed={})
    assert receipts.validate_receipt(r) == []
    s = r["summary"]
    assert (s["machine"], s["tp"], s["api"], s["grammar_backend"]) == ("1x NVIDIA H200", 1, "openai", "xgrammar")
    assert (s["tests_passed"], s["tests_failed"], s["tests_skipped"]) == (2, 3, 1)  # fixture + teardown errors
    assert s["accept_len"] == 2.99 and s["startup_s"] == {"openai": 61.2, "eagle3": 70.4}
    assert s["passed"] is False and r["kind"] == "lab-userpath" and r["tp"] == 1
    assert r["facts"]["servers"]["openai"]["server"]["tp_size"] == 1 and len(r["tests"]) == 6


def test_passed_needs_every_test_passed_rc_0_and_a_real_grammar_backend(tmp_path):
    label = nvidia.machine_label(MACHINE)
    assert ur.build_summary(facts(tmp_path), PASSED, label, 0)["passed"] is True
    assert ur.build_summary(facts(tmp_path), PASSED, label, 1)["passed"] is False
    for grammar in ("none", None):  # the scheduler fell back, or no server reported one
        assert ur.build_summary(facts(tmp_path, grammar), PASSED, label, 0)["passed"] is False
    skipped = {"counts": {**PASSED["counts"], "skipped": 1}, "cases": []}
    assert ur.build_summary(facts(tmp_path), skipped, label, 0)["passed"] is False
    empty = ur.build_summary({}, PASSED, label, 0)
    assert empty["grammar_backend"] is None and empty["accept_len"] is None and empty["passed"] is False


def test_cli_writes_the_dated_receipt_and_survives_a_run_cut_short(tmp_path, junit_xml, monkeypatch):
    stub_machine(monkeypatch)
    facts(tmp_path)
    rc, path = receipt_cli(ur.main, junit_xml, tmp_path / "facts.json", tmp_path / "out", "lab-userpath", "1")
    assert rc == 0
    assert path.name == ur.receipt_name() and json.loads(path.read_text())["pytest_rc"] == 1
    rc, r = cut_short(ur.main, tmp_path, "lab-userpath")
    assert rc == 0 and "not written" in r["junit_missing"] and r["summary"]["passed"] is False


def test_cli_refuses_a_foreign_facts_file(tmp_path, junit_xml, capsys):
    bad = tmp_path / "facts.json"
    bad.write_text(json.dumps({"schema": gr.FACTS_SCHEMA}))  # the lab-line suite's, not ours
    assert run_cli(ur.main, junit_xml, bad, tmp_path / "o") == 2
    assert "--facts" in capsys.readouterr().err
    assert userpath_env.FACTS_SCHEMA == ur.FACTS_SCHEMA
