"""Report, receipt and plot of `bench allreduce`, built from a synthetic results dict (simulated GPU: the lab
reference numbers), and the whole no-GPU path `--from-receipt ... --tune` through the CLI."""

from __future__ import annotations

import json

import pytest

from sglang_blackwell import cli
from sglang_blackwell.bench.allreduce import report as ar_report
from sglang_blackwell.box import allreduce_table as tbl
from sglang_blackwell.receipts import validate_receipt, write_receipt
from support.allreduce_results import H200_NET_US, build_results

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def results():
    return build_results(H200_NET_US)


def test_summary_at_t3(results):
    s = ar_report.summary(results, layers=61)
    assert s["allreduces_per_forward"] == 122
    assert s["t3_chosen_backend"] == "fi_fused_oneshot"
    assert s["t3_chosen_us"] == pytest.approx(5.48)
    assert s["t3_nccl_norm_us"] == pytest.approx(10.14)
    assert s["t3_chosen_over_nccl_norm"] == pytest.approx(0.54, abs=1e-3)
    assert s["per_forward_us_t3"] == pytest.approx(5.48 * 122, abs=0.1)
    assert s["per_forward_us_t3_nccl_norm"] == pytest.approx(10.14 * 122, abs=0.1)
    assert s["t3_ar_only_backend"] == "fi_ar_oneshot" and s["t3_nccl_us"] == pytest.approx(8.34)
    assert s["checks_passed"] and s["failed_checks"] == []
    assert s["machine"] == "2x NVIDIA H200 (sm90, nvlink)" and s["tp"] == 2


def test_summary_skips_failed_backend(results):
    r = build_results(H200_NET_US, failed={"fi_fused_oneshot": [512]})
    s = ar_report.summary(r, layers=61)
    assert s["t3_chosen_backend"] == "nccl_norm"  # fused one-shot excluded everywhere after one failure
    assert not s["checks_passed"] and s["failed_checks"] == ["fi_fused_oneshot@T=512"]


def test_summary_without_t3():
    r = build_results({"nccl": [8.0, 9.0], "nccl_norm": [10.0, 11.0]}, tokens=[1, 2])
    s = ar_report.summary(r, layers=61)
    assert s["t3_chosen_backend"] is None and s["per_forward_us_t3"] is None


def test_receipt_schema(results, tmp_path):
    r = ar_report.build_receipt(results, layers=61)
    assert validate_receipt(r) == []
    assert r["kind"] == "bench-allreduce" and r["tp"] == 2
    assert r["machine"]["gpu_name"] == "NVIDIA H200" and r["machine"]["links"]["type"] == "nvlink"
    assert r["versions"]["flashinfer"] == "0.6.12"
    for k in ("machine", "tp", "t3_chosen_over_nccl_norm", "per_forward_us_t3"):
        assert k in r["summary"]
    path = write_receipt(r, tmp_path / "r.json")
    assert json.loads(path.read_text())["results"]["latency_us"]["nccl"]["3"]["net"] == pytest.approx(8.34)


def test_text_report(results):
    r = build_results(H200_NET_US, failed={"symm_oneshot": [64]})
    text = ar_report.format_report(r, layers=61)
    assert "all-reduce + residual + RMSNorm" in text and "all-reduce only" in text
    line = next(ln for ln in text.splitlines() if ln.startswith("symm_oneshot "))
    assert "12.87!" in line  # failed check marked
    assert "skip" in next(ln for ln in text.splitlines() if ln.startswith("fi_fused_twoshot"))
    fwd = next(ln for ln in text.splitlines() if ln.split()[:1] == ["3"])
    assert "fi_fused_oneshot" in fwd and "669" in fwd and "1237" in fwd


def test_plot(results, tmp_path):
    pytest.importorskip("matplotlib")
    results["nccl_profiles"] = {"pcie-ll": build_results({"nccl": H200_NET_US["nccl"]})}
    p = ar_report.plot(results, tmp_path / "plots" / "ar.png")
    data = p.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 10_000
    assert [f.name for f in p.parent.iterdir()] == ["ar.png"]


def test_from_receipt_end_to_end(results, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    src = write_receipt(ar_report.build_receipt(results, layers=61), tmp_path / "lab.json")
    table, plot, out = tmp_path / "table.json", tmp_path / "p.png", tmp_path / "again.json"
    rc = cli.main(["bench", "allreduce", "--from-receipt", str(src), "--tune", "--table", str(table),
                   "--plot", str(plot), "--out", str(out)])
    stdout = capsys.readouterr().out
    assert rc == 0
    assert "SGLANG_FLASHINFER_ALLREDUCE_FUSION_MAX_TOKENS=512" in stdout
    t = tbl.load_table(table)
    assert list(t["entries"]) == ["NVIDIA H200|sm90|tp2|nvlink"]
    assert plot.read_bytes().startswith(PNG_MAGIC)
    again = json.loads(out.read_text())
    assert validate_receipt(again) == []
    assert again["tune"]["knobs"]["decisions"]["fusion_max_tokens"] == 512
    assert again["summary"]["t3_chosen_backend"] == "fi_fused_oneshot"


def test_from_receipt_rejects_other_receipts(tmp_path, capsys):
    (tmp_path / "x.json").write_text(json.dumps({"schema": "sglang-blackwell/receipt/1", "kind": "other"}))
    rc = cli.main(["bench", "allreduce", "--from-receipt", str(tmp_path / "x.json")])
    assert rc == 2 and "not a bench-allreduce receipt" in capsys.readouterr().err


def test_exit_code_on_failed_numerics(tmp_path, capsys):
    r = build_results(H200_NET_US, failed={"symm_twoshot": [8]})
    src = write_receipt(ar_report.build_receipt(r, layers=61), tmp_path / "lab.json")
    rc = cli.main(["bench", "allreduce", "--from-receipt", str(src), "--no-plot"])
    assert rc == 1 and "NUMERICS FAILED: symm_twoshot@T=8" in capsys.readouterr().err
