"""`sglang-blackwell qualify`: the real CLI end to end on this CPU machine (doctor runs, the GPU steps are
recorded as skipped for lack of GPUs), the real commands against a simulated 2-GPU topology (bench allreduce
fails honestly, bench eagle3 runs against fake servers and passes), the gpu-tests step with a real pytest,
the orchestration (--fail-fast, interrupts, crashing steps) with stubbed steps, bad input that writes nothing,
process handling, packing, and the TOML writer for rewritten configs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import pytest
from bench_fakes import alive, write_config

from sglang_blackwell import tomlio
from sglang_blackwell.bench.eagle3.config import load_config
from sglang_blackwell.box.doctor import validate_doctor
from sglang_blackwell.box.topology import TOPOLOGY_ENV, Topology, detect
from sglang_blackwell.cli import main
from sglang_blackwell.qualify import plan as qplan
from sglang_blackwell.qualify import receipt as qreceipt
from sglang_blackwell.qualify import runner
from sglang_blackwell.qualify import steps as qsteps
from sglang_blackwell.receipts import validate_receipt
from sglang_blackwell.tomlio import tomllib

REPO = Path(__file__).resolve().parents[3]


def cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != TOPOLOGY_ENV}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "python"), env.get("PYTHONPATH", "")])
    env.update(extra)
    return env


def run_cli(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sglang_blackwell.cli", "qualify", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def model_dir(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    return path


def topo_file(tmp: Path, n: int) -> Path:
    p = tmp / f"topo{n}.json"
    p.write_text(json.dumps(Topology.simulated(n).to_dict()))
    return p


def steps(receipt: dict) -> dict[str, dict]:
    return receipt["summary"]["steps"]


# ---- the real CLI, end to end --------------------------------------------------------------------------------

@pytest.mark.skipif(detect(cuda=False).gpu_count > 0, reason="this machine has a GPU: the no-GPU path is not seen")
def test_cli_on_this_cpu_machine_skips_the_gpu_steps_for_lack_of_gpus(tmp_path: Path) -> None:
    out, tarball = tmp_path / "q", tmp_path / "send-me.tar.gz"
    target, draft = model_dir(tmp_path / "target"), model_dir(tmp_path / "draft")
    r = run_cli("--out", str(out), "--pack", str(tarball), "--target", str(target), "--draft", str(draft),
                env=cli_env(), cwd=tmp_path)
    assert r.returncode == 1, r.stderr[-3000:]  # doctor: not ready to serve (no GPU, no sglang here)
    receipt = json.loads((out / "qualify.json").read_text())
    assert validate_receipt(receipt) == [] and receipt["kind"] == "qualify"
    assert receipt["qualify_schema"] == qreceipt.SCHEMA and receipt["complete"] is True
    assert receipt["machine"]["gpu_count"] == 0 and receipt["topology"]["class"] == "no-gpu"
    s = receipt["summary"]
    assert s["status"] == "failed" and s["failed"] == ["doctor"] and s["passed"] == []
    assert s["skipped"] == ["gpu-tests", "allreduce", "eagle3"]
    st = steps(receipt)
    for name in ("gpu-tests", "allreduce", "eagle3"):  # skipped, with the reason, never passed
        assert st[name]["verdict"] == "skipped" and "no NVIDIA GPU" in st[name]["reason"], st[name]
        assert st[name]["receipt"] is None and st[name]["rc"] is None
    # doctor really ran: its own receipt, referenced relative to the output folder, and its log
    assert st["doctor"]["verdict"] == "failed" and st["doctor"]["rc"] == 1
    assert st["doctor"]["reason"] == "doctor: failing item(s): gpus, fork_builds"
    assert st["doctor"]["receipt"] == "doctor/doctor.json" and st["doctor"]["log"] == "logs/doctor.log"
    doc = json.loads((out / st["doctor"]["receipt"]).read_text())
    assert validate_doctor(doc) == [] and doc["summary"]["gpus"] == 0
    assert "sglang-blackwell doctor" in (out / "logs" / "doctor.log").read_text()
    assert receipt["versions"] == doc["versions"]  # taken from doctor, not re-collected
    # the target box's config with the given model paths was planned (not run: no GPU)
    e = receipt["eagle3_config"]
    assert e["derived"] and e["model"] == {"target": str(target), "draft": str(draft)}
    assert e["path"].endswith(qplan.DEFAULT_TEMPLATE)
    assert "[4/4] eagle3: SKIPPED" in r.stderr and "FAILED" in r.stdout
    # what upstream's issue templates ask for: each listed, with the file or why not
    listed = {a["name"]: a for a in receipt["attachments"]}
    assert set(listed) == set(s["attachments"]) == {"check_env", "nvidia_smi_topo", "nccl_topo_dump"}
    assert listed["nccl_topo_dump"]["status"] == "unavailable"
    assert "the allreduce step did not run NCCL: no NVIDIA GPU" in listed["nccl_topo_dump"]["reason"]
    for a in listed.values():
        assert (a["file"] is None) == (a["status"] == "unavailable") and (a["reason"] or a["status"] == "recorded")
        assert a["file"] is None or (out / a["file"]).is_file()
    # one tarball with the receipts and logs, nothing half-written
    with tarfile.open(tarball) as tf:
        names = set(tf.getnames())
    assert {"q/qualify.json", "q/doctor/doctor.json", "q/logs/doctor.log"} <= names
    assert not [p for p in [*out.rglob("*"), *tmp_path.glob(".*")] if p.name.endswith(".tmp")]


def test_cli_runs_real_commands_on_a_simulated_box_and_reports_honestly(tmp_path: Path) -> None:
    """SGLANG_BLACKWELL_TOPOLOGY claims 2 GPUs: bench allreduce really runs and fails (no CUDA GPU visible),
    bench eagle3 really runs against fake servers (rewritten config with --target/--draft) and passes."""
    cfg = write_config(tmp_path, repeats=1, concurrency="[1]", fusion_env=None,
                       eagle_env={"FAKE_ROUND_MS": "4", "FAKE_ACCEPT_LEN": "3"})
    target, draft = model_dir(tmp_path / "target"), model_dir(tmp_path / "draft")
    out = tmp_path / "q"
    r = run_cli("--out", str(out), "--skip", "doctor,gpu-tests", "--config", str(cfg), "--target", str(target),
                "--draft", str(draft), "--eagle3-args=--no-plots", "--quiet",
                env=cli_env(**{TOPOLOGY_ENV: str(topo_file(tmp_path, 2))}), cwd=tmp_path)
    assert r.returncode == 1, r.stderr[-3000:]
    receipt = json.loads((out / "qualify.json").read_text())
    assert validate_receipt(receipt) == []
    s, st = receipt["summary"], steps(receipt)
    assert s["status"] == "failed" and s["failed"] == ["allreduce"] and s["passed"] == ["eagle3"]
    assert s["gpus"] == 2 and "simulated" in s["note"]
    assert st["doctor"]["reason"] == "not run: --skip"
    ar = st["allreduce"]
    assert ar["rc"] == 2 and "0 visible" in ar["reason"] and ar["receipt"] is None
    assert "--tp 2" in (out / ar["log"]).read_text()
    dump = next(a for a in receipt["attachments"] if a["name"] == "nccl_topo_dump")
    assert dump["status"] == "unavailable" and "bench allreduce ran (exit 2) but NCCL wrote no" in dump["reason"]
    e3 = st["eagle3"]
    assert e3["verdict"] == "passed" and e3["rc"] == 0 and e3["headline"]["passed"] is True
    # what fusion acts on, carried into the headline (null here: no fusion arm, no profiler window)
    assert e3["headline"]["verify_allreduce_norm_ms_fusion_off"] is None
    bench = json.loads((out / e3["receipt"]).read_text())
    assert validate_receipt(bench) == [] and bench["kind"] == "bench-eagle3"
    rewritten = load_config(out / "eagle3" / "fake.toml")  # the config that ran, with the given paths
    assert (rewritten.model.target, rewritten.model.draft) == (str(target), str(draft))
    assert rewritten.workload.prompts_path == tmp_path / "prompts.jsonl"
    assert bench["config"]["sha256"] == rewritten.sha256
    assert "[4/4] eagle3: PASSED" in r.stderr and "launching:" not in r.stderr  # --quiet: steps' output in logs
    assert "launching:" in (out / e3["log"]).read_text()


# ---- the gpu-tests step with a real pytest ---------------------------------------------------------------------

GPU_TESTS = '''
import os
import pytest

pytestmark = pytest.mark.gpu

def test_sees_the_step_environment():
    assert os.environ["NCCL_NVLS_ENABLE"] == "0" and os.environ["SGLB_OUT"].endswith("labline")

def test_needs_more():
    pytest.skip("needs 8 GPUs")

def test_broken():
    assert 1 == 2
'''


def _plan(tmp: Path, *args: str, gpus: int = 2) -> qplan.Plan:
    from sglang_blackwell.cli import build_parser

    a = build_parser().parse_args(["qualify", "--out", str(tmp / "q"), "--quiet", *args])
    return qplan.make_plan(a, topology=Topology.simulated(gpus) if gpus else Topology(notes=["test"]))


def test_gpu_tests_step_runs_pytest_and_writes_its_receipt(tmp_path: Path, monkeypatch) -> None:
    tests = tmp_path / "gputests"
    tests.mkdir()
    (tests / "test_fake_gpu.py").write_text(GPU_TESTS)
    (tests / "test_cpu.py").write_text("def test_not_marked_gpu_so_deselected():\n    raise SystemExit(9)\n")
    plan = _plan(tmp_path, "--gpu-tests", str(tests), "--skip", "eagle3")
    plan.out.mkdir()
    plan.versions = {"torch": "from doctor"}
    monkeypatch.delenv("NCCL_NVLS_ENABLE", raising=False)  # the step sets it (multicast off)
    r = qsteps.step_gpu_tests(plan)
    assert r.headline == {"tests_passed": 1, "tests_failed": 1, "tests_skipped": 1, "pytest_rc": 1}
    assert r.verdict == "failed" and r.reason == "1 GPU test(s) failed: test_broken"
    rec = json.loads((plan.out / r.receipt).read_text())
    assert validate_receipt(rec) == [] and rec["kind"] == "gpu-tests" and rec["versions"]["torch"] == "from doctor"
    assert rec["summary"]["verdict"] == "failed" and rec["summary"]["skip_reasons"] == ["needs 8 GPUs"]
    assert sorted(c["name"].split("::")[1] for c in rec["tests"]) == [
        "test_broken", "test_needs_more", "test_sees_the_step_environment"]
    assert (plan.out / "gpu-tests" / "junit.xml").is_file() and r.log == "logs/gpu-tests.log"
    assert "test_broken" in (plan.out / r.log).read_text()


def _junit(**outcomes: str) -> dict:
    cases = [{"name": f"t::{n}", "outcome": o, "time_s": 0.0, "message": "Skipped: needs 8 GPUs" if o == "skipped"
              else None} for n, o in outcomes.items()]
    return {"counts": {k: sum(c["outcome"] == k for c in cases) for k in ("passed", "failed", "error", "skipped")},
            "cases": cases}


@pytest.mark.parametrize("outcomes, rc, verdict, reason", [
    ({"a": "passed", "b": "skipped"}, 0, "passed", "1 skipped: needs 8 GPUs"),
    ({"a": "passed"}, 0, "passed", None),
    ({"a": "skipped", "b": "skipped"}, 0, "skipped", "every GPU test skipped: needs 8 GPUs"),
    ({}, 5, "skipped", "no GPU test collected"),
    ({"a": "passed", "b": "error"}, 1, "failed", "1 GPU test(s) failed: b"),
    ({"a": "passed"}, 3, "failed", "pytest exited with 3: INTERNALERROR"),
])
def test_gpu_tests_verdict(outcomes, rc, verdict, reason) -> None:
    o = runner.Outcome(rc=rc, wall_s=1.0, tail=["INTERNALERROR"])
    assert qsteps.judge_gpu_tests(_junit(**outcomes), o)[:2] == (verdict, reason)
    o.timed_out = True
    assert qsteps.judge_gpu_tests(_junit(**outcomes), o)[:2] == ("failed", "pytest timed out")


def test_default_gpu_test_selection_says_what_it_leaves_out(tmp_path: Path, monkeypatch) -> None:
    plan = _plan(tmp_path)
    monkeypatch.setattr(qsteps, "flashinfer_aot_modules", lambda: [])
    targets, left = qsteps.gpu_test_targets(plan)
    assert targets == list(qsteps.GPU_TEST_TARGETS) and qsteps.AOT_TEST in left
    assert all((REPO / t).exists() for t in [*targets, qsteps.AOT_TEST])
    monkeypatch.setattr(qsteps, "flashinfer_aot_modules", lambda: ["trtllm_comm"])
    assert qsteps.gpu_test_targets(plan) == ([*qsteps.GPU_TEST_TARGETS, qsteps.AOT_TEST], {})


def test_steps_that_cannot_run_say_why(tmp_path: Path) -> None:
    one = _plan(tmp_path, gpus=1)
    assert qsteps.step_allreduce(one).reason == "TP=1 (one GPU here): an all-reduce needs two GPUs"
    assert qsteps.step_eagle3(one).reason.startswith("no model paths given")
    none = _plan(tmp_path, gpus=0)
    for fn in (qsteps.step_gpu_tests, qsteps.step_allreduce):
        r = fn(none)
        assert r.verdict == "skipped" and r.reason == "no NVIDIA GPU on this machine (test)"
    assert not (tmp_path / "q").exists()


# ---- orchestration with stubbed steps ---------------------------------------------------------------------------

@pytest.fixture
def stub_steps(monkeypatch, tmp_path: Path):
    """Replace the step runners; returns (calls, set_outcome). The topology: a simulated 2-GPU box."""
    monkeypatch.setenv(TOPOLOGY_ENV, str(topo_file(tmp_path, 2)))
    monkeypatch.setattr("sglang_blackwell.receipts.collect_versions", lambda: {"torch": "stub"})
    calls: list[str] = []
    outcomes: dict[str, object] = {}

    def make(name: str):
        def runner(plan: qplan.Plan) -> qsteps.StepResult:
            calls.append(name)
            o = outcomes.get(name, "passed")
            if isinstance(o, BaseException):
                raise o
            return qsteps.StepResult(name, o, None if o == "passed" else f"stub {o}", wall_s=0.1)
        return runner

    for name in qplan.STEPS:
        monkeypatch.setitem(qsteps.STEP_RUNNERS, name, make(name))
    return calls, outcomes.update


def _qualify(tmp: Path, *args: str) -> tuple[int, dict]:
    rc = main(["qualify", "--out", str(tmp / "q"), *args])
    return rc, json.loads((tmp / "q" / "qualify.json").read_text())


def test_all_steps_pass(tmp_path: Path, stub_steps) -> None:
    calls, _ = stub_steps
    rc, r = _qualify(tmp_path)
    assert rc == 0 and calls == list(qplan.STEPS) and r["summary"]["status"] == "passed"
    assert r["tp"] == 2 and r["versions"]["torch"] == "stub"


def test_a_failing_step_does_not_stop_the_others(tmp_path: Path, stub_steps) -> None:
    calls, set_outcome = stub_steps
    set_outcome({"doctor": "failed", "allreduce": RuntimeError("boom")})
    rc, r = _qualify(tmp_path)
    assert rc == 1 and calls == list(qplan.STEPS)
    st = steps(r)
    assert r["summary"]["failed"] == ["doctor", "allreduce"] and st["eagle3"]["verdict"] == "passed"
    assert st["allreduce"]["reason"] == "qualify could not run this step: RuntimeError: boom"


def test_fail_fast_stops_after_the_first_failure(tmp_path: Path, stub_steps) -> None:
    calls, set_outcome = stub_steps
    set_outcome({"gpu-tests": "failed"})
    rc, r = _qualify(tmp_path, "--fail-fast", "--skip", "doctor")
    assert rc == 1 and calls == ["gpu-tests"]
    st = steps(r)
    assert st["doctor"]["reason"] == "not run: --skip"
    for name in ("allreduce", "eagle3"):
        assert st[name] == dict(st[name], verdict="skipped", reason="not run: --fail-fast after gpu-tests failed")


def test_default_out_is_outside_the_checkout(tmp_path: Path, stub_steps, monkeypatch) -> None:
    """Without --out, run from the checkout as the README says: the qualification lands in the XDG state folder,
    and the checkout gains no untracked file (it was benchmark/results/qualify-<time>/ there)."""
    repo = Path(__file__).resolve().parents[3]
    before = sorted((repo / "benchmark" / "results").iterdir())
    monkeypatch.chdir(repo)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert main(["qualify", "--quiet"]) == 0
    (out,) = (tmp_path / "state" / "sglang-blackwell" / "qualify").iterdir()
    assert out.name.startswith("qualify-") and (out / "qualify.json").is_file()
    assert sorted((repo / "benchmark" / "results").iterdir()) == before
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert qplan.default_out().parent == tmp_path / "home" / ".local" / "state" / "sglang-blackwell" / "qualify"


def test_skipped_steps_are_partial_not_failed(tmp_path: Path, stub_steps) -> None:
    _, set_outcome = stub_steps
    set_outcome({"eagle3": "skipped"})
    rc, r = _qualify(tmp_path)
    assert rc == 0 and r["summary"]["status"] == "partial" and r["summary"]["skipped"] == ["eagle3"]


def test_interrupt_writes_the_receipt_and_stops(tmp_path: Path, stub_steps) -> None:
    calls, set_outcome = stub_steps
    set_outcome({"gpu-tests": KeyboardInterrupt("signal SIGTERM")})
    rc, r = _qualify(tmp_path)
    assert rc == 130 and calls == ["doctor", "gpu-tests"]
    assert r["complete"] is False and r["interrupted"] == "signal SIGTERM"
    assert steps(r)["gpu-tests"]["reason"] == "interrupted (signal SIGTERM)"
    assert steps(r)["eagle3"]["reason"] == "not run: interrupted"


# ---- bad input: a clear error and nothing written ---------------------------------------------------------------

@pytest.mark.parametrize("args, message", [
    (["--skip", "doctor,gpu"], "--skip: unknown step 'gpu' (steps: doctor, gpu-tests, allreduce, eagle3)"),
    (["--skip", "doctor,gpu-tests,allreduce,eagle3"], "every step skipped"),
    (["--target", "{tmp}/nope", "--draft", "{tmp}/draft"], "--target {tmp}/nope: no such directory"),
    (["--target", "{tmp}/empty", "--draft", "{tmp}/draft"], "not a model directory (no config.json)"),
    (["--target", "{tmp}/target"], "needs both --target PATH and --draft PATH"),
    (["--config", "{tmp}/missing.toml"], "benchmark config not found"),
    (["--config", "{tmp}/fake.toml"], "[model] target = '/fake/target': no such directory"),
    (["--config", "{tmp}/fake.toml", "--target", "{tmp}/target", "--draft", "{tmp}/draft", "--tp", "3"],
     "--tp 3: this box has 2 GPU(s)"),
    (["--config", "{tmp}/tp4.toml"], "bench eagle3 at TP=4"),
    (["--tp", "0"], "--tp must be >= 1"),
    (["--allreduce-args=--tp 8"], "--allreduce-args: --tp is set by qualify itself"),
    (["--eagle3-args=--out x"], "--eagle3-args: --out is set by qualify itself"),
    (["--pack", "{tmp}/out.zip"], "expected a .tar.gz"),
    (["--pack", "{tmp}/no/such/dir/x.tar.gz"], "does not exist"),
    (["--lab-pair", "{tmp}/empty"], "--lab-pair {tmp}/empty: no target/config.json"),
    (["--gpu-tests", "test/gpu/nope.py"], "--gpu-tests test/gpu/nope.py: not found"),
    (["--out", "{tmp}/full"], "exists and is not an empty directory"),
])
def test_bad_input_is_a_clear_error_and_writes_nothing(tmp_path: Path, monkeypatch, capsys, args, message) -> None:
    monkeypatch.setenv(TOPOLOGY_ENV, str(topo_file(tmp_path, 2)))
    model_dir(tmp_path / "target")
    model_dir(tmp_path / "draft")
    (tmp_path / "empty").mkdir()
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "old.json").write_text("{}")
    cfg = write_config(tmp_path)
    (tmp_path / "tp4.toml").write_text(cfg.read_text().replace("tp = 2", "tp = 4")
                                       .replace('"/fake/target"', f'"{tmp_path}/target"')
                                       .replace('"/fake/draft"', f'"{tmp_path}/draft"'))
    before = sorted(p.name for p in tmp_path.iterdir())
    argv = [x.format(tmp=tmp_path) for x in args]
    for opt, default in (("--out", "q"), ("--pack", "q.tar.gz")):
        if opt not in argv:
            argv += [opt, str(tmp_path / default)]
    rc = main(["qualify", *argv])
    assert rc == 2
    err = capsys.readouterr().err
    assert err.startswith("sglang-blackwell qualify: error: ") and message.format(tmp=tmp_path) in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no output folder, no tarball, no temp file


# ---- the derived bench eagle3 config ------------------------------------------------------------------------

def test_target_and_draft_alone_use_the_target_box_config_at_this_gpu_count(tmp_path: Path) -> None:
    target, draft = model_dir(tmp_path / "t"), model_dir(tmp_path / "d")
    plan = _plan(tmp_path, "--target", str(target), "--draft", str(draft), gpus=4)
    e = plan.eagle3
    assert e.derived and e.tp == 4 and e.name == "kimi-k2.5-8xpcie" and "TP=4 (every GPU here)" in e.why
    assert e.raw["model"] == {"target": str(target), "draft": str(draft), "tokenizer": "target"}
    assert Path(e.raw["workload"]["prompts"]).is_absolute()
    assert _plan(tmp_path, "--target", str(target), "--draft", str(draft), "--tp", "2", gpus=4).eagle3.tp == 2
    # a config given alone runs as it is (same hash as the shipped file: its receipts compare)
    as_is = _plan(tmp_path, "--config", str(REPO / "benchmark" / "llama-3.1-8b-eagle3.toml"), gpus=8).eagle3
    assert not as_is.derived and as_is.tp == 1


@pytest.mark.parametrize("cfg", sorted((REPO / "benchmark").glob("*.toml")), ids=lambda p: p.name)
def test_dump_toml_round_trips_every_shipped_config(cfg: Path) -> None:
    raw = load_config(cfg).raw
    assert tomllib.loads(tomlio.dumps(raw)) == raw


def test_dump_toml_quotes_what_needs_quoting() -> None:
    data = {"name": 'a "quoted"\\ name\twith\nnewline and ünïcode \x7f', "n": 3, "x": 0.5, "on": False,
            "arms": {"eagle3+fusion": {"args": ["--a=1", ""], "env": {"K.1": "v"}}}, "empty": {}}
    assert tomllib.loads(tomlio.dumps(data)) == data


# ---- processes, packing --------------------------------------------------------------------------------------

def test_a_step_past_its_time_is_stopped_with_its_session(tmp_path: Path) -> None:
    code = ("import signal, subprocess, sys, time; signal.signal(signal.SIGINT, signal.SIG_IGN); "
            "p = subprocess.Popen(['sleep', '60']); print(p.pid, flush=True); time.sleep(60)")
    o = runner.run_command([sys.executable, "-c", code], env=dict(os.environ), cwd=None,
                            log_path=tmp_path / "x.log", timeout_s=1.0, grace_s=0.5, echo=False)
    assert o.timed_out and o.rc == -signal.SIGKILL and o.wall_s < 15
    grandchild = int(o.tail[0])
    assert o.left_killed in ([], [grandchild])  # SIGKILL to the group took it, or the sweep did
    deadline = time.monotonic() + 5
    while alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(grandchild)
    assert "[qualify] timed out after 1 s" in (tmp_path / "x.log").read_text()


def test_processes_left_behind_by_a_step_are_killed_and_named(tmp_path: Path) -> None:
    o = runner.run_command(["sh", "-c", "sleep 60 & echo $!"], env=dict(os.environ), cwd=None,
                            log_path=tmp_path / "x.log", timeout_s=20, grace_s=1, echo=False)
    assert o.rc == 0 and o.left_killed == [int(o.tail[0])]
    time.sleep(0.2)
    assert not alive(int(o.tail[0]))


def test_sigterm_to_qualify_lets_the_step_clean_up(tmp_path: Path) -> None:
    from sglang_blackwell.procs import signals_as_interrupt

    code = ("import signal, sys, time\n"
            "def bye(*_):\n    print('cleaning up', flush=True); sys.exit(3)\n"
            "signal.signal(signal.SIGINT, bye); print('up', flush=True); time.sleep(30)\n")
    log = tmp_path / "x.log"

    def sigterm_once_up() -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and "\nup\n" not in (log.read_text() if log.exists() else ""):
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGTERM)

    with signals_as_interrupt():
        threading.Thread(target=sigterm_once_up, daemon=True).start()
        o = runner.run_command([sys.executable, "-c", code], env=dict(os.environ), cwd=None,
                                log_path=log, timeout_s=30, grace_s=10, echo=False)
    assert o.interrupted == "signal SIGTERM" and o.rc == 3 and o.tail == ["up", "cleaning up"]


def test_pack_leaves_out_other_ranks_traces_and_is_atomic(tmp_path: Path) -> None:
    out = tmp_path / "q"
    (out / "gpu-tests" / "labline" / "traces").mkdir(parents=True)
    for n in ("x-TP-0.trace.json.gz", "x-TP-1.trace.json.gz", ".half.json.tmp"):
        (out / "gpu-tests" / "labline" / "traces" / n).write_text("t")
    (out / "qualify.json").write_text("{}")
    dest = qreceipt.pack(out, tmp_path / "q.tar.gz")
    with tarfile.open(dest) as tf:
        names = tf.getnames()
    assert "q/qualify.json" in names and "q/gpu-tests/labline/traces/x-TP-0.trace.json.gz" in names
    assert not [n for n in names if "TP-1" in n or n.endswith(".tmp")]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["q", "q.tar.gz"]


def test_pack_is_not_written_over_a_pack_another_run_wrote_meanwhile(tmp_path: Path) -> None:
    from sglang_blackwell.errors import UserError

    out = tmp_path / "q"
    out.mkdir()
    (out / "qualify.json").write_text("{}")
    dest = tmp_path / "q.tar.gz"
    found = qplan.file_identity(dest)  # absent when this run began
    dest.write_bytes(b"the other run's pack")
    with pytest.raises(UserError, match=r"q.tar.gz: changed while this run ran \(another qualify packed to it\)"):
        qreceipt.pack(out, dest, found)
    assert dest.read_bytes() == b"the other run's pack"
    assert qreceipt.pack(out, dest, qplan.file_identity(dest)) == dest  # as found: replaced
    with tarfile.open(dest) as tf:
        assert tf.getnames() == ["q", "q/qualify.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["q", "q.tar.gz"]


def test_a_second_run_in_the_same_out_is_refused(tmp_path: Path) -> None:
    from sglang_blackwell.errors import UserError
    from sglang_blackwell.qualify.run import claim_out

    out = tmp_path / "q"
    fd = claim_out(out)
    try:
        with pytest.raises(UserError, match="another qualify is writing there"):
            claim_out(out)
    finally:
        os.close(fd)
    (out / "doctor").mkdir()
    with pytest.raises(UserError, match="another run wrote there since this one started"):
        claim_out(out)
