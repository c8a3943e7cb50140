"""qualify's steps, one function each (doctor, gpu-tests, allreduce, eagle3), and the loop that runs them in order:
each step is a real subprocess with its own log and receipt, judged into passed / failed / skipped."""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import tomlio
from ..paths import write_atomic
from .attachments import nccl_topo_env
from .plan import STEPS, Plan, Progress
from .runner import Outcome, child_env, run_command

VERDICTS = ("passed", "failed", "skipped")
# the eagle3 step's headline: keys of its bench-eagle3 receipt's summary (declared in bench/eagle3/summary_keys.py,
# which qualify does not import: test/unit/bench/eagle3/test_summary_keys.py holds this tuple to it)
EAGLE3_HEADLINE = ("config", "tp", "api", "engine", "speedup_c1", "tok_s_c1", "baseline_tok_s_c1", "ttft_ms_p50",
                   "tpot_ms_p50", "itl_ms_p99", "accept_len", "break_even_accept_len", "verify_ms_fusion_on",
                   "verify_ms_fusion_off", "verify_allreduce_norm_ms_fusion_on", "verify_allreduce_norm_ms_fusion_off",
                   "passed")
GPU_TEST_TARGETS = ("test/gpu/labline", "test/gpu/test_allreduce_numerics.py", "test/gpu/test_nccl_profile_gpu.py")
AOT_TEST = "test/gpu/test_aot_gpu.py"
GPU_TEST_MARKERS = "gpu and not slow"  # slow: test_bench_eagle3_lab.py (9 launches: the eagle3 step's job)
ALLREDUCE_PROFILES = "none,pcie-ll"
# seconds per step before its process group is stopped (None: no limit; bench eagle3 bounds its own servers)
STEP_TIMEOUT_S: dict[str, float | None] = {"doctor": 600, "gpu-tests": 3600, "allreduce": 3600, "eagle3": None}
# after SIGINT/SIGTERM, how long a step may take to clean up (bench eagle3 takes its servers down) before SIGKILL
STEP_GRACE_S = {"doctor": 10.0, "gpu-tests": 90.0, "allreduce": 30.0, "eagle3": 180.0}


@dataclass
class StepResult:
    step: str
    verdict: str  # passed | failed | skipped
    reason: str | None = None  # why it failed or was skipped; a note where it passed
    receipt: str | None = None  # its own receipt, relative to the output directory
    log: str | None = None
    rc: int | None = None
    wall_s: float | None = None
    command: list[str] | None = None
    headline: dict[str, Any] = field(default_factory=dict)  # a few numbers from its receipt
    files: list[str] = field(default_factory=list)  # other files it wrote (relative)
    details: dict[str, Any] = field(default_factory=dict)
    interrupted: str | None = None

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"step {self.step}: verdict {self.verdict!r} not in {VERDICTS}")


def skipped(step: str, why: str) -> StepResult:
    return StepResult(step, "skipped", why)


def _rel(plan: Plan, p: Path | None) -> str | None:
    if p is None:
        return None
    try:
        return str(p.resolve().relative_to(plan.out.resolve()))
    except ValueError:
        return str(p)


def _no_gpu_reason(plan: Plan) -> str:
    notes = "; ".join(plan.topology.notes)
    return "no NVIDIA GPU on this machine" + (f" ({notes})" if notes else "")


def _cli(plan: Plan, *args: str) -> list[str]:
    return [plan.python, "-m", "sglang_blackwell.cli", *args]


def _execute(plan: Plan, step: str, cmd: list[str], *, env: dict[str, str] | None = None,
             cwd: Path | None = None) -> tuple[StepResult, Outcome]:
    log = plan.out / "logs" / f"{step}.log"
    plan.progress(f"{step}: {shlex.join(cmd)}  (log: {_rel(plan, log)})")
    o = run_command(cmd, env=env or child_env(), cwd=cwd, log_path=log, timeout_s=STEP_TIMEOUT_S[step],
                    grace_s=STEP_GRACE_S[step], echo=plan.echo)
    r = StepResult(step, "failed", rc=o.rc, wall_s=o.wall_s, command=cmd, log=_rel(plan, log),
                   interrupted=o.interrupted)
    if o.left_killed:
        r.details["left_processes_killed"] = o.left_killed
    return r, o


def _failure(o: Outcome, what: str) -> str:
    if o.interrupted:
        return f"interrupted ({o.interrupted})"
    if o.timed_out:
        return f"{what} timed out"
    last = next((ln.strip() for ln in reversed(o.tail) if ln.strip()), "")
    return f"{what} exited with {o.rc}" + (f": {last[:300]}" if last else "")


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def step_doctor(plan: Plan) -> StepResult:
    receipt = plan.out / "doctor" / "doctor.json"
    cmd = _cli(plan, "doctor", "--out", str(receipt), *(["--tp", str(plan.tp)] if plan.tp else []))
    r, o = _execute(plan, "doctor", cmd, env=child_env(gpu=False))
    doc = _read_json(receipt)
    if doc is None:
        r.reason = _failure(o, "doctor") + " (no receipt)"
        return r
    r.receipt = _rel(plan, receipt)
    if isinstance(doc.get("versions"), dict):
        plan.versions = doc["versions"]  # later receipts reuse them: no torch import in this process
    s = doc.get("summary", {})
    r.headline = {k: s.get(k) for k in ("status", "gpus", "capability", "topology_class", "failing", "warnings")}
    if o.interrupted or o.timed_out or o.rc not in (0, 1):
        r.reason = _failure(o, "doctor")
    elif o.rc == 1 or s.get("failing"):
        r.reason = f"doctor: failing item(s): {', '.join(s.get('failing') or ['?'])}"
    else:
        r.verdict = "passed"
        r.reason = (f"warnings: {', '.join(s['warnings'])}" if s.get("warnings") else None)
        if not plan.gpus:
            r.reason = "; ".join(x for x in ("no GPU: the GPU items are n/a", r.reason) if x)
    return r


def flashinfer_aot_modules() -> list[str]:
    """Prebuilt FlashInfer modules in the installed package's AOT slots (a wheel built with `build --aot`)."""
    spec = importlib.util.find_spec("flashinfer")
    roots = [Path(p) / "data" / "aot" for p in (spec.submodule_search_locations or [])] if spec else []
    return sorted({p.stem for r in roots if r.is_dir() for p in r.rglob("*.so")})


def gpu_test_targets(plan: Plan) -> tuple[list[str], dict[str, str]]:
    """The pytest targets, and what was left out and why."""
    if plan.gpu_tests is not None:
        return list(plan.gpu_tests), {}
    targets, left_out = list(GPU_TEST_TARGETS), {}
    if flashinfer_aot_modules():
        targets.append(AOT_TEST)
    elif importlib.util.find_spec("flashinfer") is None:
        left_out[AOT_TEST] = "flashinfer is not installed in this environment"
    else:
        left_out[AOT_TEST] = ("the installed flashinfer has no AOT modules (not a wheel built with "
                              "`sglang-blackwell build --aot`): nothing prebuilt to check")
    return targets, left_out


def step_gpu_tests(plan: Plan) -> StepResult:
    from .. import receipts
    from .suite_receipt import parse_junit

    if not plan.gpus:
        return skipped("gpu-tests", _no_gpu_reason(plan))
    if plan.checkout is None:
        return skipped("gpu-tests", "the GPU tests live in a sglang-blackwell checkout (test/gpu) and this "
                                    "package runs from none: git clone the repository and run qualify there")
    if importlib.util.find_spec("pytest") is None:
        return skipped("gpu-tests", f"pytest is not installed in {plan.python} (pip install pytest)")
    d = plan.out / "gpu-tests"
    junit, labline_out = d / "junit.xml", d / "labline"
    targets, left_out = gpu_test_targets(plan)
    cmd = [plan.python, "-m", "pytest", *targets, "-m", GPU_TEST_MARKERS, "-p", "no:cacheprovider", "-rA",
           "--tb=short", f"--junitxml={junit}", "-o", "junit_family=xunit2", *plan.extra["gpu-tests"]]
    env = {"SGLB_OUT": str(labline_out), "SGLB_PYTHON": plan.python}
    if plan.lab_pair:
        env.update(SGLB_LAB_TARGET=str(plan.lab_pair / "target"), SGLB_LAB_DRAFT=str(plan.lab_pair / "draft"))
    d.mkdir(parents=True, exist_ok=True)
    r, o = _execute(plan, "gpu-tests", cmd, env=child_env(env), cwd=plan.checkout)
    r.details.update(targets=targets, left_out=left_out, markers=GPU_TEST_MARKERS)
    if not junit.is_file():
        r.reason = _failure(o, "pytest") + " (no JUnit XML)"
        return r
    j = parse_junit(junit)
    n = j["counts"]
    r.headline = {"tests_passed": n["passed"], "tests_failed": n["failed"] + n["error"],
                  "tests_skipped": n["skipped"], "pytest_rc": o.rc}
    r.verdict, r.reason, skip_why = judge_gpu_tests(j, o)
    summary = dict(r.headline, passed=r.verdict == "passed", verdict=r.verdict, targets=targets,
                   skip_reasons=skip_why[:20])
    rec = receipts.make_receipt("gpu-tests", summary, machine=plan.topology.machine(), command=cmd,
                                versions=plan.versions, tests=j["cases"], left_out=left_out,
                                markers=GPU_TEST_MARKERS)
    r.receipt = _rel(plan, receipts.write_receipt(rec, d / "gpu-tests.json"))
    r.files.append(_rel(plan, junit))
    if (labline_out / "facts.json").is_file():  # the lab-line suite ran: its own receipt as on the lab
        r.files += _labline_receipt(plan, junit, labline_out, o.rc)
    return r


def judge_gpu_tests(junit: dict[str, Any], o: Outcome) -> tuple[str, str | None, list[str]]:
    """(verdict, reason, distinct skip reasons) of a pytest run: failed if any test failed or errored or
    pytest itself failed; skipped if none passed (all skipped, or none collected); else passed."""
    n = junit["counts"]
    bad = [c for c in junit["cases"] if c["outcome"] in ("failed", "error")]
    skip_why = sorted({(c["message"] or "").removeprefix("Skipped: ") for c in junit["cases"]
                       if c["outcome"] == "skipped"})
    if o.interrupted or o.timed_out:
        return "failed", _failure(o, "pytest"), skip_why
    if bad or o.rc not in (0, 5):  # 5: nothing collected
        names = ", ".join(c["name"].split("::")[-1] for c in bad[:5]) + (" ..." if len(bad) > 5 else "")
        return "failed", f"{len(bad)} GPU test(s) failed: {names}" if bad else _failure(o, "pytest"), skip_why
    if n["passed"] == 0:
        return "skipped", ("every GPU test skipped: " + "; ".join(skip_why[:3]) if skip_why
                           else "no GPU test collected"), skip_why
    return "passed", f"{n['skipped']} skipped: " + "; ".join(skip_why[:3]) if n["skipped"] else None, skip_why


def _labline_receipt(plan: Plan, junit: Path, labline_out: Path, rc: int | None) -> list[str]:
    from ..receipts import write_receipt
    from .gpu_suite_receipt import build_receipt, load_facts, receipt_name
    from .suite_receipt import parse_junit

    try:
        rec = build_receipt(load_facts(labline_out / "facts.json"), parse_junit(junit), pytest_rc=rc)
        return [_rel(plan, write_receipt(rec, junit.parent / receipt_name()))]
    except Exception as e:  # the suite's facts are its business: note it, keep the step's verdict
        print(f"qualify: lab-line receipt not written: {type(e).__name__}: {e}", file=sys.stderr)
        return []


def allreduce_tp(plan: Plan) -> int:
    return plan.tp if plan.tp is not None else plan.gpus


def step_allreduce(plan: Plan) -> StepResult:
    if not plan.gpus:
        return skipped("allreduce", _no_gpu_reason(plan))
    tp = allreduce_tp(plan)
    if tp < 2:
        return skipped("allreduce", f"TP={tp} ({'--tp' if plan.tp else 'one GPU here'}): an all-reduce needs two GPUs")
    d = plan.out / "allreduce"
    receipt, table = d / f"allreduce-tp{tp}.json", d / "allreduce_table.json"
    cmd = _cli(plan, "bench", "allreduce", "--tp", str(tp), "--tune", "--table", str(table),
               "--nccl-profile", ALLREDUCE_PROFILES, "--out", str(receipt), *plan.extra["allreduce"])
    d.mkdir(parents=True, exist_ok=True)
    topo_env = nccl_topo_env(plan, dict(os.environ))  # NCCL's topology dump, for the pack (attachments.py)
    r, o = _execute(plan, "allreduce", cmd, env=child_env(topo_env))
    r.details.update(topo_env)
    rec = _read_json(receipt)
    if rec is None:
        r.reason = _failure(o, "bench allreduce") + " (no receipt)"
        return r
    r.receipt = _rel(plan, receipt)
    r.files = [_rel(plan, p) for p in (table, receipt.with_suffix(".png")) if p.is_file()]
    s = rec.get("summary", {})
    r.headline = {k: s.get(k) for k in ("tp", "t3_chosen_backend", "t3_chosen_us", "t3_nccl_norm_us",
                                        "t3_chosen_over_nccl_norm", "t3_nccl_us_by_profile", "checks_passed")}
    if o.rc == 0 and not o.interrupted and not o.timed_out:
        r.verdict = "passed"
    elif o.interrupted or o.timed_out:
        r.reason = _failure(o, "bench allreduce")
    else:
        fails = s.get("failed_checks") or []
        failure = (rec.get("results") or {}).get("failure")
        r.reason = ("numerics failed: " + ", ".join(map(str, fails[:5])) if fails
                    else f"incomplete: {failure}" if failure else _failure(o, "bench allreduce"))
    return r


def step_eagle3(plan: Plan) -> StepResult:
    e = plan.eagle3
    if e is None:
        return skipped("eagle3", "no model paths given (--target PATH --draft PATH, or --config "
                                 "benchmark/<name>.toml)")
    if not plan.gpus:
        return skipped("eagle3", _no_gpu_reason(plan))
    d = plan.out / "eagle3"
    d.mkdir(parents=True, exist_ok=True)
    cfg_path = e.config_path
    if e.derived:
        cfg_path = d / f"{e.name}.toml"
        write_atomic(cfg_path, tomlio.dumps(e.raw, header="written by sglang-blackwell qualify"))
    cmd = _cli(plan, "bench", "eagle3", "--config", str(cfg_path), "--out", str(d),
               *(["--repeats", str(plan.repeats)] if plan.repeats else []), *plan.extra["eagle3"])
    r, o = _execute(plan, "eagle3", cmd)
    r.details.update(config=str(e.config_path), config_source=e.why, tp=e.tp)
    if e.derived:
        r.files.append(_rel(plan, cfg_path))
    found = sorted(p for p in d.glob("bench-eagle3_*.json") if not p.name.startswith("."))
    rec = _read_json(found[-1]) if found else None
    if rec is None:
        r.reason = _failure(o, "bench eagle3") + " (no receipt)"
        return r
    r.receipt = _rel(plan, found[-1])
    r.files += sorted(_rel(plan, p) for p in d.glob("bench-eagle3_*") if p != found[-1] and p.is_file())
    s = rec.get("summary", {})
    r.headline = {k: s.get(k) for k in EAGLE3_HEADLINE}
    if o.rc == 0 and s.get("passed") and not o.interrupted:
        r.verdict = "passed"
    elif o.interrupted or o.timed_out:
        r.reason = _failure(o, "bench eagle3")
    else:
        reasons = (rec.get("verdict") or {}).get("reasons") or []
        r.reason = "verdict failed: " + "; ".join(map(str, reasons[:3])) if reasons else _failure(o, "bench eagle3")
    return r


STEP_RUNNERS: dict[str, Callable[[Plan], StepResult]] = {
    "doctor": step_doctor, "gpu-tests": step_gpu_tests, "allreduce": step_allreduce, "eagle3": step_eagle3}


def run_steps(plan: Plan, progress: Progress) -> tuple[list[StepResult], str | None]:
    """Every step in order; returns the results and why the run was interrupted (None: it was not)."""
    results: list[StepResult] = []
    stop: str | None = None  # why the remaining steps do not run
    interrupted: str | None = None
    for i, name in enumerate(STEPS, 1):
        head = f"[{i}/{len(STEPS)}] {name}"
        if name in plan.skip:
            r = skipped(name, f"not run: {plan.skip[name]}")
        elif stop:
            r = skipped(name, f"not run: {stop}")
        else:
            try:
                r = STEP_RUNNERS[name](plan)
            except KeyboardInterrupt as e:
                r = StepResult(name, "failed", f"interrupted ({e or 'Ctrl-C'})", interrupted=str(e) or "Ctrl-C")
            except Exception as e:  # a broken step must not cost the receipt of the others
                r = StepResult(name, "failed", f"qualify could not run this step: {type(e).__name__}: {e}")
        results.append(r)
        progress(f"{head}: {r.verdict.upper()}" + (f" in {r.wall_s:.0f} s" if r.wall_s is not None else "")
                 + (f": {r.reason}" if r.reason else "") + (f" (receipt {r.receipt})" if r.receipt else ""))
        if r.interrupted and not stop:
            interrupted = r.interrupted
            stop = "interrupted"
        elif r.verdict == "failed" and plan.fail_fast and not stop:
            stop = f"--fail-fast after {name} failed"
    return results, interrupted
