"""benchmark/lab/hostile.sh on a CPU machine: its --help, the settings it refuses (exit 2) and the machine states it
refuses to run on (exit 3), each with the line that says why, before anything is started or emptied; shellcheck on
it; and the whole call end to end: the real runner runs the real suite (test/gpu/hostile) under the real pytest,
each server started the way the suite starts it, `python -m sglang_blackwell.cli serve -- <flags>`, which execs
`python -m sglang.launch_server`: here test/support/fake_hostile_server.py (a server that refuses everything
hostile, with injected defects: FAKE_HOSTILE_BREAK), serving a generated tiny lab target. The GPU is a stand-in
`nvidia-smi` on PATH (one idle H200, or none listed)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from .suite_fixtures import ADMIN_ROUTES, ROOT, assert_shellcheck_clean, lab_pair_generator, runner_env, stand_in_sglang

SCRIPT = ROOT / "benchmark" / "lab" / "hostile.sh"
FAKE_SERVER = ROOT / "test" / "support" / "fake_hostile_server.py"
# the admin endpoints of the stand-in sglang (the suite reads them from its http_server.py, as from the real one's)
FAKE_HTTP_SERVER = ADMIN_ROUTES + '''
@app.api_route("/start_profile", methods=["GET", "POST"])
@auth_level(AuthLevel.ADMIN_OPTIONAL)
async def start_profile(obj): ...

@app.post("/pause_generation")
@auth_level(AuthLevel.ADMIN_OPTIONAL)
async def pause_generation(obj): ...
'''


@pytest.fixture
def lab(tmp_path: Path) -> dict:
    target, draft = tmp_path / "lab" / "target", tmp_path / "lab" / "draft"
    target.mkdir(parents=True)
    draft.mkdir()
    (target / "tokenizer.json").write_text("{}")
    (draft / "config.json").write_text("{}")
    return {"env": runner_env(tmp_path, target, draft, PYTHONPATH=""), "tmp": tmp_path}


def run(lab: dict, *args: str, timeout: str = "120", **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=ROOT, env={**lab["env"], **env}, capture_output=True,
                          text=True, timeout=float(timeout))


def test_help_is_the_scripts_header(lab):
    r = run(lab, "--help")
    assert r.returncode == 0 and "lab-hostile-<date>.json" in r.stdout and "#" not in r.stdout
    assert "SGLB_DEADLINE_S (300" in r.stdout


@pytest.mark.parametrize(("env", "line"), [
    ({"SGLB_DEADLINE_S": "100"}, "SGLB_DEADLINE_S=100: below 150 s not even one server fits"),
    ({"SGLB_DEADLINE_S": "5m"}, "SGLB_DEADLINE_S=5m: expected whole seconds"),
    ({"SGLB_OUT": "/"}, "SGLB_OUT=/: refusing to empty it"),
], ids=["deadline too short", "deadline not seconds", "out is the root"])
def test_bad_settings_exit_2(lab, env, line):
    r = run(lab, **env)
    assert r.returncode == 2 and line in r.stdout, r.stdout + r.stderr
    assert not (lab["tmp"] / "out").exists()  # nothing was started or written


def test_outside_the_repository_root_exits_2(lab, tmp_path):
    r = subprocess.run(["bash", str(SCRIPT)], cwd=tmp_path, env=lab["env"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and "run from the sglang-blackwell repository root" in r.stdout


def test_a_machine_not_prepared_exits_3(lab):
    r = run(lab, FAKE_SMI_GPUS="0")
    assert r.returncode == 3 and "nvidia-smi lists no GPU" in r.stdout
    r = run(lab, SGLB_LAB_TARGET=str(lab["tmp"] / "nowhere"))
    assert r.returncode == 3 and "no tokenizer.json (generate the pair: python3 benchmark/models/gen_lab_pair.py" \
                                 in r.stdout
    r = run(lab, SGLB_LAB_DRAFT=str(lab["tmp"] / "nowhere"))
    assert r.returncode == 3 and "no config.json (generate the pair)" in r.stdout
    r = run(lab)  # the bundle is not installed in SGLB_SITE: no sglang to import
    assert r.returncode == 3 and "not importable: sglang" in r.stdout and "install the bundle" in r.stdout
    assert not (lab["tmp"] / "artifacts").exists()


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("lab")
    lab_pair_generator().generate(str(out), "tiny", 0, "cpu", "constructed")
    return out


def receipt(lab: dict) -> dict:
    (path,) = (lab["tmp"] / "out").glob("lab-hostile-*.json")
    return json.loads(path.read_text())


@pytest.mark.slow
def test_the_call_end_to_end_clean_then_with_defects(lab, pair):
    pytest.importorskip("transformers")
    stand_in_sglang(lab["tmp"] / "site", FAKE_SERVER, FAKE_HTTP_SERVER)
    env = {"SGLB_LAB_TARGET": str(pair / "target"), "SGLB_LAB_DRAFT": str(pair / "draft"),
           "SGLANG_BLACKWELL_CONFIG": str(lab["tmp"] / "config")}
    r = run(lab, **env, timeout="400")
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
    rec = receipt(lab)
    s = rec["summary"]
    assert (s["cases"], s["clean"], s["deaths"], s["leaks"], s["admin_accepted"], s["not_run"]) == (46, 46, 0, 0,
                                                                                                 0, 0)
    assert s["passed"] is True and s["tests_passed"] == 46 and s["restarts"] == {"baseline": 0, "eagle3": 0}
    arms = rec["facts"]["arms"]
    cmd = arms["baseline"]["starts"][0]["cmd"]
    assert cmd[1:5] == ["-m", "sglang_blackwell.cli", "serve", "--"]  # as users start it
    assert cmd[cmd.index("--host") + 1] == "0.0.0.0" and cmd[cmd.index("--api-key") + 1] == "<api-key>"
    assert "--speculative-algorithm" in arms["eagle3"]["starts"][0]["cmd"]
    admin = arms["baseline"]["cases"]["admin_endpoints_unkeyed"]
    assert admin["measured"]["routes"] == 4 and admin["status"] == 403
    assert (lab["tmp"] / "out" / "hostile-artifacts.tar.gz").is_file()

    r = run(lab, **env, timeout="400", FAKE_HOSTILE_BREAK="die_on_oov,leak,admin_open,deep_500")
    assert r.returncode == 1, r.stdout[-6000:] + r.stderr[-3000:]
    rec = receipt(lab)
    rows = {(row["arm"], row["case"]): row for row in rec["cases"]}
    for arm in ("baseline", "eagle3"):
        assert rows[(arm, "oov_ids_generate")]["verdict"] == "server-died"
        assert rows[(arm, "oov_ids_generate")]["message"].startswith("connection dropped")
        assert rows[(arm, "negative_ids_generate")]["verdict"] == "clean"  # on the restarted server
        assert rows[(arm, "admin_endpoints_unkeyed")]["verdict"] == "wrong"
        assert rows[(arm, "admin_endpoints_unkeyed")]["admin_accepted"] == 8
        assert rows[(arm, "n_64")]["verdict"] == "leak"
        assert rows[(arm, "json_100k_deep")]["verdict"] == "wrong" and rows[(arm, "json_100k_deep")]["status"] == 500
        assert rows[(arm, "logprobs_at_limits")]["verdict"] == "clean"  # measured against the pool n_64 left
    s = rec["summary"]
    assert (s["deaths"], s["restarts"], s["not_run"]) == (2, {"baseline": 1, "eagle3": 1}, 0)
    assert (s["admin_accepted"], s["leaks"], s["wrong"], s["passed"]) == (16, 2, 4, False)


@pytest.mark.network
def test_the_runner_is_shellcheck_clean():
    assert_shellcheck_clean(SCRIPT)
