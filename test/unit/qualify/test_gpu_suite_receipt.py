"""gpu_suite_receipt: the `lab-gpu-suite` receipt from a real pytest JUnit XML (conftest's junit_xml:
pass, fail, skip, a fixture error, a teardown error) and the suite's facts file. The facts are what test/gpu/labline
records, written by hand (the GPU measurements are simulated: 2x H200, the lab target with 10 layers).
"""

from __future__ import annotations

import json

from sglang_blackwell import receipts
from sglang_blackwell.qualify import gpu_suite_receipt as gr
from sglang_blackwell.qualify import suite_receipt as sr

MACHINE = {"gpu_name": "NVIDIA H200", "gpu_count": 2, "capability": "9.0", "links": "NVLink"}
VERSIONS = {"sglang": "0.5.14+sm120.1", "flashinfer": "0.6.12+sm120.1", "torch": "2.11.0+cu130", "cuda": "13.0",
            "nccl": "2.28.9", "driver": "580.159.04"}
INSTALLED = {"sglang": {"version": "0.5.14+sm120.1", "patches": ["P2", "P4", "P5", "P6"], "base": "0.5.14"}}


def facts(*, out_c: list[list[int]] | None = None, accept_off: float = 3.0476, verdict_ok: bool = True) -> dict:
    outs = [[701 + i, 702 + i, 703 + i] for i in range(4)]
    verify = [{"name": "step[TARGET_VERIFY bs=1]", "dur_us": 1500.0, "counts": {"fused": 19, "nccl_ar": 2}}] * 5
    arm = {"steps": {"greedy": "ok"}, "teardown_check": {"clean": True}}
    return {
        "schema": gr.FACTS_SCHEMA,
        "arms": {
            "A": {**arm, "greedy": {"outputs": outs}, "accept": {"accept_len": 3.0476},
                  "profile": {"verify_spans": verify,
                              "verdict": {"ok": verdict_ok, "expected_per_step": 19, "counts": [19] * 5}}},
            "B": {**arm, "greedy": {"outputs": outs}, "accept": {"accept_len": accept_off}},
            "C": {**arm, "greedy": {"outputs": out_c if out_c is not None else outs}},
        },
        "dist": {"symm_mem": {"bit_identical": True},
                 "workspace": {"measured_bytes": {"48": 10 << 20, "2048": 230 << 20}}},
    }


def test_receipt_summary_from_facts_and_junit(junit_xml):
    r = gr.build_receipt(facts(), sr.parse_junit(junit_xml), pytest_rc=1, machine=MACHINE, versions=VERSIONS,
                         installed=INSTALLED, command=["gpu_suite.sh"])
    assert receipts.validate_receipt(r) == []
    assert r["kind"] == "lab-gpu-suite" and r["base"] == "0.5.14" and r["tp"] == 2
    s = r["summary"]
    assert s["machine"] == "2x NVIDIA H200" and s["tp"] == 2
    assert s["fusion_in_verify"] is True and s["greedy_equal"] is True
    assert s["accept_len_fusion_on"] == 3.0476 and s["accept_len_fusion_off"] == 3.0476
    assert (s["tests_passed"], s["tests_failed"], s["tests_skipped"]) == (2, 3, 1)
    assert s["fused_ar_per_verify"] == 19 and s["expected_fused_ar_per_verify"] == 19
    assert (s["workspace_mib_p5"], s["workspace_mib_upstream"]) == (10.0, 230.0)
    assert s["symm_mem_bit_identical"] is True and s["teardown_clean"] is True
    assert s["passed"] is False  # tests failed
    assert r["installed"] == INSTALLED and len(r["tests"]) == 6


def test_summary_passed_needs_every_test_passed_and_rc_0():
    junit = {"counts": {"passed": 30, "failed": 0, "error": 0, "skipped": 0}, "cases": []}
    assert gr.build_summary(facts(), junit, "2x NVIDIA H200", 0)["passed"] is True
    assert gr.build_summary(facts(), junit, "2x NVIDIA H200", 1)["passed"] is False
    skipped = {"counts": {"passed": 29, "failed": 0, "error": 0, "skipped": 1}, "cases": []}
    assert gr.build_summary(facts(), skipped, "2x NVIDIA H200", 0)["passed"] is False


def test_derived_values_follow_the_facts():
    assert gr.derive(facts(out_c=[[701, 702, 999]] * 4))["greedy_equal"] is False
    assert gr.derive(facts(verdict_ok=False))["fusion_in_verify"] is False
    d = gr.derive(facts(accept_off=1.0))
    assert d["accept"]["ok"] is False and d["accept_len_fusion_off"] == 1.0
    f = facts()
    del f["arms"]["C"]  # C cut by the deadline: the spec comparison is unknown
    assert gr.derive(f)["greedy_equal"] is None and gr.derive(f)["greedy_fusion"]["equal"] is True
    empty = gr.derive({"schema": gr.FACTS_SCHEMA})
    assert empty["fusion_in_verify"] is None and empty["greedy_equal"] is None
    assert empty["accept_len_fusion_on"] is None and empty["teardown_clean"] is None


def test_cli_writes_the_dated_receipt(tmp_path, junit_xml, monkeypatch):
    monkeypatch.setattr(sr, "installed_stack", lambda: INSTALLED)
    monkeypatch.setattr(receipts, "collect_versions", lambda: VERSIONS)
    from sglang_blackwell.box import nvidia_smi as nvidia

    monkeypatch.setattr(nvidia, "machine", lambda: MACHINE)
    (tmp_path / "facts.json").write_text(json.dumps(facts()))
    out = tmp_path / "out"
    rc = gr.main(["--junit", str(junit_xml), "--facts", str(tmp_path / "facts.json"), "--out", str(out),
                  "--pytest-rc", "1"])
    assert rc == 0
    (path,) = out.glob("lab-line-gpu-suite-*.json")
    assert path.name == gr.receipt_name()
    r = json.loads(path.read_text())
    assert r["summary"]["tests_failed"] == 3 and r["pytest_rc"] == 1
    assert not list(out.glob(".*.tmp"))


def test_cli_without_junit_or_facts_still_writes_a_receipt(tmp_path, monkeypatch):
    monkeypatch.setattr(sr, "installed_stack", lambda: {})
    monkeypatch.setattr(receipts, "collect_versions", lambda: VERSIONS)
    from sglang_blackwell.box import nvidia_smi as nvidia

    monkeypatch.setattr(nvidia, "machine", lambda: MACHINE)
    rc = gr.main(["--junit", str(tmp_path / "none.xml"), "--facts", str(tmp_path / "none.json"), "--out",
                  str(tmp_path), "--pytest-rc", "124"])
    assert rc == 0
    r = json.loads(next(tmp_path.glob("lab-line-gpu-suite-*.json")).read_text())
    assert r["summary"]["tests_passed"] == 0 and r["summary"]["passed"] is False
    assert "not written" in r["junit_missing"] and r["summary"]["fusion_in_verify"] is None


def test_cli_refuses_a_foreign_facts_file(tmp_path, junit_xml, capsys):
    bad = tmp_path / "facts.json"
    bad.write_text(json.dumps({"schema": "something/else"}))
    rc = gr.main(["--junit", str(junit_xml), "--facts", str(bad), "--out", str(tmp_path / "out")])
    assert rc == 2
    assert str(bad) in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    bad.write_text("{not json")
    assert gr.main(["--junit", str(junit_xml), "--facts", str(bad), "--out", str(tmp_path / "out")]) == 2


def test_cli_refuses_broken_junit(tmp_path, capsys):
    xml = tmp_path / "j.xml"
    xml.write_text("<testsuites><testsuite")
    assert gr.main(["--junit", str(xml), "--facts", str(tmp_path / "f.json"), "--out", str(tmp_path)]) == 2
    assert "--junit" in capsys.readouterr().err
