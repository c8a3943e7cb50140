"""Server teardown with real processes: the fake SGLang server (test/support/fake_sglang_server.py) is started
exactly like sglang.launch_server, in its own session. Whatever it does (ignore SIGTERM, spawn children, move
them to another process group), the whole session must be gone afterwards, and that is verified."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from bench_fakes import FAKE_SERVER, alive, wait_for_file, write_config

from sglang_blackwell.bench.eagle3.server import (
    PIDFILE_ENV,
    Server,
    ServerError,
    TeardownError,
    free_port,
    launched_server,
)
from sglang_blackwell.procs import session_members


def fake_cmd(port: int, *extra: str) -> list[str]:
    return [sys.executable, str(FAKE_SERVER), "--model-path", "/fake", "--port", str(port), *extra]


def start(tmp_path: Path, env_extra: dict[str, str], **kw):
    port = free_port()
    server = Server(url=f"http://127.0.0.1:{port}", log_path=tmp_path / "server.log")
    env = {**os.environ, "FAKE_STARTUP_S": "0.1", "FAKE_PID_FILE": str(tmp_path / "pids.json"), **env_extra}
    return server, launched_server(server, fake_cmd(port), env, startup_timeout_s=kw.get("timeout", 20),
                                   grace_s=kw.get("grace", 1.0), gpu_release_s=kw.get("gpu_release_s", 30.0))


def test_clean_server_is_gone_after_sigterm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sid_file = tmp_path / "bench.sid"
    monkeypatch.setenv(PIDFILE_ENV, str(sid_file))
    server, ctx = start(tmp_path, {})
    with ctx:
        pids = wait_for_file(tmp_path / "pids.json")
        assert urllib.request.urlopen(server.url + "/health").status == 200
        assert session_members(server.pid) == [pids["server"]]
        assert sid_file.read_text() == f"{server.pid}\n"  # while it lives, its session id is on record
    assert not sid_file.exists()
    assert not alive(pids["server"])
    assert server.teardown["group_gone"] and server.teardown["sigterm"] and not server.teardown["sigkill"]
    gpu = server.teardown["gpu"]
    assert gpu == {"checked": False, "why": "no nvidia-smi"} or gpu["ours_left"] == []
    assert "$ " in (tmp_path / "server.log").read_text().splitlines()[0]  # the command heads its log


@pytest.mark.parametrize("new_pgrp", [False, True])
def test_server_ignoring_sigterm_with_a_child_is_killed(tmp_path: Path, new_pgrp: bool) -> None:
    env = {"FAKE_IGNORE_SIGTERM": "1", "FAKE_SPAWN_CHILD": "1",
           "FAKE_CHILD_NEW_PGRP": "1" if new_pgrp else "0"}
    server, ctx = start(tmp_path, env, grace=0.5)
    with ctx:
        pids = wait_for_file(tmp_path / "pids.json")
        deadline = time.monotonic() + 10
        while len(session_members(server.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert set(session_members(server.pid)) == {pids["server"], pids["child"]}
        if new_pgrp:  # the child left the process group: only its session still ties it to the server
            assert os.getpgid(pids["child"]) != server.pid
    assert server.teardown["sigkill"], server.teardown
    assert not alive(pids["server"]) and not alive(pids["child"])
    assert server.teardown["left"] == [] and session_members(server.pid) == []


def test_teardown_runs_on_exception_and_ctrl_c(tmp_path: Path) -> None:
    for exc in (RuntimeError("boom"), KeyboardInterrupt()):
        server, ctx = start(tmp_path, {"FAKE_IGNORE_SIGTERM": "1"}, grace=0.3)
        (tmp_path / "pids.json").unlink(missing_ok=True)
        with pytest.raises(type(exc)), ctx:
            pid = wait_for_file(tmp_path / "pids.json")["server"]
            raise exc
        assert not alive(pid) and server.teardown["sigkill"]


def test_server_that_dies_at_startup(tmp_path: Path) -> None:
    server = Server(url=f"http://127.0.0.1:{free_port()}", log_path=tmp_path / "dies.log")
    cmd = [sys.executable, "-c", "import sys; print('bad flag --nope'); sys.exit(3)"]
    expect = r"server exited with code 3 .*before it was healthy(.|\n)*bad flag --nope"
    with pytest.raises(ServerError, match=expect), \
            launched_server(server, cmd, dict(os.environ), startup_timeout_s=20, grace_s=1):
        pass
    assert server.teardown["group_gone"]


def test_server_never_healthy_times_out_and_is_killed(tmp_path: Path) -> None:
    server, ctx = start(tmp_path, {"FAKE_STARTUP_S": "60"}, timeout=1.0)
    with pytest.raises(ServerError, match=r"not healthy after 1 s \(last /health: 503\)"), ctx:
        pass
    pid = json.loads((tmp_path / "pids.json").read_text())["server"]
    assert not alive(pid) and server.teardown["group_gone"]


def test_gpu_process_left_behind_is_an_error(tmp_path: Path) -> None:
    """Simulated GPU (no GPU here): a stand-in nvidia-smi keeps listing the server's pid as a compute process,
    as a driver would if the process' GPU context outlived it. The teardown must refuse to call that clean."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    apps = tmp_path / "apps.csv"
    smi = bindir / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\ncase \"$1\" in --query-compute-apps*) cat {apps};; "
                   "--query-gpu=memory.used*) echo 1234;; *) exit 1;; esac\n")
    smi.chmod(0o755)
    old_path = os.environ["PATH"]
    os.environ["PATH"] = f"{bindir}{os.pathsep}{old_path}"
    try:
        server, ctx = start(tmp_path, {}, gpu_release_s=1.0)
        expect = r"GPU compute processes \[\d+\] still listed by nvidia-smi"
        with pytest.raises(TeardownError, match=expect), ctx:
            pid = wait_for_file(tmp_path / "pids.json")["server"]
            apps.write_text(f"{pid}, 70000\n")
        assert not alive(pid)
        # and once the driver lets go, the same teardown is clean
        apps.write_text("")
        server, ctx = start(tmp_path, {}, gpu_release_s=1.0)
        with ctx:
            pass
        assert server.teardown["gpu"]["checked"] and server.teardown["gpu"]["ours_left"] == []
        assert server.teardown["gpu"]["memory_used_mib"] == [1234]
    finally:
        os.environ["PATH"] = old_path


SIGINT_HARNESS = Path(__file__).resolve().parents[3] / "support" / "sigint_harness.py"


def stubborn_harness(tmp_path: Path, *entry: str) -> tuple[list[str], Path]:
    """A `bench eagle3` command line (run by `entry`, default `python -m sglang_blackwell.cli`) whose first
    server ignores SIGTERM, has a child and stays unhealthy for 60 s; and the file that server writes its pids to."""
    pid_file = tmp_path / "p.json"
    stubborn = {"FAKE_STARTUP_S": "60", "FAKE_IGNORE_SIGTERM": "1", "FAKE_SPAWN_CHILD": "1",
                "FAKE_PID_FILE": str(pid_file)}
    cfg = write_config(tmp_path, baseline_env=stubborn, model_dirs=True)
    # a grace of 0.5 s, not write_config's 2 s: this server ignores SIGTERM whatever the grace, so all of it is
    # waited out before the SIGKILL these tests expect ("needed SIGKILL"); it is only the teardown's wait
    text = cfg.read_text()
    assert text.count("teardown_grace_s = 2\n") == 1, text
    cfg.write_text(text.replace("teardown_grace_s = 2\n", "teardown_grace_s = 0.5\n"))
    entry = entry or ("-m", "sglang_blackwell.cli")
    return [sys.executable, *entry, "bench", "eagle3", "--config", str(cfg), "--out", str(tmp_path / "out"),
            "--no-plots"], pid_file


# The harness keeps an inherited SIG_IGN of SIGINT (procs.signals_as_interrupt), as a program started with `&` or
# nohup should; a test run started so (`nohup make test &`: a non-interactive shell ignores SIGINT in background
# jobs) would hand that on and the harness would rightly ignore the test's Ctrl-C. These tests are about the Ctrl-C
# of a user at a terminal, so the harness starts with SIGINT at its default: this interpreter sets it and execs
# the command (same pid; exec keeps SIG_DFL).
FROM_A_TERMINAL = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
                   "os.execv(sys.argv[1], sys.argv[1:])")


def from_a_terminal(cmd: list[str]) -> list[str]:
    return [sys.executable, "-c", FROM_A_TERMINAL, *cmd]


def run_to_the_end(cmd: list[str], env: dict[str, str] | None = None) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(from_a_terminal(cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env)
    try:
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc, out


def assert_interrupted_receipt(tmp_path: Path) -> None:
    receipt = json.loads(next((tmp_path / "out").glob("*.json")).read_text())
    assert receipt["complete"] is False and receipt["summary"]["passed"] is False


def test_ctrl_c_to_the_harness_kills_the_server(tmp_path: Path) -> None:
    """A real `sglang-blackwell bench eagle3` process gets SIGINT while its server (which ignores SIGTERM and
    has a child) is still starting: the harness exits 130 and leaves no process of the server behind."""
    cmd, pid_file = stubborn_harness(tmp_path)
    proc = subprocess.Popen(from_a_terminal(cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        pids = wait_for_file(pid_file)
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out
    assert not alive(pids["server"]) and not alive(pids["child"]), out
    assert "interrupted" in out and "needed SIGKILL" in out
    assert_interrupted_receipt(tmp_path)


@pytest.mark.parametrize("hook", ["finalizer", "replaced"])
def test_a_ctrl_c_python_drops_or_replaces_still_stops_the_harness(tmp_path: Path, hook: str) -> None:
    """The SIGINT of the test above, landing where Python loses its KeyboardInterrupt while the harness polls
    /health (support/sigint_harness.py): in a finalizer, which drops it ("Exception ignored"), or in
    threading.Condition.wait, which replaces it with a RuntimeError. Either way the harness stops: exit 130, the
    server taken down, no next arm (it used to poll on for 20 s, fail the arm and start the next)."""
    cmd, pid_file = stubborn_harness(tmp_path, str(SIGINT_HARNESS))
    env = {**os.environ, "SIGINT_HOOK": hook, "SIGINT_HOOK_AFTER": str(pid_file)}
    proc, out = run_to_the_end(cmd, env)
    pids = json.loads(pid_file.read_text())
    assert proc.returncode == 130, out
    assert ("Exception ignored" in out) == (hook == "finalizer"), out  # the hook lost it as it says
    assert not alive(pids["server"]) and not alive(pids["child"]), out
    assert "interrupted" in out and "needed SIGKILL" in out and "[2/4]" not in out, out
    assert_interrupted_receipt(tmp_path)


def test_a_ctrl_c_as_the_server_starts_leaves_no_server(tmp_path: Path) -> None:
    """SIGINT right after the server's process started, before procs.start told the watcher of it: the harness
    exits 130 and the server is gone (it used to live on, ours to no one: no teardown, no watcher)."""
    cmd, _ = stubborn_harness(tmp_path, str(SIGINT_HARNESS))
    started = tmp_path / "started.pid"
    proc, out = run_to_the_end(cmd, {**os.environ, "SIGINT_HOOK": "start", "SIGINT_HOOK_PID": str(started)})
    pid = int(started.read_text())
    try:
        assert proc.returncode == 130, out
        assert "interrupted" in out and not alive(pid), out
        assert_interrupted_receipt(tmp_path)
    finally:  # without the fix nothing else would end it
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)


def test_free_port_leaves_room_for_sglangs_derived_ports():
    # the lab's first GPU-suite run (2026-11-30) drew 60719 from the ephemeral range: sglang 0.5.14 refused to
    # start ("SGLANG_GRPC_PORT (70719) must be between 1 and 65535")
    import random
    import socket

    from sglang_blackwell.bench.eagle3.server import PORT_COMPANION_OFFSET, PORT_RANGE, free_port

    rng = random.Random(0)
    for _ in range(50):
        p = free_port(rng=rng)
        assert PORT_RANGE[0] <= p < PORT_RANGE[1] and p + PORT_COMPANION_OFFSET <= 65535
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))  # it really is free
