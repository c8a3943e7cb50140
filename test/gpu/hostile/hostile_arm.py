"""One arm of the hostile suite (baseline or eagle3): its server, started the way users start it (`sglang-blackwell
serve -- <sglang args>`, bench/eagle3/server.py's launched_server: its own session, taken down whatever happens),
lazily and again after a case killed it, while the deadline allows; and run_case, which runs one case against it,
judges it, records the verdict in the facts and fails the test unless it is clean. Whatever does not fit in
SGLB_DEADLINE_S is recorded as not-run with the reason, then skipped."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Any

import pytest
from hostile_env import (
    ARM_MIN_S,
    ARM_SPECULATIVE,
    CONTEXT_LEN,
    KV_IDLE_WAIT_S,
    REFERENCE_PROMPT,
    REFERENCE_TOKENS,
    STARTUP_TIMEOUT_S,
    TEARDOWN_S,
    WARM_STARTUP_S,
    Config,
    Facts,
    suite_env,
)
from hostile_verdict import Finding, case_verdict, first_status_and_message
from server_checks import Baseline, Target, check_after, served_target, server_info

SERVER_KEYS = ("version", "tp_size", "host", "speculative_algorithm", "speculative_num_draft_tokens",
               "attention_backend", "context_length", "max_running_requests", "max_queued_requests",
               "cuda_graph_max_bs_decode", "disable_radix_cache")


@dataclass
class Env(suite_env.SuiteEnv[Config, Facts]):
    """suite_env.SuiteEnv, with the lab pair's ground truth."""

    truth: Any  # lab_truth.GroundTruth


@dataclass
class Arm:
    env: Env
    name: str
    target: Target | None = None
    base: Baseline | None = None
    launch_error: str | None = None
    _stack: contextlib.ExitStack | None = field(default=None, repr=False)

    @property
    def rec(self) -> dict[str, Any]:
        return self.env.facts.arm(self.name)

    def reserve_s(self) -> float:
        """What must stay unspent after this arm's next case: its teardown, and (baseline) the eagle3 arm's
        minimum, where SGLB_DEADLINE_S holds both arms' minimum at all (else the baseline arm, first, takes it)."""
        arm_min = WARM_STARTUP_S + ARM_MIN_S + TEARDOWN_S
        both_fit = self.env.cfg.deadline_s >= 2 * arm_min
        return TEARDOWN_S + (arm_min if self.name == "baseline" and both_fit else 0.0)

    def start(self, why: str) -> None:
        """Launch the server and take the baseline (its reference text only at the first start: a restarted
        server must answer as the first one did). ServerError when it does not come up."""
        from sglang_blackwell.bench.eagle3.server import Server, free_port, launched_server

        env, cfg = self.env, self.env.cfg
        port = free_port("0.0.0.0")
        n = len(self.rec["starts"])
        log = cfg.out / "logs" / f"server_{self.name}_{n}.log"
        cmd = cfg.serve_command(port, ARM_SPECULATIVE[self.name])
        start: dict[str, Any] = {"why": why, "cmd": cfg.masked(cmd), "log": str(log)}
        self.rec["starts"].append(start)
        timeout = min(STARTUP_TIMEOUT_S, env.deadline.left() - self.reserve_s())
        env.progress(f"{self.name}: launching ({why}) through `sglang-blackwell serve`, /health wait <= "
                     f"{timeout:.0f} s, log {log}")
        server = Server(url=f"http://127.0.0.1:{port}", log_path=log)
        stack = contextlib.ExitStack()
        try:
            stack.enter_context(launched_server(server, cmd, cfg.child_env(), startup_timeout_s=timeout,
                                                grace_s=15.0, gpu_release_s=30.0, progress=env.progress))
        except BaseException as e:
            start["launch_error"] = str(e)[:2000]
            self.launch_error = f"the {self.name} server did not start: {str(e)[:300]}"
            env.facts.save()
            stack.close()
            raise
        self._stack = stack
        start["startup_s"] = round(server.startup_s or 0.0, 1)
        self.target = self._target(server)
        info = server_info(self.target)
        start["server"] = {k: info.get(k) for k in SERVER_KEYS}
        base = Baseline.take(self.target, REFERENCE_PROMPT, REFERENCE_TOKENS)
        if base.reference is None:
            self.launch_error = f"the {self.name} server's reference request failed: no case can be judged"
            start["launch_error"] = self.launch_error
            raise RuntimeError(self.launch_error)
        if self.base is not None:  # a restart: the reference is the first server's
            base.reference = self.base.reference
        self.base = base
        start["baseline"] = base.as_facts()
        if n == 0:
            self.rec["reference"] = self._reference_facts(base)
        env.facts.save()
        env.progress(f"{self.name}: healthy after {start['startup_s']} s; reference {base.reference!r}")

    def _target(self, server: Any) -> Target:
        cfg = self.env.cfg
        return served_target(server.url, cfg.api_key, server.pid, cfg.target, CONTEXT_LEN, truth=self.env.truth,
                             out=cfg.out)

    def _reference_facts(self, base: Baseline) -> dict[str, Any]:
        truth = self.env.truth
        want = truth.text(truth.continuation(truth.prompt_ids(REFERENCE_PROMPT), REFERENCE_TOKENS)) if truth else None
        first = (self.env.facts.data["arms"].get("baseline") or {}).get("reference") or {}
        return {"prompt": REFERENCE_PROMPT, "tokens": REFERENCE_TOKENS, "text": base.reference,
                "ground_truth": want, "is_ground_truth": want is not None and base.reference == want,
                "same_as_baseline_arm": None if self.name == "baseline" or "text" not in first
                else first["text"] == base.reference}

    def stop(self, why: str) -> None:
        """Take the server down (a dead one too: its session is ended and checked gone)."""
        if self._stack is None:
            return
        stack, self._stack, self.target = self._stack, None, None
        starts = self.rec["starts"]
        try:
            stack.close()
        except Exception as e:  # launched_server: a server that died is "not ours" on the way out; a teardown
            starts[-1]["teardown_error"] = str(e)[:1000]  # error is recorded, never hidden
        starts[-1]["stopped"] = why
        self.env.facts.save()


def _not_run(arm: Arm, case: str, why: str) -> None:
    arm.env.facts.case(arm.name, case, {"verdict": "not-run", "why": why})
    pytest.skip(why)


def run_case(arm: Arm, case: str) -> None:
    from hostile_cases import BUDGET_S, REGISTRY

    env = arm.env
    budget = BUDGET_S[case]
    if arm.launch_error:
        _not_run(arm, case, arm.launch_error)
    if arm.target is None:
        left = env.deadline.left()
        need = WARM_STARTUP_S + budget + arm.reserve_s()
        if left < need:
            _not_run(arm, case, f"deadline: {left:.0f} s left of SGLB_DEADLINE_S={env.cfg.deadline_s:.0f}, a "
                                f"{'re' if arm.rec['starts'] else ''}start of the {arm.name} server and this case "
                                f"need about {need:.0f} s")
        restart = bool(arm.rec["starts"])
        try:
            died_in = (arm.rec["restarts"] or [{"after": "a stop"}])[-1]["after"]
            arm.start(f"restart after {died_in}" if restart else "first start")
        except Exception as e:
            arm.launch_error = arm.launch_error or f"the {arm.name} server's start failed: {e}"[:400]
            env.facts.case(arm.name, case, {"verdict": "not-run", "why": arm.launch_error})
            raise
    left = env.deadline.left()
    if left < budget + arm.reserve_s():
        _not_run(arm, case, f"deadline: {left:.0f} s left of SGLB_DEADLINE_S={env.cfg.deadline_s:.0f}, this case "
                            f"needs about {budget:.0f} s and {arm.reserve_s():.0f} s must stay for what follows")
    assert arm.target is not None and arm.base is not None
    env.progress(f"{arm.name}: {case}")
    t0 = time.monotonic()
    try:
        result = REGISTRY[case](arm.target)
        findings, measured = result.findings, result.measured
    except Exception as e:  # the case's own code failed: that is recorded, and is no verdict on the server
        findings, measured = [Finding(False, f"the case raised {type(e).__name__}: {e}"[:300], None, "")], {}
    elapsed = time.monotonic() - t0
    after = check_after(arm.target, arm.base, REFERENCE_PROMPT, REFERENCE_TOKENS, KV_IDLE_WAIT_S)
    verdict, why = case_verdict(findings, after)
    status, message = first_status_and_message(findings)
    record = {"verdict": verdict, "why": why, "status": status, "message": message[:300],
              "elapsed_s": round(elapsed, 2), "findings": [f.what[:300] for f in findings][:60],
              "after": after.as_facts(), "reference_changed": not after.died() and not after.reference_same,
              "admin_accepted": measured.get("admin_accepted", 0), "measured": measured}
    env.facts.case(arm.name, case, record)
    env.progress(f"{arm.name}: {case}: {verdict} ({why[:160]}) in {elapsed:.1f} s")
    if verdict == "leak":
        arm.base.leaked_to(after)
        arm.rec.setdefault("idle_raised", []).append({"after": case, "kv_used": after.kv_used,
                                                      "kv_requests": after.kv_requests})
        env.facts.save()
    if verdict == "server-died":
        arm.rec["restarts"].append({"after": case, "why": why})
        arm.stop(f"died in {case}")
    assert verdict == "clean", f"{case}: {verdict}: {why}"
