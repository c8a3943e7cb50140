"""The verdict of `bench eagle3`: spread counts against the claim, break-even accept length, which side
regressed, interleaving order."""

from __future__ import annotations

import pytest

from sglang_blackwell.bench.eagle3.config_verdict import VerdictSpec
from sglang_blackwell.bench.eagle3.harness import interleaved
from sglang_blackwell.bench.eagle3.verdict import aggregate, diagnose, evaluate, summary


def run(arm: str, tok_s: float, *, step_ms: float | None = None, accept: float | None = None, c: int = 1,
        error: str | None = None, profile: dict | None = None) -> dict:
    return {"arm": arm, "repeat": 1, "error": error, "profile": profile,
            "levels": {str(c): {"tok_s": tok_s, "step_ms": step_ms, "accept_len": accept, "ttft_ms": 5.0,
                                "tpot_ms": 1e3 / tok_s, "e2e_ms": 100.0, "accept_len_server": accept}}}


V = VerdictSpec(baseline="baseline", speculative=("eagle3",), min_ratio={1: 1.3}, fusion_on=None,
                fusion_off=None, min_fusion_gain=None, expect_accept_len=2.5, expect_break_even=1.9)


def verdict_of(runs: list[dict], v: VerdictSpec = V, problems: list[str] | None = None) -> dict:
    agg = aggregate(runs, ["baseline", "eagle3", "eagle3+fusion"], (1,))
    return evaluate(agg, v, (1,), problems=problems)


def test_pass_when_worst_eagle_beats_best_baseline_by_the_ratio() -> None:
    runs = [run("baseline", t, step_ms=2.0) for t in (500, 480, 520)]
    runs += [run("eagle3", t, step_ms=3.0, accept=2.8) for t in (700, 690, 720)]  # 690 >= 1.3 x 520 = 676
    v = verdict_of(runs)
    assert v["passed"], v["reasons"]
    (k,) = v["checks"]
    assert k["worst_spec_tok_s"] == 690 and k["best_baseline_tok_s"] == 520
    assert k["median_ratio"] == pytest.approx(700 / 500, abs=1e-4)
    assert k["break_even_accept_len"] == pytest.approx(1.5)  # 3.0 ms round / 2.0 ms decode
    assert k["accept_len"] == pytest.approx(2.8)
    assert "diagnosis" not in k


def test_spread_counts_against_the_claim() -> None:
    # medians 700 vs 500 = 1.40x passes a median rule, but the worst repeat (600) is below 1.3 x 560
    runs = [run("baseline", t, step_ms=2.0) for t in (500, 480, 560)]
    runs += [run("eagle3", t, step_ms=3.0, accept=2.8) for t in (700, 600, 720)]
    v = verdict_of(runs)
    assert not v["passed"]
    k = v["checks"][0]
    assert k["median_ratio"] == pytest.approx(1.4)
    assert k["worst_over_best"] == pytest.approx(600 / 560, abs=1e-4)
    assert k["diagnosis"]["regressed"] == ["spread"]  # accept and break-even both as expected
    assert "concurrency 1, eagle3: worst 600" in v["reasons"][0]


def test_acceptance_regressed() -> None:
    runs = [run("baseline", 500, step_ms=2.0), run("eagle3", 450, step_ms=3.0, accept=1.4)]
    k = verdict_of(runs)["checks"][0]
    assert not k["passed"]
    assert k["diagnosis"]["regressed"] == ["acceptance"]
    notes = " ".join(k["diagnosis"]["notes"])
    assert "accept length 1.40 < expected 2.50" in notes
    assert "needs accept >= 1.95" in notes  # 1.3 x break-even 1.5


def test_verify_cost_regressed() -> None:
    runs = [run("baseline", 500, step_ms=2.0), run("eagle3", 520, step_ms=5.0, accept=2.8)]
    k = verdict_of(runs)["checks"][0]
    assert k["break_even_accept_len"] == pytest.approx(2.5)
    assert k["diagnosis"]["regressed"] == ["verify cost"]


def test_both_sides_regressed() -> None:
    runs = [run("baseline", 500, step_ms=2.0), run("eagle3", 300, step_ms=5.0, accept=1.2)]
    assert verdict_of(runs)["checks"][0]["diagnosis"]["regressed"] == ["acceptance", "verify cost"]


def test_time_outside_the_decode_loop() -> None:
    # step times predict 2.8 / 1.5 = 1.87x, the client measures 1.0x: the time goes elsewhere
    runs = [run("baseline", 500, step_ms=2.0), run("eagle3", 500, step_ms=3.0, accept=2.8)]
    assert verdict_of(runs)["checks"][0]["diagnosis"]["regressed"] == ["outside the decode loop"]


def test_undetermined_without_expectations() -> None:
    v = VerdictSpec(**{**V.__dict__, "expect_accept_len": None, "expect_break_even": None})
    runs = [run("baseline", 500, step_ms=2.0), run("eagle3", 450, step_ms=3.0, accept=1.4)]
    d = verdict_of(runs, v)["checks"][0]["diagnosis"]
    assert d["regressed"] == ["undetermined"]


def test_diagnose_without_step_times_says_so() -> None:
    d = diagnose(ratio=1.3, accept_len=None, break_even=None, median_ratio=0.9, spread_fail=True,
                 expect_accept_len=2.5, expect_break_even=1.9)
    assert any("step times missing" in n for n in d["notes"])


def test_missing_arm_and_failed_runs_fail() -> None:
    v = verdict_of([run("baseline", 500, step_ms=2.0)])
    assert not v["passed"] and "no successful run of arm 'eagle3'" in v["checks"][0]["why"]
    runs = [run("baseline", 500), run("eagle3", 900, accept=2.9), run("eagle3", 0.1, error="server died")]
    agg = aggregate(runs, ["baseline", "eagle3"], (1,))
    assert agg["eagle3"]["runs"] == 1  # the failed run is not averaged in ...
    v = evaluate(agg, V, (1,), problems=["arm eagle3 repeat 2: server died"])
    assert v["checks"][0]["passed"] and not v["passed"]  # ... but it fails the verdict
    assert v["reasons"] == ["arm eagle3 repeat 2: server died"]


def test_fusion_prefers_profiled_verify_time_and_can_be_required() -> None:
    prof = {"on": {"source": "GPU", "stages": {"verify": {"median_ms": 0.80}, "draft": {"median_ms": 0.5}}},
            "off": {"source": "GPU", "stages": {"verify": {"median_ms": 1.00}, "draft": {"median_ms": 0.5}}}}
    decode = {"source": "GPU", "stages": {"decode": {"median_ms": 1.0}}}
    runs = [run("baseline", 500, step_ms=2.0, profile=decode),
            run("eagle3", 800, step_ms=3.0, accept=2.8, profile=prof["off"]),
            run("eagle3+fusion", 850, step_ms=2.8, accept=2.8, profile=prof["on"])]
    v = VerdictSpec(**{**V.__dict__, "fusion_on": "eagle3+fusion", "fusion_off": "eagle3",
                       "min_fusion_gain": 0.15})
    out = verdict_of(runs, v)
    f = out["fusion"]
    assert f["verify_ms_on"] == 0.80 and f["verify_ms_off"] == 1.00
    assert f["gain"] == pytest.approx(0.20) and f["gain_basis"] == "verify (profiler)" and f["passed"]
    assert f["round_ms_on"] == 2.8 and f["round_ms_off"] == 3.0
    assert out["passed"]
    assert out["table"][0]["break_even_profiled"] == pytest.approx((0.5 + 1.0) / 1.0)
    # profiles recorded before the all-reduce share was measured carry none: reported as unknown
    assert f["verify_allreduce_norm_ms_on"] is None and f["verify_allreduce_norm_ms_off"] is None
    # CPU-side spans only (no CUDA activity in the trace): not GPU time, not used
    for r in runs:
        r["profile"] = dict(r["profile"], source="CPU-side spans only (no GPU events)")
    assert verdict_of(runs, v)["fusion"]["verify_ms_on"] is None
    # without a profile: the round time decides, 1 - 2.9/3.0 = 3% < 15% fails the verdict
    for r in runs:
        r["profile"] = None
    runs[2]["levels"]["1"]["step_ms"] = 2.9
    out = verdict_of(runs, v)
    assert out["fusion"]["gain_basis"] == "draft+verify round (step times)"
    assert not out["fusion"]["passed"] and not out["passed"]
    assert any("fusion gain" in r for r in out["reasons"])


def test_summary_fields() -> None:
    runs = [run("baseline", 500, step_ms=2.0), run("eagle3", 900, step_ms=3.0, accept=2.8)]
    agg = aggregate(runs, ["baseline", "eagle3"], (1,))
    v = evaluate(agg, V, (1,))
    s = summary(agg, v, V, machine="2x NVIDIA H200", tp=2, config="lab-synthetic")
    assert {"machine", "tp", "config", "speedup_c1", "accept_len", "break_even_accept_len",
            "verify_ms_fusion_on", "verify_ms_fusion_off", "passed"} <= set(s)
    assert s["speedup_c1"] == pytest.approx(1.8) and s["break_even_accept_len"] == pytest.approx(1.5)
    assert s["passed"] is True


def test_interleaving_order() -> None:
    assert interleaved(["a", "b", "c"], 2) == [(1, "a"), (1, "b"), (1, "c"), (2, "a"), (2, "b"), (2, "c")]
    assert interleaved(["a"], 3) == [(1, "a"), (2, "a"), (3, "a")]


def test_fusion_reports_the_allreduce_and_norm_time_inside_verify() -> None:
    def prof(verify_ms: float, ar: float, norm: float) -> dict:
        return {"source": "GPU", "stages": {"verify": {"median_ms": verify_ms, "allreduce_ms": ar,
                                                       "allreduce_calls": 21, "add_rmsnorm_ms": norm}}}

    runs = [run("baseline", 500, step_ms=2.0),
            run("eagle3", 800, step_ms=3.0, accept=2.8, profile=prof(3.2, 0.17, 0.06)),
            dict(run("eagle3", 790, step_ms=3.0, accept=2.8, profile=prof(3.3, 0.19, 0.06)), repeat=2),
            dict(run("eagle3", 810, step_ms=3.0, accept=2.8, profile={"source": "GPU", "stages": {
                "verify": {"median_ms": 3.1}}}), repeat=3),  # an older run: no all-reduce share, left out
            run("eagle3+fusion", 850, step_ms=2.8, accept=2.8, profile=prof(3.1, 0.13, 0.0))]
    v = VerdictSpec(**{**V.__dict__, "fusion_on": "eagle3+fusion", "fusion_off": "eagle3"})
    agg = aggregate(runs, ["baseline", "eagle3", "eagle3+fusion"], (1,))
    assert agg["eagle3"]["profile_allreduce_norm_ms"]["verify"]["values"] == [0.23, 0.25]
    out = evaluate(agg, v, (1,))
    f = out["fusion"]
    assert f["verify_allreduce_norm_ms_off"] == pytest.approx(0.24) and f["verify_allreduce_norm_ms_on"] == 0.13
    assert f["verify_ms_off"] == 3.2  # all three runs count for the step time itself
    s = summary(agg, out, v, machine="m", tp=2, config="c")
    assert s["verify_allreduce_norm_ms_fusion_off"] == pytest.approx(0.24)


def test_accept_length_tolerance_is_a_two_sided_check_and_reaches_the_summary() -> None:
    """A draft whose acceptance is computed before the run (the missing-by-design lab draft): the measured accept
    length must land within expect_accept_len +- accept_len_tolerance, on either side."""
    import dataclasses

    v = dataclasses.replace(V, min_ratio={1: 1.1}, expect_accept_len=2.04, accept_len_tolerance=0.03)
    base = [run("baseline", t, step_ms=6.0) for t in (160, 162)]
    for accept, ok in ((2.04, True), (2.069, True), (2.011, True), (2.08, False), (1.99, False), (3.0, False)):
        runs = base + [run("eagle3", 240, step_ms=9.0, accept=accept)]
        out = verdict_of(runs, v)
        k = next(k for k in out["checks"] if k.get("kind") == "accept_len")
        assert k["passed"] is ok and out["passed"] is ok, (accept, out["reasons"])
        if not ok:
            assert any(f"accept length {accept:.4f} outside 2.04 +- 0.03" in r for r in out["reasons"])
        s = summary(aggregate(runs, ["baseline", "eagle3"], (1,)), out, v, machine="m", tp=1, config="c",
                    api="openai", target_layers=61)
        assert s["expect_accept_len"] == 2.04 and s["accept_len_tolerance"] == 0.03 and s["target_layers"] == 61
        assert s["accept_len"] == pytest.approx(accept) and s["speedup_c1"] == pytest.approx(240 / 161, abs=1e-4)
    no_accept = verdict_of(base + [run("eagle3", 240, step_ms=9.0)], v)
    assert not no_accept["passed"] and "no accept length measured" in " ".join(no_accept["reasons"])
