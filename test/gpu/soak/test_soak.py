"""The soak: both arms' servers up at once, their references taken, SGLB_SOAK_S seconds of the schedule against
both, then each server's state and references again; the facts written as they come, the verdict
(qualify/soak_verdict.py) recorded in them and asserted. One test: the arms run at the same time."""

from __future__ import annotations

import contextlib

import pytest
import soak_arms
from soak_client import Soak
from soak_env import ARMS, DRAIN_S, PROMPT_MAX, REQUEST_TIMEOUT_S, SAMPLE_PER_BUCKET, Config, Facts
from soak_schedule import Schedule

from sglang_blackwell.qualify import soak_verdict

pytestmark = pytest.mark.gpu


def test_soak(cfg: Config) -> None:
    progress = cfg.progress()
    schedule = Schedule(cfg.seed, PROMPT_MAX, cfg.max_c)
    facts = Facts(cfg.out / "facts.json", cfg, schedule.as_facts())
    progress(f"soak: {cfg.soak_s:.0f} s in buckets of {cfg.bucket_s:.0f} s, target {cfg.target}, draft {cfg.draft}")
    with contextlib.ExitStack() as stack:
        arms = soak_arms.start_all(cfg, stack, progress)
        for arm in arms.values():
            if arm.target is not None:
                soak_arms.take_references(arm)
            facts.arm(arm.name).update(start=arm.start, error=arm.error, references=arm.references,
                                       kv_used_idle=arm.base.kv_used if arm.base else None)
        facts.save()
        failed = [a.error for a in arms.values() if a.error]
        assert not failed, "; ".join(f for f in failed if f)
        soak = Soak({n: a.target for n, a in arms.items() if a.target is not None}, schedule, cfg.soak_s,
                    cfg.bucket_s, REQUEST_TIMEOUT_S, DRAIN_S, cfg.bucket_s / SAMPLE_PER_BUCKET, progress)
        try:
            soak.run()
        finally:
            for name, rec in soak.recorders.items():
                facts.arm(name)["buckets"] = rec.buckets()
            facts.save()
        for name, after in soak_arms.check_all(arms, cfg.kv_wait_s).items():
            facts.arm(name).update(after=after.as_facts(), references=arms[name].references)
            progress(f"{name}: after the soak: {after.as_facts()}")
        facts.save()
    checks = soak_verdict.judge(facts.data["arms"], ARMS, cfg.bounds)
    facts.data["verdict"] = [c.as_row() for c in checks]
    facts.save()
    bad = [f"{c.arm} {c.check}: {c.why}" for c in checks if not c.ok]
    progress("soak verdict: " + ("passed" if not bad else "; ".join(bad)))
    assert not bad, "; ".join(bad)[:2000]
