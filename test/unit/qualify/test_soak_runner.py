"""benchmark/lab/soak.sh on a CPU machine: its --help, the settings it refuses (exit 2), status and wait with no soak
started (exit 5), shellcheck on it; and the soak end to end against real server processes: the real runner runs the
real soak (test/gpu/soak) under the real pytest, both servers started at once the way the soak starts them,
`python -m sglang_blackwell.cli serve -- <flags>`, which execs `python -m sglang.launch_server`: here
test/support/fake_hostile_server.py streaming completions (FAKE_STREAM_ITL_S), with injected defects
(FAKE_HOSTILE_BREAK). A few seconds of soak in buckets of 1 s. Once in the foreground with every defect (an
injected 500 an error, a changed reference, a leak on abort: each its own check failing), once detached (start,
status, wait) and clean. The ITL bounds are loosened (SGLB_SOAK_ITL_TOL, SGLB_SOAK_MIN_GAPS): nothing here asserts
on timing (test_soak_verdict judges ITL on synthetic buckets); the receipt says the bounds were not the defaults."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from .suite_fixtures import ROOT, assert_shellcheck_clean, runner_env, stand_in_sglang

SCRIPT = ROOT / "benchmark" / "lab" / "soak.sh"
FAKE_SERVER = ROOT / "test" / "support" / "fake_hostile_server.py"
SOAK = {"SGLB_SOAK_S": "3", "SGLB_SOAK_BUCKET_S": "1", "SGLB_SOAK_MAX_C": "4", "SGLB_SOAK_ITL_TOL": "1000",
        "SGLB_SOAK_MIN_GAPS": "1", "SGLB_SOAK_KV_WAIT_S": "2", "FAKE_STREAM_ITL_S": "0.002"}


@pytest.fixture
def lab(tmp_path: Path) -> dict:
    target, draft = tmp_path / "lab" / "target", tmp_path / "lab" / "draft"
    target.mkdir(parents=True)
    draft.mkdir()
    (target / "config.json").write_text(json.dumps({"vocab_size": 32000}))
    for f in (target / "tokenizer.json", target / "lab_pair.json", draft / "config.json"):
        f.write_text("{}")
    env = runner_env(tmp_path, target, draft, PYTHONPATH="", SGLB_SOAK_STATE=str(tmp_path / "state"),
                     SGLANG_BLACKWELL_CONFIG=str(tmp_path / "config"), **SOAK)
    return {"env": env, "tmp": tmp_path}


def run(lab: dict, *args: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=ROOT, env={**lab["env"], **env}, capture_output=True,
                          text=True, timeout=timeout)


def test_help_is_the_scripts_header(lab):
    r = run(lab, "--help")
    assert r.returncode == 0 and "lab-soak-<date>.json" in r.stdout and "#" not in r.stdout
    assert "soak.sh wait [SECONDS]" in r.stdout and "SGLB_SOAK_S (600)" in r.stdout


@pytest.mark.parametrize(("args", "env", "line"), [
    (("run",), {"SGLB_SOAK_S": "10m"}, "SGLB_SOAK_S=10m: expected whole seconds, at least 3"),
    (("soak",), {}, "unknown action 'soak': run, start, status, wait [SECONDS] or stop"),
    (("wait", "5m"), {}, "wait 5m: expected whole seconds"),
    (("run",), {"SGLB_OUT": "/"}, "SGLB_OUT=/: refusing to empty it"),
], ids=["soak not seconds", "unknown action", "wait not seconds", "out is the root"])
def test_bad_settings_exit_2(lab, args, env, line):
    r = run(lab, *args, **env)
    assert r.returncode == 2 and line in r.stdout, r.stdout + r.stderr
    assert not (lab["tmp"] / "out").exists()


def test_status_and_wait_with_no_soak_started_exit_5(lab):
    for action in ("status", "wait"):
        r = run(lab, action)
        assert r.returncode == 5 and "no soak started" in r.stdout, r.stdout + r.stderr


def receipt(lab: dict) -> dict:
    (path,) = (lab["tmp"] / "out").glob("lab-soak-*.json")
    return json.loads(path.read_text())


def failed(rec: dict) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {"baseline": set(), "eagle3": set()}
    for c in rec["checks"]:
        if not c["ok"]:
            out[c["arm"]].add(c["check"])
    return out


@pytest.mark.slow
def test_the_soak_in_the_foreground_catches_each_injected_defect(lab):
    stand_in_sglang(lab["tmp"] / "site", FAKE_SERVER)
    r = run(lab, "run", FAKE_HOSTILE_BREAK="stream_500,reference_drift,leak_on_abort")
    assert r.returncode == 1, r.stdout[-6000:] + r.stderr[-3000:]
    rec = receipt(lab)
    assert rec["kind"] == "lab-soak" and rec["summary"]["passed"] is False
    assert failed(rec) == {arm: {"errors", "references", "kv_idle"} for arm in ("baseline", "eagle3")}
    errors = next(c for c in rec["checks"] if c["arm"] == "baseline" and c["check"] == "errors")
    assert errors["value"] >= 1 and "500: Internal Server Error" in errors["why"]
    assert rec["summary"]["arms"]["baseline"]["errors"] == errors["value"]
    assert (lab["tmp"] / "out" / "soak-artifacts.tar.gz").is_file()
    assert not (lab["tmp"] / "state" / "servers.sids").exists()  # both sessions ended, the file gone


@pytest.mark.slow
def test_the_soak_detached_start_status_wait_clean(lab):
    missing = [t for t in ("setsid", "nohup", "ps", "timeout") if shutil.which(t) is None]
    if missing:
        pytest.skip(f"the detached path needs {', '.join(missing)}")
    stand_in_sglang(lab["tmp"] / "site", FAKE_SERVER)
    t0 = time.monotonic()
    r = run(lab, "start")
    assert r.returncode == 0 and "soak started detached" in r.stdout, r.stdout + r.stderr
    assert time.monotonic() - t0 < 30  # returns before the soak is over (no timing of the soak itself)
    assert run(lab, "start").returncode == 4  # one at a time
    r = run(lab, "status")
    assert r.returncode in (0, 4) and ("soak running" in r.stdout or "soak finished" in r.stdout), r.stdout
    r = run(lab, "wait", "100")
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
    rec = receipt(lab)
    s = rec["summary"]
    assert s["passed"] is True and s["bounds_default"] is False and s["failed_checks"] == []
    for arm in ("baseline", "eagle3"):
        a = s["arms"][arm]
        assert a["errors"] == 0 and a["aborted"] >= 1 and a["ok"] >= 1 and a["minutes"] == 3
        buckets = rec["buckets"][arm]
        assert [b["minute"] for b in buckets if b["full"]] == [0, 1, 2]
        assert all(b["samples"] >= 1 and b["rss_mib_max"] for b in buckets if b["full"])
    cmd = rec["facts"]["arms"]["eagle3"]["start"]["cmd"]
    assert cmd[1:5] == ["-m", "sglang_blackwell.cli", "serve", "--"] and "<api-key>" in cmd
    assert cmd[cmd.index("--host") + 1] == "0.0.0.0" and "--speculative-algorithm" in cmd
    assert cmd.count("--mem-fraction-static") == 1 and cmd[cmd.index("--context-length") + 1] == "34816"
    assert run(lab, "status").returncode == 0  # finished
    r = run(lab, "stop")
    assert r.returncode == 0 and "soak finished" in r.stdout


@pytest.mark.network
def test_the_runner_is_shellcheck_clean():
    assert_shellcheck_clean(SCRIPT)
