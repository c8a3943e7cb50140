"""bench-eagle3 receipts carry the envelope every receipt has and the summary the issue asks for; the README's
results table is generated from such receipts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_fakes import write_config

from sglang_blackwell.bench.eagle3.config import load_config
from sglang_blackwell.bench.eagle3.readme_table import BEGIN, END, load_receipts, markdown_table, update_block
from sglang_blackwell.bench.eagle3.receipt import build_receipt
from sglang_blackwell.cli import main
from sglang_blackwell.errors import UserError
from sglang_blackwell.receipts import validate_receipt, write_receipt


def level(tok_s: float, step_ms: float, accept: float | None) -> dict:
    return {"tok_s": tok_s, "step_ms": step_ms, "accept_len": accept, "accept_len_server": accept,
            "ttft_ms": 10.0, "tpot_ms": 1e3 / tok_s, "e2e_ms": 300.0, "itl_ms_p99": 2e3 / tok_s}


def runs_for(eagle_tok_s: list[float], server: dict | None = None) -> list[dict]:
    host = {"machine": {"gpu_name": "NVIDIA H200", "gpu_count": 2, "capability": "9.0", "links": "NVLink"},
            "versions": {"sglang": None, "flashinfer": "0.6.12", "torch": "2.11.0+cu130", "cuda": "13.0",
                         "nccl": "2.28.9", "driver": "580.159.04"}}
    runs = []
    for i, t in enumerate(eagle_tok_s, 1):
        for arm, lv in (("baseline", level(500, 2.0, None)), ("eagle3", level(t, 3.0, 2.8)),
                        ("eagle3+fusion", level(t * 1.1, 2.7, 2.8))):
            runs.append({"arm": arm, "repeat": i, "mode": "launch", "error": None, "profile": None,
                         "host": host, "server": server or {"version": "0.5.14"},
                         "levels": {"1": lv, "2": lv}})
    return runs


@pytest.fixture
def cfg(tmp_path: Path):
    return load_config(write_config(tmp_path, fusion_env={"FAKE_ROUND_MS": "5"}))


def test_receipt_schema_and_summary(cfg) -> None:
    arms = ["baseline", "eagle3", "eagle3+fusion"]
    r = build_receipt(cfg, arms, runs_for([800, 820]), repeats=2, mode="launch")
    assert validate_receipt(r) == []
    s = r["summary"]
    assert s == {**s, "machine": "2x NVIDIA H200", "tp": 2, "config": "fake", "passed": True}
    assert s["speedup_c1"] == pytest.approx(1.62) and s["break_even_accept_len"] == pytest.approx(1.5)
    assert s["round_ms_fusion_on"] == 2.7 and s["round_ms_fusion_off"] == 3.0
    # the verdict arm (eagle3) at c=1: medians over the repeats of each run's p50 / p99
    assert s["api"] == "generate" and s["engine"] == "sglang 0.5.14"  # write_config: tokenizer "none"
    assert s["tok_s_c1"] == 810.0 and s["baseline_tok_s_c1"] == 500.0 and s["ttft_ms_p50"] == 10.0
    assert s["tpot_ms_p50"] == pytest.approx((1e3 / 800 + 1e3 / 820) / 2, abs=1e-4)
    assert s["itl_ms_p99"] == pytest.approx((2e3 / 800 + 2e3 / 820) / 2, abs=1e-4)
    assert r["workload"]["api"] == "generate" and r["verdict"]["notes"] == []
    # the versions of the machine that measured (stored in the runs), not of the one building the receipt
    assert r["versions"]["sglang"] == "0.5.14" and r["versions"]["driver"] == "580.159.04"
    assert r["config"]["sha256"] == cfg.sha256 and r["workload"]["prompts_sha256"]
    json.dumps(r)  # serializable as is
    r_bad = dict(r)
    del r_bad["summary"]
    assert "missing key 'summary'" in validate_receipt(r_bad)


def test_readme_table_from_receipts(cfg, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results = tmp_path / "results"
    old = build_receipt(cfg, ["baseline", "eagle3"], runs_for([600]), repeats=1, mode="launch")
    old["created"] = "2026-11-01T00:00:00+00:00"
    new = build_receipt(cfg, ["baseline", "eagle3", "eagle3+fusion"], runs_for([900, 880]), repeats=2,
                        mode="launch")
    new["created"] = "2026-11-30T00:00:00+00:00"
    write_receipt(old, results / "bench-eagle3_fake_old.json")
    write_receipt(new, results / "bench-eagle3_fake_new.json")
    (results / "other.json").write_text(json.dumps({"kind": "bench-allreduce"}))  # other kinds are skipped
    recs = load_receipts(results)
    assert len(recs) == 2
    table = markdown_table(recs, link_base=tmp_path)
    lines = table.splitlines()
    assert lines[0].startswith("| config | machine | TP | server | API | EAGLE-3 / baseline, c=1 | "
                               "tok/s c=1 (baseline) | TTFT p50 ms | TPOT p50 ms | ITL p99 ms | accept length |")
    assert len(lines) == 3  # header, rule, the latest receipt per (config, machine, engine)
    # tok/s median(900, 880) = 890, TPOT median(1000/900, 1000/880) = 1.1237, ITL p99 median(2000/900, 2000/880)
    row = ("| fake | 2x NVIDIA H200 | 2 | sglang 0.5.14 | generate | 1.78x | 890.0 (500.0) | 10.0 | 1.12 | 2.25 "
           "| 2.80 | 1.50 | - / - | pass | 2026-11-30 |")
    assert row in lines[2]
    assert "(results/bench-eagle3_fake_new.json)" in lines[2]
    every = markdown_table(recs, latest_only=False).splitlines()
    assert len(every) == 4 and "| 1.20x |" in every[3] and "| FAIL |" in every[3]  # 600/500 < 1.3: failed

    # a peer's receipt of the same config and machine is a row of its own, not a newer version of ours
    peer = build_receipt(cfg, ["baseline", "eagle3"], runs_for([560], {"engine": "vllm", "engine_version": "0.18.0",
                                                                        "api": "chat"}),
                         repeats=1, mode="attach")
    assert peer["versions"]["vllm"] == "0.18.0" and peer["summary"]["engine"] == "vllm 0.18.0"
    write_receipt(peer, results / "bench-eagle3_fake_vllm.json")
    rows = markdown_table(load_receipts(results)).splitlines()[2:]
    assert sorted(r.split(" | ")[3] for r in rows) == ["sglang 0.5.14", "vllm 0.18.0"]
    (results / "bench-eagle3_fake_vllm.json").unlink()

    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n{BEGIN}\nstale\n{END}\n\ntail\n")
    assert main(["bench", "table", "--results", str(results), "--update", str(readme)]) == 0
    text = readme.read_text()
    assert "stale" not in text and "| fake | 2x NVIDIA H200 |" in text and text.endswith("\n\ntail\n")
    readme.write_text("no markers\n")
    with pytest.raises(UserError, match="README.md: needs exactly one"):
        update_block(readme, table)
    (results / "broken.json").write_text(json.dumps({"kind": "bench-eagle3", "summary": {}}))
    with pytest.raises(UserError, match=r"broken.json: invalid receipt: missing key 'schema'"):
        load_receipts(results)


def test_receipts_from_before_the_openai_client_fill_the_new_columns_from_their_aggregate() -> None:
    results = Path(__file__).resolve().parents[4] / "benchmark" / "results"
    recs = [(p, r) for p, r in load_receipts(results) if "tok_s_c1" not in r["summary"]]
    assert recs, "the lab receipts of 2026-11-30 predate the new summary keys"
    for p, r in recs:
        agg = r["aggregate"]
        v = r["config"]["content"]["verdict"]
        spec, base = agg[v["speculative"][0]]["levels"]["1"], agg[v["baseline"]]["levels"]["1"]
        row = next(ln for ln in markdown_table([(p, r)]).splitlines() if p.name in ln)
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[3:6] == [f"sglang {r['versions']['sglang']}", "generate", f"{r['summary']['speedup_c1']:.2f}x"]
        assert cells[6:10] == [f"{spec['tok_s']['median']:.1f} ({base['tok_s']['median']:.1f})",
                               f"{spec['ttft_ms']['median']:.1f}", f"{spec['tpot_ms']['median']:.2f}", "-"]


@pytest.mark.parametrize("bad", [float("inf"), float("nan"), 0.0, -800.0])
def test_a_live_run_with_a_bad_measurement_fails_the_verdict_naming_it(cfg, bad: float) -> None:
    """A measurement the harness took that is not finite and plausible (a server's NaN, a zero window) makes its
    run a failed one: the verdict FAILs naming the arm, repeat, level and field, and never divides by it."""
    runs = runs_for([800, 820])
    runs[1]["levels"]["1"] = {**runs[1]["levels"]["1"], "tok_s": bad}  # eagle3, repeat 1
    r = build_receipt(cfg, ["baseline", "eagle3", "eagle3+fusion"], runs, repeats=2, mode="launch")
    assert r["summary"]["passed"] is False
    assert any(x.startswith("arm eagle3 repeat 1: bad measurement: levels.1.tok_s = ")
               for x in r["verdict"]["reasons"]), r["verdict"]["reasons"]
    assert r["aggregate"]["eagle3"]["levels"]["1"]["tok_s"]["values"] == [820.0]  # the good repeat only
