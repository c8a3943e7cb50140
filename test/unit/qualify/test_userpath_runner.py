"""benchmark/lab/userpath.sh and the user-path GPU tests (test/gpu/userpath) end to end on a CPU machine, and the
`lab-userpath` receipt they leave.

The GPU is simulated by a stand-in `nvidia-smi` on PATH (one idle H200) and the serving stack by a stand-in
`sglang` package (with its dist-info, as `sglang-blackwell serve` reads the installed version): the real runner
runs the real tests under the real pytest with the real `openai` client, and each server is started the way the
tests start it, `python -m sglang_blackwell.cli serve -- <flags>`, which execs `python -m sglang.launch_server`:
test/support/fake_userpath_server.py, serving a generated tiny lab target with its real tokenizer. The tests must
pass, catch injected defects (FAKE_USERPATH_BREAK) in the right places, and leave the receipt either way.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from .suite_fixtures import ROOT, lab_pair_generator, runner_env, stand_in_sglang

pytest.importorskip("openai")
pytest.importorskip("transformers")
pytest.importorskip("torch")

SCRIPT = ROOT / "benchmark" / "lab" / "userpath.sh"
FAKE_SERVER = ROOT / "test" / "support" / "fake_userpath_server.py"


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("lab")
    lab_pair_generator().generate(str(out), "tiny", 0, "cpu", "constructed")
    return out


@pytest.fixture
def lab(tmp_path: Path, pair: Path) -> dict:
    stand_in_sglang(tmp_path / "site", FAKE_SERVER)
    env = runner_env(tmp_path, pair / "target", pair / "draft", PROBE="0",
                     SGLANG_BLACKWELL_CONFIG=str(tmp_path / "config"))
    return {"env": env, "tmp": tmp_path}


def run(lab: dict, *args: str, timeout: float = 400, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=ROOT, env={**lab["env"], **env}, capture_output=True,
                          text=True, timeout=timeout)


def outcomes(lab: dict) -> dict[str, str]:
    from sglang_blackwell.qualify.suite_receipt import parse_junit

    cases = parse_junit(lab["tmp"] / "out" / "userpath-junit.xml")["cases"]
    return {f"{c['name'].split('::')[0].rsplit('.', 1)[-1]}::{c['name'].split('::')[-1]}": c["outcome"]
            for c in cases}  # test_1_openai::test_...


def receipt(lab: dict) -> dict:
    (path,) = (lab["tmp"] / "out").glob("lab-userpath-*.json")
    return json.loads(path.read_text())


def test_help_and_bad_settings(lab):
    r = run(lab, "--help")
    assert r.returncode == 0 and "lab-userpath-<date>.json" in r.stdout and "#" not in r.stdout
    r = run(lab, SGLB_DEADLINE_S="100")
    assert r.returncode == 2 and "SGLB_DEADLINE_S=100: below 150 s" in r.stdout
    r = run(lab, SGLB_LAB_TARGET=str(lab["tmp"] / "nowhere"))
    assert r.returncode == 3 and "no tokenizer.json" in r.stdout
    r = run(lab, SGLB_SITE=str(lab["tmp"] / "empty"))
    assert r.returncode == 3 and "not importable: sglang" in r.stdout


@pytest.mark.slow
def test_the_suite_passes_against_a_faithful_server_and_catches_defects(lab):
    r = run(lab)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
    got = outcomes(lab)
    assert len(got) >= 25 and set(got.values()) == {"passed"}, got
    rec = receipt(lab)
    s = rec["summary"]
    assert (s["tp"], s["api"], s["grammar_backend"], s["tests_failed"], s["tests_skipped"]) == (
        1, "openai", "xgrammar", 0, 0)
    assert s["passed"] is True and s["tests_passed"] == len(got) and s["accept_len"] == 3.0
    assert rec["kind"] == "lab-userpath" and rec["tp"] == 1 and rec["machine"]["gpu_name"] == "NVIDIA H200"
    servers = rec["facts"]["servers"]
    assert servers["openai"]["cmd"][1:5] == ["-m", "sglang_blackwell.cli", "serve", "--"]  # as users start it
    assert "--skip-tokenizer-init" not in servers["openai"]["cmd"]
    assert servers["eagle3"]["server"]["speculative_algorithm"] == "EAGLE3"
    assert {c["status"] for c in servers["openai"]["bad_inputs"].values()} == {400}
    assert (lab["tmp"] / "out" / "userpath-artifacts.tar.gz").is_file()

    r = run(lab, FAKE_USERPATH_BREAK="grammar,traceback,greedy,stream,usage")
    assert r.returncode == 1
    bad = {k for k, v in outcomes(lab).items() if v != "passed"}
    one, two = "test_1_openai::", "test_2_eagle3::"
    assert {one + "test_the_server_is_a_user_launch_with_the_default_grammar_backend",
            one + "test_streamed_completion_is_the_ground_truth_with_usage", one + "test_server_log_has_no_traceback",
            one + "test_completion_is_the_ground_truth_with_usage[zq]", two + "test_server_log_has_no_traceback",
            one + "test_chat_is_the_ground_truth_with_usage[user]", two + "test_completion_is_the_ground_truth[zq]",
            one + "test_completion_logprobs"} <= bad, bad
    s = receipt(lab)["summary"]
    assert s["passed"] is False and s["grammar_backend"] == "none" and s["tests_failed"] == len(bad)
