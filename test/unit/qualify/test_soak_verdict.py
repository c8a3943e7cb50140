"""soak_verdict on synthetic buckets (no clock, no server): a clean soak passes every check, and each check fails
alone when its evidence says so: an error in any bucket (the drain's too), no intended abort, a p99 ITL that grew
past the tolerance (and one within it that passes), GPU memory and host RSS that grew past their bounds (the
device total where no process is listed), a changed reference, the KV pool not idle, a scheduler that changed,
too few minutes or gaps to judge, an arm that did not run. The schedule the buckets assume: the k-th request of
every bucket drawn alike, the phases within each bucket."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest

from sglang_blackwell.qualify import soak_verdict as sv

sys.path[:0] = [str(Path(__file__).resolve().parents[2] / "gpu" / "soak")]
import soak_schedule  # noqa: E402


def bucket(minute: int, **over) -> dict:
    b = {"minute": minute, "full": True, "drain": False, "ok": 250, "aborted": 27, "errors": 0, "error_samples": [],
         "itl_n": 50000, "itl_p50_ms": 14.0, "itl_p90_ms": 20.0, "itl_p99_ms": 80.0, "gpu_mib_max": 40000.0,
         "gpu_total_mib_max": 80000.0, "rss_mib_max": 3000.0, "kv_used_max": 200000.0}
    return {**b, **over}


def arm(n: int = 10) -> dict:
    return {"buckets": [bucket(m) for m in range(n)] + [bucket(n, full=False, drain=True, ok=20)],
            "references": [{"prompt": "The capital of France is", "before": " Paris", "after": " Paris",
                            "same": True}, {"prompt": "<512 token ids>", "before": " x", "after": " x", "same": True}],
            "kv_used_idle": 0,
            "after": {"alive": True, "scheduler_same": True, "health": 200, "reference_same": True, "kv_used": 0,
                      "kv_requests": 0, "kv_idle": True}}


def failed(facts: dict, bounds: sv.Bounds = sv.DEFAULT) -> set[str]:
    return {c.check for c in sv.judge_arm("baseline", facts, bounds, arms=2) if not c.ok}


def test_a_clean_soak_passes_every_check():
    checks = sv.judge({"baseline": arm(), "eagle3": arm()}, ("baseline", "eagle3"))
    assert [c.check for c in checks] == list(sv.CHECKS) * 2 and sv.passed(checks)
    itl = next(c for c in checks if c.check == "itl_p99")
    assert itl.value == 80.0 and itl.bound == 80.0 * 1.25 + 2.0 and "minute 9" in itl.why and "minute 1 " in itl.why


def test_minute_0_and_the_drain_are_not_compared():
    a = arm()
    a["buckets"][0].update(itl_p99_ms=1.0, gpu_mib_max=1.0, rss_mib_max=1.0)  # warm-up: not the first compared
    a["buckets"][-1].update(itl_p99_ms=900.0, gpu_mib_max=90000.0)  # the drain: not the last compared
    assert failed(a) == set()
    first, last = sv.compared(a["buckets"])
    assert (first["minute"], last["minute"]) == (1, 9)


@pytest.mark.parametrize("where", [3, -1], ids=["a minute", "the drain"])
def test_one_error_anywhere_fails(where):
    a = arm()
    a["buckets"][where].update(errors=1, error_samples=["500: Internal Server Error"])
    checks = {c.check: c for c in sv.judge_arm("baseline", a)}
    assert failed(a) == {"errors"} and checks["errors"].value == 1
    assert "500: Internal Server Error" in checks["errors"].why


def test_no_intended_abort_fails():
    a = arm()
    for b in a["buckets"]:
        b["aborted"] = 0
    assert failed(a) == {"aborts"}


@pytest.mark.parametrize(("last_p99", "ok"), [(101.9, True), (102.1, False), (160.0, False)])
def test_itl_p99_of_the_last_minute_against_the_first(last_p99, ok):
    a = arm()
    a["buckets"][9]["itl_p99_ms"] = last_p99  # bound: 80 x 1.25 + 2 = 102
    assert failed(a) == (set() if ok else {"itl_p99"})


def test_itl_not_judged_on_too_few_gaps_and_the_bounds_are_the_facts():
    a = arm()
    a["buckets"][1]["itl_n"] = 999
    checks = {c.check: c for c in sv.judge_arm("baseline", a)}
    assert not checks["itl_p99"].ok and "fewer than 1000 gaps (minute 1: 999 gaps)" in checks["itl_p99"].why
    loose = sv.Bounds.from_facts({"min_gaps": 1, "itl_tol": 1000.0, "unknown": 3})
    assert loose == sv.Bounds(min_gaps=1, itl_tol=1000.0) and failed(a, loose) == set()
    assert sv.Bounds.from_facts(sv.DEFAULT.as_facts()) == sv.DEFAULT


@pytest.mark.parametrize(("key", "check", "growth", "ok"), [
    ("gpu_mib_max", "gpu_memory", 256.0, True), ("gpu_mib_max", "gpu_memory", 257.0, False),
    ("rss_mib_max", "host_rss", 256.0, True), ("rss_mib_max", "host_rss", 300.0, False),
])
def test_memory_growth_first_to_last_minute(key, check, growth, ok):
    a = arm()
    a["buckets"][9][key] += growth
    assert failed(a) == (set() if ok else {check})


def test_gpu_memory_falls_back_to_the_device_total_per_arm():
    a = arm()
    for b in a["buckets"]:
        b["gpu_mib_max"] = None  # nvidia-smi lists no process (a container's PID namespace)
    a["buckets"][9]["gpu_total_mib_max"] += 500.0  # within 2 arms x 256
    assert failed(a) == set()
    a["buckets"][9]["gpu_total_mib_max"] += 20.0
    checks = {c.check: c for c in sv.judge_arm("baseline", a, arms=2)}
    assert not checks["gpu_memory"].ok and checks["gpu_memory"].bound == 512.0 and "device total" in \
        checks["gpu_memory"].why
    for b in a["buckets"]:
        b["gpu_total_mib_max"] = None
    checks = {c.check: c for c in sv.judge_arm("baseline", a)}
    assert not checks["gpu_memory"].ok and "not measured" in checks["gpu_memory"].why


def test_a_changed_reference_fails():
    a = arm()
    a["references"][1].update(after=" y", same=False)
    checks = {c.check: c for c in sv.judge_arm("baseline", a)}
    assert failed(a) == {"references"} and "' x' -> ' y'" in checks["references"].why
    a["references"] = []
    assert failed(a) == {"references"}  # no reference taken: nothing shows the outputs unchanged


def test_a_pool_not_idle_fails():
    a = arm()
    a["after"].update(kv_idle=False, kv_used=64, kv_requests=1)
    assert failed(a) == {"kv_idle"}


@pytest.mark.parametrize("change", [{"scheduler_same": False}, {"alive": False}, {"health": "no answer"}])
def test_a_server_that_changed_or_died_fails(change):
    a = arm()
    a["after"].update(change)
    assert failed(a) == {"server_alive"}


def test_too_few_minutes_are_not_judged():
    a = arm(2)  # minutes 0 and 1 only: nothing after minute 1
    assert {"minutes", "itl_p99", "gpu_memory", "host_rss"} <= failed(a)
    a = arm()
    a["buckets"][1]["full"] = False
    assert "minutes" in failed(copy.deepcopy(a))


def test_an_arm_that_did_not_run_fails_every_check():
    checks = sv.judge({"baseline": arm()}, ("baseline", "eagle3"))
    assert not sv.passed(checks)
    assert {c.check for c in checks if c.arm == "eagle3" and not c.ok} == set(sv.CHECKS)
    assert not sv.passed([])


def test_the_schedule_repeats_every_bucket():
    s = soak_schedule.Schedule(seed=31, prompt_max=32768)
    draws = [s.draw(k) for k in range(400)]
    assert draws == [s.draw(k) for k in range(400)]  # the same k-th request in every bucket
    assert all(256 <= d.prompt_len <= 32768 and d.output_len in soak_schedule.OUTPUTS for d in draws)
    assert max(d.prompt_len for d in draws) > 16384 and min(d.prompt_len for d in draws) < 512
    aborts = [k for k, d in enumerate(draws) if d.intended_abort]
    assert aborts[:3] == [5, 15, 25] and len(aborts) == 40
    assert any(d.cut_after_chunks for d in draws) and any(d.cut_after_s for d in draws)
    assert s.prompt_ids(1, 3, 64, 32000) != s.prompt_ids(2, 3, 64, 32000)  # no prompt served twice
    assert s.prompt_ids(1, 3, 64, 32000) == s.prompt_ids(1, 3, 64, 32000)
    assert all(100 <= i < 32000 for i in s.prompt_ids(1, 3, 4096, 32000))
    assert [s.concurrency(f) for f in (0.0, 0.3, 0.5, 0.7, 0.99)] == [1, 8, 32, 16, 4] and s.peak() == 32
    assert soak_schedule.Schedule(31, 32768, max_c=4).concurrency(0.5) == 4
