"""From arm runs to medians with spread, and from those to a verdict that can fail.

The rule: at every concurrency named in verdict.min_ratio, for every speculative arm of the verdict,
    worst speculative repeat (output tok/s)  >=  min_ratio  x  best baseline repeat
so launch-to-launch spread counts against the claim, not for it (on the lab the same arm moved 25-40% between
launches). Also reported: the median ratio, the measured accept length, and the break-even accept length
    break_even = round_ms / decode_ms
(seconds per draft+verify round of the speculative arm over seconds per decode step of the baseline, both
from SGLang's step-time recording at that concurrency): speculation pays only where accept length >
break-even, and the step-time model predicts a speedup of accept_len / break_even.
"""

from __future__ import annotations

from typing import Any

from . import plausible, summary_keys
from .config_verdict import METRICS, VerdictSpec
from .stats import median

# per arm and concurrency, spread over the repeats (bare latency names are p50 within a run)
LEVEL_METRICS = ("tok_s", "accept_len", "accept_len_server", "step_ms", "step_ms_median", "ttft_ms",
                 "ttft_ms_p99", "tpot_ms", "tpot_ms_p99", "itl_ms", "itl_ms_p99", "e2e_ms", "e2e_ms_p99",
                 "tokens_per_chunk")
RULE = "worst speculative repeat >= min_ratio x best baseline repeat (output tok/s), per concurrency"


def is_number(v: Any) -> bool:
    """A finite JSON number (not NaN, not Infinity, not an integer too large for a float, not a bool)."""
    return plausible.as_float(v) is not None


def metrics_problem(where: str, d: Any, keys: tuple[str, ...] = LEVEL_METRICS) -> str | None:
    """What is wrong with a recorded window's metrics (a level, a grid cell, a first burst) for the receipt that
    reads them: not an object, or a metric there that is not a plausible measurement (plausible.RANGES: finite,
    a rate > 0, ...); None: nothing."""
    if not isinstance(d, dict):
        return f"{where} is not an object"
    for m in keys:
        if d.get(m) is not None and (why := plausible.metric_problem(m, d[m])) is not None:
            return f"{where}.{m} = {why}"
    return None


def spread(values: list[float]) -> dict[str, Any] | None:
    if not values:
        return None
    return {"median": round(median(values), 4), "min": round(min(values), 4),
            "max": round(max(values), 4), "n": len(values), "values": [round(v, 4) for v in values]}


def _median(values: list[float]) -> float | None:
    return median(values) if values else None


def aggregate(runs: list[dict[str, Any]], arms: list[str], concurrency: tuple[int, ...]) -> dict[str, Any]:
    """{arm: {str(c): {metric: spread}}} over the successful runs of each arm."""
    out: dict[str, Any] = {}
    for arm in arms:
        ok = [r for r in runs if r["arm"] == arm and not r.get("error")]
        per_c: dict[str, Any] = {}
        for c in concurrency:
            levels = [r["levels"][str(c)] for r in ok if str(c) in r.get("levels", {})]
            per_c[str(c)] = {m: spread([lv[m] for lv in levels if lv.get(m) is not None])
                             for m in LEVEL_METRICS}
        # GPU span times only: CPU-side spans of CUDA-graph replays measure launches, not the work
        profiles = [r["profile"] for r in ok if (r.get("profile") or {}).get("stages")]
        prof = [p["stages"] for p in profiles if str(p.get("source")).startswith("GPU")]
        stages = sorted({s for p in prof for s in p})
        # all-reduce + residual-add/RMSNorm kernel time inside each stage (what fusion acts on); runs recorded
        # before trace.stage_times measured it have none
        comm = {s: spread([p[s]["allreduce_ms"] + p[s]["add_rmsnorm_ms"] for p in prof
                           if "allreduce_ms" in p.get(s, {})]) for s in stages}
        out[arm] = {"levels": per_c, "runs": len(ok),
                    "profile_ms": {s: spread([p[s]["median_ms"] for p in prof if s in p]) for s in stages},
                    "profile_allreduce_norm_ms": {s: v for s, v in comm.items() if v}}
        verify = profile_verify([p.get("verify_ranks") for p in profiles])
        if verify:
            out[arm]["profile_verify"] = verify
    return out


def _p50(d: Any) -> float | None:
    return d.get("p50") if isinstance(d, dict) else None


def _per_rank_median(rows: list[list[float]]) -> list[float] | None:
    """Element-wise median of per-rank lists (runs with the same rank count)."""
    rows = [r for r in rows if isinstance(r, list) and r]
    if not rows or len({len(r) for r in rows}) != 1:
        return None
    return [round(median([r[i] for r in rows if r[i] is not None]), 4) if any(r[i] is not None for r in rows)
            else None for i in range(len(rows[0]))]


def profile_verify(runs: list[Any]) -> dict[str, Any] | None:
    """The verify time across ranks of an arm's runs (trace.verify_across_ranks per profiler window): the median
    over every step of every run (`verify_ms`; per_step[i][0] is a step's cost), per-run medians with spread,
    per-call kernel medians (the median of the runs' p50s), meeting kernels per verify, and per rank the window,
    waits, busy and idle time and the waiting share (medians over runs). A window where some rank wrote no trace
    (missing_ranks) does not count: its waits cannot be told."""
    vs = [v for v in runs if isinstance(v, dict) and v.get("verify_ms") is not None and not v.get("missing_ranks")]
    if not vs:
        return None
    steps = [row[0] for v in vs for row in v.get("per_step") or [] if row and row[0] is not None]

    def med(key: str, get: Any = None) -> float | None:
        vals = [x for v in vs if (x := (get(v.get(key)) if get else v.get(key))) is not None]
        return round(median(vals), 4) if vals else None

    return {"runs": len(vs), "steps": len(steps),
            "verify_ms": round(median(steps) / 1e3, 4) if steps else med("verify_ms"),
            "verify_ms_runs": spread([v["verify_ms"] for v in vs]),
            "fused_call_us_p50": med("fused_call_us", _p50), "nccl_call_us_p50": med("nccl_call_us", _p50),
            "add_rmsnorm_us_p50": med("add_rmsnorm_us", _p50),
            "rank0_fused_call_us_p50": med("rank0_fused_call_us", _p50),
            "rank0_nccl_call_us_p50": med("rank0_nccl_call_us", _p50),
            "fused_per_verify": med("fused_per_verify"), "nccl_ar_per_verify": med("nccl_ar_per_verify"),
            "add_rmsnorm_per_verify": med("add_rmsnorm_per_verify"),
            **{k: _per_rank_median([v.get(k) for v in vs])
               for k in ("window_ms", "wait_ms", "busy_ms", "idle_ms", "idle_at_calls_ms", "wait_share")},
            "kernel_ms": {k: _per_rank_median([(v.get("kernel_ms") or {}).get(k) for v in vs])
                          for k in ("fused", "nccl_ar", "sync", "add_rmsnorm")}}


def _vals(agg: dict[str, Any], arm: str, c: int, metric: str) -> list[float]:
    s = agg.get(arm, {}).get("levels", {}).get(str(c), {}).get(metric)
    return list(s["values"]) if s else []


# what a verdict compares ([verdict] metric, config_verdict.METRICS): output tok/s over the window (prefill
# included), or the decode rate c users see, c x 1000 / TPOT p50 (prefill excluded: at 32k+ tokens a 256-token
# answer's window is mostly the prefill, which speculation does not touch)
RATE_METRICS = tuple(METRICS)


def rate_vals(agg: dict[str, Any], arm: str, c: int, metric: str = "tok_s") -> list[float]:
    """One value per repeat of the verdict's rate at concurrency c (see RATE_METRICS), from the aggregate's
    tok_s, or its TPOT p50 for decode_tok_s."""
    if metric == "decode_tok_s":
        return [c * 1000.0 / t for t in _vals(agg, arm, c, "tpot_ms") if t and t > 0]
    return _vals(agg, arm, c, "tok_s")


def diagnose(*, ratio: float, accept_len: float | None, break_even: float | None,
             median_ratio: float | None, spread_fail: bool, expect_accept_len: float | None,
             expect_break_even: float | None) -> dict[str, Any]:
    """Which side regressed when the verdict fails: acceptance, verify cost, both, or neither (then: spread or
    time spent outside the decode loop)."""
    regressed: list[str] = []
    notes: list[str] = []
    if accept_len is not None and expect_accept_len is not None and accept_len < expect_accept_len:
        regressed.append("acceptance")
        notes.append(f"accept length {accept_len:.2f} < expected {expect_accept_len:.2f}")
    if break_even is not None and expect_break_even is not None and break_even > expect_break_even:
        regressed.append("verify cost")
        notes.append(f"break-even accept length {break_even:.2f} > expected {expect_break_even:.2f} "
                     "(a draft+verify round costs too many decode steps)")
    if accept_len is not None and break_even is not None:
        predicted = accept_len / break_even
        notes.append(f"step-time model: speedup {predicted:.2f}x = accept {accept_len:.2f} / break-even "
                     f"{break_even:.2f}; passing {ratio:.2f}x needs accept >= {ratio * break_even:.2f} "
                     f"at this cost, or break-even <= {accept_len / ratio:.2f} at this acceptance")
        median_fails = median_ratio is None or median_ratio < ratio
        if not regressed and predicted >= ratio and median_fails:
            regressed.append("outside the decode loop")
            notes.append("the decode loop alone would pass: time goes to prefill, scheduling or HTTP")
    if spread_fail and median_ratio is not None and median_ratio >= ratio:
        regressed.append("spread")
        notes.append(f"median ratio {median_ratio:.2f}x passes but the worst-vs-best spread does not")
    if not regressed:
        if expect_accept_len is None and expect_break_even is None:
            regressed.append("undetermined")
            notes.append("set verdict.expect_accept_len and verdict.expect_break_even to attribute "
                         "the failure")
        else:
            regressed.append("neither side beyond expectations")
    if accept_len is None or break_even is None:
        notes.append("accept length or step times missing (no SGLANG_RECORD_STEP_TIME? attached server?)")
    return {"regressed": regressed, "notes": notes}


def compare(agg: dict[str, Any], baseline: str, arm: str, c: int, metric: str = "tok_s") -> dict[str, Any] | None:
    """Median ratio (of `metric`: RATE_METRICS), accept length and break-even accept length of one speculative arm
    at one concurrency."""
    spec, base = rate_vals(agg, arm, c, metric), rate_vals(agg, baseline, c, metric)
    if not spec or not base:
        return None
    decode_ms = _median(_vals(agg, baseline, c, "step_ms"))
    round_ms = _median(_vals(agg, arm, c, "step_ms"))
    accept = _median(_vals(agg, arm, c, "accept_len"))
    be = round_ms / decode_ms if decode_ms and round_ms else None
    return {"arm": arm, "concurrency": c, "break_even_profiled": _profiled_break_even(agg, baseline, arm),
            "median_ratio": round(median(spec) / median(base), 4),
            "accept_len": round(accept, 4) if accept is not None else None,
            "decode_ms": round(decode_ms, 4) if decode_ms else None,
            "round_ms": round(round_ms, 4) if round_ms else None,
            "break_even_accept_len": round(be, 4) if be is not None else None}


def _profiled_break_even(agg: dict[str, Any], baseline: str, arm: str) -> float | None:
    """(draft + verify + draft_extend GPU ms) / decode GPU ms from the profiler windows (concurrency 1)."""
    spec, base = agg.get(arm, {}).get("profile_ms") or {}, agg.get(baseline, {}).get("profile_ms") or {}
    if not base.get("decode") or not spec.get("verify"):
        return None
    cost = sum(spec[s]["median"] for s in ("draft", "verify", "draft_extend") if spec.get(s))
    return round(cost / base["decode"]["median"], 4)


def evaluate(agg: dict[str, Any], v: VerdictSpec, concurrency: tuple[int, ...], *,
             problems: list[str] | None = None, spec_arms: list[str] | None = None) -> dict[str, Any]:
    """The verdict checks, the fusion comparison, and (informational) every speculative arm vs the baseline
    at every concurrency."""
    checks = []
    for c, ratio in sorted(v.min_ratio.items()):
        base = rate_vals(agg, v.baseline, c, v.metric)
        for arm in v.speculative:
            spec = rate_vals(agg, arm, c, v.metric)
            check: dict[str, Any] = {"concurrency": c, "arm": arm, "baseline": v.baseline, "min_ratio": ratio}
            cmp_ = compare(agg, v.baseline, arm, c, v.metric)
            if cmp_ is None:
                missing = v.baseline if not base else arm
                check.update(passed=False, why=f"no successful run of arm {missing!r} at concurrency {c}")
                checks.append(check)
                continue
            worst, best = min(spec), max(base)
            passed = worst >= ratio * best
            check.update(passed=passed, worst_spec_tok_s=round(worst, 3), best_baseline_tok_s=round(best, 3),
                         worst_over_best=round(worst / best, 4), **cmp_)
            if not passed:
                check["diagnosis"] = diagnose(
                    ratio=ratio, accept_len=cmp_["accept_len"], break_even=cmp_["break_even_accept_len"],
                    median_ratio=cmp_["median_ratio"], spread_fail=True,
                    expect_accept_len=v.expect_accept_len, expect_break_even=v.expect_break_even)
            checks.append(check)
    if v.accept_len_tolerance is not None:
        checks += _accept_checks(agg, v)
    table = [t for arm in (spec_arms or list(v.speculative)) for c in concurrency
             if (t := compare(agg, v.baseline, arm, c, v.metric)) is not None]
    fusion = fusion_comparison(agg, v, concurrency)
    reasons = []
    for k in checks:
        if not k["passed"]:
            why = k.get("why") or (f"worst {k['worst_spec_tok_s']} tok/s < {k['min_ratio']} x best baseline "
                                   f"{k['best_baseline_tok_s']} tok/s")
            if k.get("kind") == "accept_len":
                reasons.append(f"concurrency {k['concurrency']}, {k['arm']}: {why}")
                continue
            reasons.append(f"concurrency {k['concurrency']}, {k['arm']}: {why}")
    if fusion and fusion.get("passed") is False:
        reasons.append(f"fusion gain {fusion.get('gain')} < required {v.min_fusion_gain}")
    reasons += list(problems or [])
    if not checks:
        reasons.append("no verdict check ran")
    return {"rule": RULE, "passed": not reasons, "checks": checks, "fusion": fusion, "table": table,
            "reasons": reasons}


def _accept_checks(agg: dict[str, Any], v: VerdictSpec) -> list[dict[str, Any]]:
    """The measured accept length within expect_accept_len +- accept_len_tolerance, at every verdict
    concurrency and for every arm of accept_arms (the median over repeats: a constructed draft's acceptance is known
    before the run, so a miss is a defect, not noise)."""
    return [accept_check(v, _median(_vals(agg, arm, c, "accept_len")), concurrency=c, arm=arm)
            for c in sorted(v.min_ratio) for arm in accept_arms(v)]


def accept_arms(v: VerdictSpec) -> tuple[str, ...]:
    """The arms the accept-length check judges: verdict.accept_len_arms where the config names them, else the
    verdict's speculative arms (those judged)."""
    return v.speculative if v.accept_len_arms is None else v.accept_len_arms


def accept_check(v: VerdictSpec, got: float | None, **where: Any) -> dict[str, Any]:
    """One accept-length check of the verdict: `got` (the median over repeats, None if none was measured) within
    v.expect_accept_len +- v.accept_len_tolerance; `where` names the arm, concurrency (and context)."""
    assert v.expect_accept_len is not None and v.accept_len_tolerance is not None
    return accept_len_check(v.expect_accept_len, v.accept_len_tolerance, got, **where)


def accept_len_check(expect: float, tolerance: float, got: float | None, **where: Any) -> dict[str, Any]:
    """`got` within `expect` +- `tolerance` (the verdict's check, and the GPU tests' against a lab pair's
    construction); None: nothing measured, a failure."""
    k: dict[str, Any] = {"kind": "accept_len", **where, "expect_accept_len": expect, "tolerance": tolerance,
                         "accept_len": round(got, 4) if got is not None else None}
    if got is None:
        k.update(passed=False, why="no accept length measured")
        return k
    k["passed"] = abs(got - expect) <= tolerance
    if not k["passed"]:
        k["why"] = f"accept length {got:.4f} outside {expect} +- {tolerance}"
    return k


def fusion_comparison(agg: dict[str, Any], v: VerdictSpec,
                      concurrency: tuple[int, ...]) -> dict[str, Any] | None:
    """Fusion on vs off at the lowest concurrency: verify GPU time from the profiler window where there is
    one, and the whole round time from the step-time recording.

    With every rank's trace (profile_verify) the verify time is the one with the waits for the other rank
    removed (`verify_ms_robust_on/off`, the basis of the gain), and the saving fusion should bring is predicted
    from the per-call kernel medians: (unfused - fused) x fused all-reduces per verify, where unfused is one
    all-reduce boundary without fusion (NCCL's all-reduce + the add+RMSNorm kernel, medians of the off arm) and
    fused the fused kernel (median of the on arm), both at the rank that arrived last (no waiting in them);
    `saving_ratio` = measured (off - on) / predicted."""
    if not (v.fusion_on and v.fusion_off):
        return None
    c = min(concurrency)
    on, off = agg.get(v.fusion_on, {}), agg.get(v.fusion_off, {})

    def verify(a: dict[str, Any], key: str = "profile_ms") -> float | None:
        s = (a.get(key) or {}).get("verify")
        return s["median"] if s else None

    round_on = _median(_vals(agg, v.fusion_on, c, "step_ms"))
    round_off = _median(_vals(agg, v.fusion_off, c, "step_ms"))
    ver_on, ver_off = verify(on), verify(off)
    pv_on, pv_off = on.get("profile_verify") or {}, off.get("profile_verify") or {}
    rob_on, rob_off = pv_on.get("verify_ms"), pv_off.get("verify_ms")
    if rob_on and rob_off:
        gain, basis = 1 - rob_on / rob_off, "verify (profiler, every rank, waits for the other rank removed)"
    elif ver_on and ver_off:
        gain, basis = 1 - ver_on / ver_off, "verify (profiler)"
    elif round_on and round_off:
        gain, basis = 1 - round_on / round_off, "draft+verify round (step times)"
    else:
        gain, basis = None, None
    fused, n_fused = pv_on.get("fused_call_us_p50"), pv_on.get("fused_per_verify")
    nccl, norm = pv_off.get("nccl_call_us_p50"), pv_off.get("add_rmsnorm_us_p50")
    unfused = nccl + norm if nccl is not None and norm is not None else None
    predicted = ((unfused - fused) * n_fused / 1e3 if unfused is not None and fused is not None and n_fused
                 else None)
    measured = rob_off - rob_on if rob_on and rob_off else None
    out = {"concurrency": c, "on": v.fusion_on, "off": v.fusion_off,
           "verify_ms_on": ver_on, "verify_ms_off": ver_off,
           "verify_ms_robust_on": rob_on, "verify_ms_robust_off": rob_off,
           "verify_steps_on": pv_on.get("steps"), "verify_steps_off": pv_off.get("steps"),
           "wait_share_on": pv_on.get("wait_share"), "wait_share_off": pv_off.get("wait_share"),
           "verify_allreduce_norm_ms_on": verify(on, "profile_allreduce_norm_ms"),
           "verify_allreduce_norm_ms_off": verify(off, "profile_allreduce_norm_ms"),
           "fused_call_us_p50": fused, "unfused_call_us_p50": round(unfused, 4) if unfused is not None else None,
           "nccl_call_us_p50_off": nccl, "add_rmsnorm_us_p50_off": norm, "fused_ar_per_verify": n_fused,
           "saving_predicted_ms": round(predicted, 4) if predicted is not None else None,
           "saving_measured_ms": round(measured, 4) if measured is not None else None,
           "saving_ratio": round(measured / predicted, 4) if measured is not None and predicted else None,
           "round_ms_on": round(round_on, 4) if round_on else None,
           "round_ms_off": round(round_off, 4) if round_off else None,
           "gain": round(gain, 4) if gain is not None else None, "gain_basis": basis,
           "min_gain": v.min_fusion_gain, "passed": None}
    if v.min_fusion_gain is not None:
        out["passed"] = gain is not None and gain >= v.min_fusion_gain
    return out


def summary(agg: dict[str, Any], verdict: dict[str, Any], v: VerdictSpec, *, machine: str, tp: int,
            config: str, api: str = "generate", engine: str | None = None,
            target_layers: int | None = None) -> dict[str, Any]:
    """The small, comparable block every receipt of this kind carries: summary_keys.SUMMARY's keys (what each
    means is said there), in its order. The latency keys are of the verdict's (first) speculative arm at
    concurrency 1: the median over repeats of each run's p50 (ttft, tpot) or p99 (itl); tok_s_c1 and
    baseline_tok_s_c1 are median output tok/s over repeats."""
    arm = v.speculative[0]
    c1 = next((k for k in verdict["checks"] if k["concurrency"] == 1 and k["arm"] == arm
               and k.get("kind") != "accept_len"), None)
    if c1 is None or "median_ratio" not in c1:
        spec1 = _vals(agg, arm, 1, "tok_s")
        base1 = _vals(agg, v.baseline, 1, "tok_s")
        ratio = median(spec1) / median(base1) if spec1 and base1 else None
        c1 = {"median_ratio": ratio, "accept_len": _median(_vals(agg, arm, 1, "accept_len")),
              "break_even_accept_len": None}
    f = verdict.get("fusion") or {}
    robust = f.get("verify_ms_robust_on") is not None and f.get("verify_ms_robust_off") is not None

    def at_c1(a: str, metric: str) -> float | None:
        m = _median(_vals(agg, a, 1, metric))
        return round(m, 4) if m is not None else None

    verify_basis = ("every rank, waits for the other rank removed" if robust else "rank 0 GPU window"
                    if f.get("verify_ms_on") is not None or f.get("verify_ms_off") is not None else None)
    return {
        summary_keys.MACHINE: machine,
        summary_keys.TP: tp,
        summary_keys.CONFIG: config,
        summary_keys.SPEEDUP_C1: round(c1["median_ratio"], 4) if c1.get("median_ratio") is not None else None,
        summary_keys.ACCEPT_LEN: c1.get("accept_len"),
        summary_keys.BREAK_EVEN_ACCEPT_LEN: c1.get("break_even_accept_len"),
        summary_keys.EXPECT_ACCEPT_LEN: v.expect_accept_len,
        summary_keys.ACCEPT_LEN_TOLERANCE: v.accept_len_tolerance,
        summary_keys.TARGET_LAYERS: target_layers,
        # both arms with every rank's traces: the verify time with the waits for the other rank removed; else
        # rank 0's GPU window (receipts before it, a server whose other ranks wrote no trace)
        summary_keys.VERIFY_MS_FUSION_ON: f.get("verify_ms_robust_on") if robust else f.get("verify_ms_on"),
        summary_keys.VERIFY_MS_FUSION_OFF: f.get("verify_ms_robust_off") if robust else f.get("verify_ms_off"),
        summary_keys.VERIFY_MS_BASIS: verify_basis,
        summary_keys.VERIFY_MS_RANK0_FUSION_ON: f.get("verify_ms_on"),
        summary_keys.VERIFY_MS_RANK0_FUSION_OFF: f.get("verify_ms_off"),
        summary_keys.FUSED_CALL_US_P50: f.get("fused_call_us_p50"),
        summary_keys.UNFUSED_CALL_US_P50: f.get("unfused_call_us_p50"),
        summary_keys.FUSED_AR_PER_VERIFY: f.get("fused_ar_per_verify"),
        summary_keys.FUSION_SAVING_PREDICTED_MS: f.get("saving_predicted_ms"),
        summary_keys.FUSION_SAVING_MEASURED_MS: f.get("saving_measured_ms"),
        summary_keys.FUSION_SAVING_RATIO: f.get("saving_ratio"),
        summary_keys.ROUND_MS_FUSION_ON: f.get("round_ms_on"),
        summary_keys.ROUND_MS_FUSION_OFF: f.get("round_ms_off"),
        summary_keys.VERIFY_ALLREDUCE_NORM_MS_FUSION_ON: f.get("verify_allreduce_norm_ms_on"),
        summary_keys.VERIFY_ALLREDUCE_NORM_MS_FUSION_OFF: f.get("verify_allreduce_norm_ms_off"),
        summary_keys.API: api,
        summary_keys.ENGINE: engine,
        summary_keys.TOK_S_C1: at_c1(arm, "tok_s"),
        summary_keys.BASELINE_TOK_S_C1: at_c1(v.baseline, "tok_s"),
        summary_keys.TTFT_MS_P50: at_c1(arm, "ttft_ms"),
        summary_keys.TPOT_MS_P50: at_c1(arm, "tpot_ms"),
        summary_keys.ITL_MS_P99: at_c1(arm, "itl_ms_p99"),
        summary_keys.PASSED: verdict["passed"],
    }
