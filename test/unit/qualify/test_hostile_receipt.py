"""hostile_receipt: the `lab-hostile` receipt from a real pytest JUnit XML (conftest's junit_xml) and a facts file
written by the hostile suite's own Facts class (test/gpu/hostile/hostile_env.py) with the records its run_case
writes: a clean case, a server that died (and was started again), a leak, a reference that changed, an admin
endpoint that took a call, cases skipped for the deadline, cases never reached. No case is ever absent from the
receipt, and the suite runs exactly the receipt's cases."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from sglang_blackwell import receipts
from sglang_blackwell.box import nvidia_smi as nvidia
from sglang_blackwell.qualify import hostile_receipt as hr
from sglang_blackwell.qualify import suite_receipt as sr
from sglang_blackwell.qualify import userpath_receipt as ur

from .suite_fixtures import MACHINE, cut_short, receipt_cli, run_cli, stub_machine
from .test_gpu_suite_receipt import VERSIONS

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "gpu" / "hostile"))
import hostile_cases  # noqa: E402
import hostile_env  # noqa: E402

PASSED = {"counts": {"passed": 46, "failed": 0, "error": 0, "skipped": 0}, "cases": []}
CLEAN = {"verdict": "clean", "why": "3 answers as due", "status": 400,
         "message": "Token id 32007 at position 2 of the prompt is out of vocabulary (the model's token ids are 0 "
                    "to 31999).", "elapsed_s": 0.2, "reference_changed": False, "admin_accepted": 0}


def facts(tmp_path: Path, *, all_clean: bool = False) -> dict:
    cfg = hostile_env.Config(target=tmp_path / "target", draft=tmp_path / "draft", out=tmp_path, deadline_s=300,
                             python=sys.executable)
    f = hostile_env.Facts(tmp_path / "facts.json", cfg)
    for arm in hr.ARMS:
        f.arm(arm)["starts"].append({"why": "first start", "startup_s": 54.8 if arm == "baseline" else 63.1})
    for case in hr.CASES:
        f.case("baseline", case, dict(CLEAN))
        if all_clean:
            f.case("eagle3", case, dict(CLEAN))
    if all_clean:
        return json.loads(f.path.read_text())
    f.case("baseline", "oov_ids_completions", {
        **CLEAN, "verdict": "server-died", "status": None, "message": "connection dropped: RemoteDisconnected",
        "why": "the server process is gone; /health: not asked: the server process is gone"})
    f.arm("baseline")["restarts"].append({"after": "oov_ids_completions", "why": "the server process is gone"})
    f.arm("baseline")["starts"].append({"why": "restart after oov_ids_completions", "startup_s": 41.0})
    f.case("baseline", "n_64", {**CLEAN, "verdict": "leak", "status": 200, "message": "",
                                "why": "KV pool not back to idle: 704 tokens used (idle 0), 0 requests"})
    f.case("baseline", "max_tokens_over_context", {**CLEAN, "verdict": "wrong", "reference_changed": True,
                                                   "why": "the reference request's text changed: ' Lyon'"})
    f.case("baseline", "admin_endpoints_unkeyed", {**CLEAN, "verdict": "wrong", "status": 200, "admin_accepted": 2,
                                                   "message": "{}", "why": "POST /slow_down (no key): 200: ACCEPTED"})
    for case in hr.CASES[:10]:
        f.case("eagle3", case, dict(CLEAN))
    for case in hr.CASES[10:20]:
        f.case("eagle3", case, {"verdict": "not-run", "why": "deadline: 31 s left of SGLB_DEADLINE_S=300"})
    return json.loads(f.path.read_text())  # eagle3's last 3 cases: never reached (the call was cut off)


def rows_by(r: dict) -> dict[tuple[str, str], dict]:
    return {(row["arm"], row["case"]): row for row in r["cases"]}


def test_every_arm_x_case_has_a_row_with_its_verdict(tmp_path, junit_xml):
    r = hr.build_receipt(facts(tmp_path), sr.parse_junit(junit_xml), pytest_rc=1, machine=MACHINE,
                         versions=VERSIONS, installed={})
    assert receipts.validate_receipt(r) == [] and r["kind"] == "lab-hostile" and r["tp"] == 1
    rows = rows_by(r)
    assert len(r["cases"]) == len(rows) == len(hr.ARMS) * len(hr.CASES) == 46
    assert [row["arm"] for row in r["cases"][:23]] == ["baseline"] * 23  # the baseline arm first
    dead = rows[("baseline", "oov_ids_completions")]
    assert (dead["verdict"], dead["status"], dead["message"]) == ("server-died", None,
                                                                  "connection dropped: RemoteDisconnected")
    assert rows[("baseline", "n_64")]["verdict"] == "leak"
    assert rows[("baseline", "oov_ids_generate")]["message"].startswith("Token id 32007 at position 2")
    assert rows[("eagle3", "stop_strings_10k")] == {**rows[("eagle3", "stop_strings_10k")], "verdict": "not-run",
                                                    "why": "deadline: 31 s left of SGLB_DEADLINE_S=300"}
    for case in hr.CASES[20:]:
        assert rows[("eagle3", case)]["verdict"] == "not-run"
        assert rows[("eagle3", case)]["why"] == hr.NEVER_REACHED
    s = r["summary"]
    assert (s["machine"], s["tp"], s["cases"]) == ("1x NVIDIA H200", 1, 46)
    assert (s["deaths"], s["leaks"], s["wrong"], s["reference_changed"], s["admin_accepted"]) == (1, 1, 2, 1, 2)
    assert (s["clean"], s["not_run"], s["server_died"]) == (19 + 10, 13, 1)
    assert s["restarts"] == {"baseline": 1, "eagle3": 0} and s["startup_s"]["baseline"] == [54.8, 41.0]
    assert (s["tests_passed"], s["tests_failed"], s["tests_skipped"]) == (2, 3, 1) and s["passed"] is False


def test_passed_needs_every_case_clean_on_both_arms_and_pytest_green(tmp_path):
    label = nvidia.machine_label(MACHINE)
    clean = facts(tmp_path, all_clean=True)
    s = hr.build_summary(clean, PASSED, label, 0)
    assert s["passed"] is True and s["clean"] == 46 and s["deaths"] == s["leaks"] == s["not_run"] == 0
    assert hr.build_summary(clean, PASSED, label, 1)["passed"] is False
    one_gone = json.loads(json.dumps(clean))
    del one_gone["arms"]["eagle3"]["cases"]["overload_c256"]  # a case silently dropped by the suite
    s = hr.build_summary(one_gone, PASSED, label, 0)
    assert s["passed"] is False and s["not_run"] == 1 and s["cases"] == 46
    empty = hr.build_summary({}, PASSED, label, 0)
    assert empty["not_run"] == 46 and empty["passed"] is False


def test_the_suite_runs_exactly_the_receipts_cases():
    """A case the suite had but the receipt did not list (or the other way round) would vanish from the receipt,
    or be not-run for ever: the two lists are one, in one order, with a budget each."""
    assert tuple(hostile_cases.REGISTRY) == hr.CASES
    assert set(hostile_cases.BUDGET_S) == set(hr.CASES) and all(b > 0 for b in hostile_cases.BUDGET_S.values())
    assert hostile_env.FACTS_SCHEMA == hr.FACTS_SCHEMA and tuple(hostile_env.ARM_SPECULATIVE) == hr.ARMS


def test_cli_writes_the_dated_receipt_and_survives_a_run_cut_short(tmp_path, junit_xml, monkeypatch):
    stub_machine(monkeypatch)
    facts(tmp_path)
    rc, path = receipt_cli(hr.main, junit_xml, tmp_path / "facts.json", tmp_path / "out", "lab-hostile", "1")
    assert rc == 0
    r = json.loads(path.read_text())
    assert path.name == hr.receipt_name() and r["pytest_rc"] == 1 and len(r["cases"]) == 46
    rc, r = cut_short(hr.main, tmp_path, "lab-hostile")
    assert rc == 0 and "not written" in r["junit_missing"] and r["summary"]["not_run"] == 46
    assert r["summary"]["passed"] is False


def test_cli_refuses_a_foreign_facts_file(tmp_path, junit_xml, capsys):
    bad = tmp_path / "facts.json"
    bad.write_text(json.dumps({"schema": ur.FACTS_SCHEMA}))  # the user-path suite's, not ours
    assert run_cli(hr.main, junit_xml, bad, tmp_path / "o") == 2
    assert "--facts" in capsys.readouterr().err


def test_the_api_key_never_reaches_the_facts(tmp_path):
    cfg = hostile_env.Config(target=tmp_path / "t", draft=tmp_path / "d", out=tmp_path, deadline_s=300,
                             python=sys.executable)
    cmd = cfg.masked(cfg.serve_command(30000, speculative=True))
    assert cfg.api_key not in cmd and cmd[cmd.index("--api-key") + 1] == "<api-key>"
    assert cmd[cmd.index("--host") + 1] == "0.0.0.0" and "--admin-api-key" not in cmd
    assert cmd[cmd.index("--speculative-algorithm") + 1] == "EAGLE3"
    assert cmd[cmd.index("--max-queued-requests") + 1] == str(hostile_env.MAX_QUEUED)
