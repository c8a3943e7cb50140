"""`bench eagle3` measures only servers it launched, and refuses bad input before anything is launched or written
(issue 18 items 1 and 8).

Item 1: a server that already answers on the config's port must not become the "baseline" while ours dies with
"Address already in use"; a server that answers for ours (another session) fails the arm; so does our server
exiting while something still answers. Item 8: a missing model path, a missing launcher, a dead --attach URL are
bad input (exit 2, one line, no receipt), not a failed measurement (exit 1, "VERDICT: FAIL")."""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path

import pytest
from bench_fakes import FAKE_SERVER, dead_port, kill_foreign, race_launcher_config, write_config

from sglang_blackwell.bench.eagle3.server import Server, free_port, launched_server
from sglang_blackwell.cli import main


def bench(*args: str) -> int:
    return main(["bench", "eagle3", *args])


def one_line(err: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, err
    return lines[0]


def runs_of(out: Path) -> list[dict]:
    (path,) = sorted(out.glob("*_runs.jsonl"))
    return [json.loads(ln)["run"] for ln in path.read_text().splitlines()]


# ---- item 1: the port is ours, and so is the server that answers ------------------------------------------------

def test_a_server_already_on_the_configs_port_is_refused_before_anything_is_written(tmp_path: Path, capsys) -> None:
    # someone else's SGLang server on the port the config names (every shipped config says port = 30000)
    port = free_port()
    other = Server(url=f"http://127.0.0.1:{port}", log_path=tmp_path / "other.log")
    cmd = [sys.executable, str(FAKE_SERVER), "--model-path", "/other/model", "--port", str(port), "--tp-size", "2"]
    cfg = write_config(tmp_path, model_dirs=True, repeats=1, concurrency="[1]")
    cfg.write_text(cfg.read_text().replace("port = 0", f"port = {port}"))
    out = tmp_path / "out"
    with launched_server(other, cmd, {**os.environ, "FAKE_STARTUP_S": "0"}, startup_timeout_s=20, grace_s=1,
                         gpu_release_s=0):
        rc = bench("--config", str(cfg), "--out", str(out), "--no-plots")
    err = capsys.readouterr().err
    assert rc == 2, err
    line = one_line(err)
    assert f"{cfg}: [server] port {port}" in line and "in use" in line and f"pid {other.pid}" in line
    assert not out.exists()  # no receipt, no runs file, no server log: nothing was launched


def test_a_busy_port_found_at_launch_fails_that_arm_without_launching(tmp_path: Path) -> None:
    # between two arms someone takes the port: the arm fails, nothing of ours is started on it
    import dataclasses

    from sglang_blackwell.bench.eagle3 import arm_run
    from sglang_blackwell.bench.eagle3.config import load_config

    cfg = load_config(write_config(tmp_path, model_dirs=True, repeats=1, concurrency="[1]"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        cfg = dataclasses.replace(cfg, server=dataclasses.replace(cfg.server, port=port))
        rec = arm_run.run_arm(cfg, cfg.arms["baseline"], 1, tmp_path / "stem", url=None, progress=lambda m: None)
    assert rec["error"] and f"port {port}" in rec["error"] and "in use" in rec["error"]
    assert rec["levels"] == {} and not Path(rec["log"] or tmp_path / "none").exists()


def test_a_foreign_server_answering_for_ours_fails_the_arm(tmp_path: Path, capsys) -> None:
    cfg = write_config(tmp_path, model_dirs=True, repeats=1, concurrency="[1]")
    race_launcher_config(tmp_path, cfg)
    out = tmp_path / "out"
    try:
        rc = bench("--config", str(cfg), "--out", str(out), "--no-plots", "--arms", "baseline")
    finally:
        foreign = kill_foreign(tmp_path)
    assert rc == 1 and foreign  # the foreign server did answer on our port
    (run,) = runs_of(out)
    assert run["error"] and "not of our server's session" in run["error"], run["error"]
    assert run["levels"] == {}  # nothing of the foreign server was measured


EXITING_LAUNCHER = """\
import subprocess, sys, time, urllib.request
port = sys.argv[sys.argv.index("--port") + 1]
child = subprocess.Popen([sys.executable, *sys.argv[1:]])  # the server, in our session
while True:
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
        break
    except OSError:
        time.sleep(0.05)
time.sleep(0.8)  # healthy, measured a little, then the process we started is gone (its child keeps serving)
sys.exit(0)
"""


def test_our_server_exiting_during_the_measurement_fails_the_arm(tmp_path: Path) -> None:
    launcher = tmp_path / "exiting_launcher.py"
    launcher.write_text(EXITING_LAUNCHER)
    # 64 tokens at 20 ms per step, twice: the level takes ~2.5 s, the launcher exits 0.8 s after healthy
    cfg = write_config(tmp_path, model_dirs=True, repeats=1, concurrency="[1]", output_len=64,
                       baseline_env={"FAKE_STEP_MS": "20"})
    cfg.write_text(cfg.read_text().replace(
        f"launcher = [{json.dumps(sys.executable)}, {json.dumps(str(FAKE_SERVER))}]",
        f"launcher = {json.dumps([sys.executable, str(launcher), str(FAKE_SERVER)])}"))
    out = tmp_path / "out"
    assert bench("--config", str(cfg), "--out", str(out), "--no-plots", "--arms", "baseline") == 1
    (run,) = runs_of(out)
    assert run["error"] and "exited with code 0" in run["error"], run["error"]
    assert run["teardown"]["group_gone"]  # the child that kept serving was taken down with the session


def test_launch_args_the_server_reports_must_be_ours(tmp_path: Path) -> None:
    # /server_info reports the launch args: a server serving another model on our port is not the one we started
    from sglang_blackwell.bench.eagle3.arm_run import check_launched
    from sglang_blackwell.bench.eagle3.config import load_config
    from sglang_blackwell.bench.eagle3.run_error import BenchRunError

    cfg = load_config(write_config(tmp_path, model_dirs=True))
    mine = {"model_path": cfg.model.target, "port": 31234, "tp_size": 2}
    check_launched(mine, cfg, 31234, "http://127.0.0.1:31234")
    with pytest.raises(BenchRunError, match="model_path='/other/model'"):
        check_launched({**mine, "model_path": "/other/model"}, cfg, 31234, "http://127.0.0.1:31234")
    with pytest.raises(BenchRunError, match="port=30000"):
        check_launched({**mine, "port": 30000}, cfg, 31234, "http://127.0.0.1:31234")


# ---- item 8: bad input is exit 2, one line, before anything is launched or written ------------------------------

def _edit(cfg: Path, old: str, new: str) -> None:
    text = cfg.read_text()
    assert old in text, old
    cfg.write_text(text.replace(old, new))


BAD_INPUT = [
    # (what, edit of the config or None, extra arguments, what the line must name)
    ("missing target", ("target = ", "target = \"/nonexistent/target\"\n#"), [],
     "[model] target '/nonexistent/target': no such file or directory"),
    ("missing draft", ("draft = ", "draft = \"/nonexistent/draft\"\n#"), [],
     "[model] draft '/nonexistent/draft': no such file or directory"),
    ("home-relative target", ("target = ", "target = \"~/models/target\"\n#"), [],
     "[model] target '~/models/target'"),
    ("missing tokenizer path", ('tokenizer = "target"', 'tokenizer = "/nonexistent/tok"'), [],
     "[model] tokenizer '/nonexistent/tok': no such file or directory"),
    ("launcher not on PATH", ("launcher = ", "launcher = [\"no-such-launcher-xyz\"]\n#"), [],
     "[server] launcher: no-such-launcher-xyz: no such program"),
    ("launcher path missing",
     ("launcher = ", "launcher = [\"/nonexistent/bin/python3\", \"-m\", \"sglang.launch_server\"]\n#"), [],
     "[server] launcher: /nonexistent/bin/python3: no such program"),
    ("launcher module missing", ("launcher = ", f"launcher = [{json.dumps(sys.executable)}, \"-m\", "
                                                "\"no_such_pkg_xyz.launch_server\"]\n#"), [],
     "[server] launcher: no module named no_such_pkg_xyz.launch_server"),
    ("launcher script missing", ("launcher = ", f"launcher = [{json.dumps(sys.executable)}, "
                                                "\"/nonexistent/server.py\"]\n#"), [],
     "[server] launcher: /nonexistent/server.py: no such file"),
    ("host not of this machine", ("[server]", "[server]\nhost = \"192.0.2.1\""), [], "[server] host '192.0.2.1'"),
    ("deadline zero", None, ["--deadline-s", "0"], "--deadline-s: expected a number of seconds > 0"),
    ("deadline negative", None, ["--deadline-s", "-5"], "--deadline-s: expected a number of seconds > 0"),
    ("no arm selected", None, ["--arms", ","], "--arms ','"),
    ("tp zero", None, ["--tp", "0"], "--tp: expected >= 1, got 0"),
    ("repeats zero", None, ["--repeats", "0"], "--repeats: expected >= 1, got 0"),
]


@pytest.mark.parametrize("what, edit, extra, needle", BAD_INPUT, ids=[c[0] for c in BAD_INPUT])
def test_bad_input_is_exit_2_before_anything_is_launched_or_written(tmp_path: Path, capsys, what, edit, extra,
                                                                    needle) -> None:
    cfg = write_config(tmp_path, model_dirs=True, repeats=1, concurrency="[1]",
                       api="completions" if "tokenizer" in what else None)
    if edit:
        _edit(cfg, *edit)
    out = tmp_path / "out"
    rc = bench("--config", str(cfg), "--out", str(out), "--no-plots", *extra)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert needle in one_line(err)
    assert not out.exists()


def test_the_models_are_not_checked_where_the_server_is_not_ours(tmp_path: Path, capsys) -> None:
    # attached servers may run on another machine; runs files are rebuilt without any model: no path check
    cfg = write_config(tmp_path, repeats=1, concurrency="[1]")  # /fake/target, /fake/draft
    rc = bench("--config", str(cfg), "--attach", f"http://127.0.0.1:{dead_port()}", f"http://127.0.0.1:{dead_port()}")
    assert rc == 2 and "no healthy server there" in capsys.readouterr().err  # the URL, not the model, at fault
    runs = tmp_path / "none_runs.jsonl"
    runs.write_text("")
    assert bench("--config", str(cfg), "--out", str(tmp_path / "o"), "--no-plots", "--from-runs", str(runs)) == 1


def test_out_that_is_a_file_is_refused_before_launching(tmp_path: Path, capsys) -> None:
    cfg = write_config(tmp_path, model_dirs=True, repeats=1, concurrency="[1]")
    (tmp_path / "out").write_text("not a directory\n")
    assert bench("--config", str(cfg), "--out", str(tmp_path / "out"), "--no-plots") == 2
    assert f"--out {tmp_path / 'out'}: not a directory" in one_line(capsys.readouterr().err)
    assert (tmp_path / "out").read_text() == "not a directory\n"


def test_the_listener_check_applies_where_the_launcher_is_the_server():
    # a Python launcher's server is a process of our session; `docker run`'s port is held by the runtime
    from sglang_blackwell.bench.eagle3.preflight import runs_the_server

    assert runs_the_server([sys.executable, "-m", "sglang.launch_server"])
    assert runs_the_server(["python3.12", "-m", "sglang.launch_server"])
    assert not runs_the_server(["docker", "run", "--gpus", "all", "img", "python3", "-m", "sglang.launch_server"])
    assert not runs_the_server(["/usr/bin/env", "python3"])
