"""The hostile suite's judging (test/gpu/hostile: hostile_verdict, hostile_cases, and test/gpu's server_http and
server_checks, which it shares with the soak) on a CPU machine, against a real HTTP server run in-process
(http.server on a thread) that answers as told: a 400 with a message, a 400 without one, a 500, a hang, a dropped
connection, a 200; a KV pool that stays used; a reference text that changes; and a real server session (a process
titled `sglang::scheduler` in a session of its own) whose scheduler dies. Every verdict path is taken: clean, wrong,
leak, server-died; and every case of the suite runs against the server once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from .suite_fixtures import ADMIN_ROUTES

GPU_TESTS = Path(__file__).resolve().parents[2] / "gpu"
sys.path[:0] = [str(GPU_TESTS / "hostile"), str(GPU_TESTS)]  # the suite, and the modules it shares (server_*.py)
import hostile_cases  # noqa: E402
import hostile_verdict  # noqa: E402
import server_checks  # noqa: E402
import server_http  # noqa: E402

REFERENCE = "The capital of France is"
KEY = "k3y"


class State:
    def __init__(self) -> None:
        self.mode = "400"  # how every other request is answered
        self.health = 200
        self.kv_used = 0
        self.running = 0
        self.reference = " Paris"
        self.bodies: list[int] = []  # the sizes of the bodies received
        self.hung_up = 0  # streams whose client went away mid-answer


class Listener(ThreadingHTTPServer):
    request_queue_size = 1024  # 256 clients at once (uvicorn's backlog is 2048)
    daemon_threads = True


class Handler(BaseHTTPRequestHandler):
    state: State
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, status: int, doc: Any = None, raw: bytes | None = None) -> None:
        body = raw if raw is not None else (json.dumps(doc).encode() if doc is not None else b"")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _answer(self, body: bytes) -> None:
        s = self.state
        path = self.path.split("?")[0]
        if path == "/health":
            return self._send(s.health)
        if path == "/v1/loads":
            return self._send(200, {"loads": [{"num_used_tokens": s.kv_used, "num_running_reqs": s.running,
                                               "num_waiting_reqs": 0}]})
        try:
            doc = json.loads(body) if body else {}
        except (ValueError, RecursionError):
            doc = {}
        if path == "/v1/completions" and isinstance(doc, dict) and doc.get("prompt") == REFERENCE:
            return self._send(200, {"choices": [{"text": s.reference}]})
        if s.mode == "400":
            return self._send(400, {"error": {"message": "Token id 40007 at position 2 of the prompt is out of "
                                                         "vocabulary"}})
        if s.mode == "400-empty":
            return self._send(400)
        if s.mode == "500":
            return self._send(500, raw=b"Internal Server Error")
        if s.mode == "403":
            return self._send(403, {"error": "Forbidden: this server listens beyond loopback"})
        if s.mode == "hang":
            time.sleep(3)
            return self._send(200, {})
        if s.mode == "stream":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                for i in range(200):
                    event = f"data: {json.dumps({'choices': [{'text': f'tok{i}'}]})}\n\n".encode()
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                    self.wfile.flush()
                    time.sleep(0.02)
            except OSError:
                s.hung_up += 1
            return None
        if s.mode == "drop":
            self.close_connection = True
            self.connection.shutdown(2)
            return None
        return self._send(200, {"choices": [{"text": "anything"}], "usage": {"completion_tokens": 1}})

    def do_GET(self) -> None:
        self._answer(b"")

    def do_POST(self) -> None:
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n)
        self.state.bodies.append(n)
        self._answer(body)


@pytest.fixture
def server() -> Iterator[tuple[str, State]]:
    state = State()
    handler = type("H", (Handler,), {"state": state})
    httpd = Listener(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", state
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def session() -> Iterator[subprocess.Popen]:
    """A server session as sglang's looks to the suite: a leader and, in its session, a process titled
    sglang::scheduler."""
    p = subprocess.Popen(["bash", "-c", "(exec -a sglang::scheduler sleep 300) & exec sleep 300"],
                         start_new_session=True)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        ident = server_checks.scheduler_identity(p.pid)
        if ident and ident[0] != p.pid:
            break
        time.sleep(0.05)
    try:
        yield p
    finally:
        os.killpg(p.pid, signal.SIGKILL)  # the session we started (its leader's pid is its group's id)
        p.wait(timeout=10)


def target(url: str, pid: int, tmp_path: Path) -> server_checks.Target:
    return server_checks.Target(url=url, key=KEY, model="m", pid=pid, vocab_size=32000, context_len=2048,
                                 out=tmp_path)


def reply(url: str, timeout: float = 2.0) -> server_http.Reply:
    return server_http.post_json(url, "/generate", {"input_ids": [1, 2, 40007]}, key=KEY, timeout=timeout)


def test_each_answer_is_judged_by_what_came_back(server):
    url, st = server
    st.mode = "400"
    f = hostile_verdict.judge_reply(reply(url))
    assert f.ok and f.status == 400 and "out of vocabulary" in f.message
    st.mode = "400-empty"
    f = hostile_verdict.judge_reply(reply(url))
    assert not f.ok and "without a message" in f.what
    st.mode = "500"
    f = hostile_verdict.judge_reply(reply(url))
    assert not f.ok and f.what == "500: Internal Server Error"
    st.mode = "hang"
    r = reply(url, timeout=0.5)
    f = hostile_verdict.judge_reply(r)
    assert r.status is None and r.error == "timeout after 0 s" and not f.ok and f.what.startswith("no answer")
    st.mode = "drop"
    r = reply(url)
    assert r.status is None and r.error.startswith("connection dropped")
    assert not hostile_verdict.judge_reply(r).ok
    st.mode = "200"
    assert not hostile_verdict.judge_reply(reply(url)).ok  # a 4xx was due
    assert hostile_verdict.judge_reply(reply(url), accept=lambda d: None).ok
    f = hostile_verdict.judge_reply(reply(url), accept=lambda d: "choices 0 differ")
    assert not f.ok and f.what == "200: choices 0 differ"
    st.mode = "403"
    assert hostile_verdict.admin_finding(reply(url)).ok
    st.mode = "200"
    assert "ACCEPTED" in hostile_verdict.admin_finding(reply(url)).what


def test_a_client_cut_hangs_up_mid_stream_and_before_the_answer(server):
    url, st = server
    st.mode = "stream"
    r = server_http.open_and_cut(url, "/v1/completions", {"stream": True}, key=KEY, read_bytes=120,
                                  cut_after_s=5.0)
    assert r.status == 200 and len(r.body) >= 120 and b"data: " in r.body and r.error is None
    deadline = time.monotonic() + 5
    while st.hung_up < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert st.hung_up == 1  # the server saw the hang-up while it still had events to send
    st.mode = "hang"
    t0 = time.monotonic()
    r = server_http.open_and_cut(url, "/generate", {}, key=KEY, read_bytes=0, cut_after_s=0.2)
    assert r.status is None and time.monotonic() - t0 < 2.0  # cut before any answer came


def test_a_refused_connection_is_no_answer():
    r = server_http.get("http://127.0.0.1:9", "/health", timeout=2.0)
    assert r.status is None and r.error == "connection refused"


def _after(url: str, pid: int, tmp_path: Path, base: server_checks.Baseline) -> server_checks.After:
    return server_checks.check_after(target(url, pid, tmp_path), base, REFERENCE, 32, kv_wait_s=1.0)


def test_case_verdicts_clean_wrong_leak_and_server_died(server, session, tmp_path):
    url, st = server
    t = target(url, session.pid, tmp_path)
    base = server_checks.Baseline.take(t, REFERENCE, 32)
    assert base.reference == " Paris" and base.kv_used == 0 and base.scheduler[0] != session.pid
    ok = [hostile_verdict.Finding(True, "400: out of vocabulary", 400, "out of vocabulary")]
    bad = [hostile_verdict.Finding(False, "500: Internal Server Error", 500, "Internal Server Error")]

    assert hostile_verdict.case_verdict(ok, _after(url, session.pid, tmp_path, base))[0] == "clean"
    assert hostile_verdict.case_verdict(bad, _after(url, session.pid, tmp_path, base)) == (
        "wrong", "500: Internal Server Error")

    st.reference = " Lyon"  # the same process, another answer: the weights or the state changed
    verdict, why = hostile_verdict.case_verdict(ok, _after(url, session.pid, tmp_path, base))
    assert verdict == "wrong" and "reference request's text changed: ' Lyon'" in why
    st.reference = " Paris"

    st.kv_used, st.running = 512, 1  # a request the server never let go
    t0 = time.monotonic()
    verdict, why = hostile_verdict.case_verdict(ok, _after(url, session.pid, tmp_path, base))
    assert verdict == "leak" and "512 tokens used (idle 0), 1 requests" in why and time.monotonic() - t0 >= 1.0
    st.kv_used, st.running = 0, 0

    st.health = 503
    verdict, why = hostile_verdict.case_verdict(ok, _after(url, session.pid, tmp_path, base))
    assert verdict == "server-died" and why == "/health: 503"
    st.health = 200

    subprocess.run(["kill", "-KILL", str(base.scheduler[0])], check=True)  # the scheduler dies, the leader lives
    time.sleep(0.3)
    after = _after(url, session.pid, tmp_path, base)
    assert hostile_verdict.case_verdict(ok, after) == (
        "server-died", "the scheduler process is gone or another one runs")


def test_a_server_whose_process_is_gone_died(tmp_path):
    p = subprocess.Popen(["true"])
    p.wait()
    base = server_checks.Baseline(scheduler=(p.pid, None), reference=" Paris", kv_used=0)
    after = _after("http://127.0.0.1:9", p.pid, tmp_path, base)
    assert hostile_verdict.case_verdict([], after) == ("server-died", "the server process is gone; /health: not "
                                                                     "asked: the server process is gone")


def test_every_case_runs_against_a_server_that_refuses_everything(server, tmp_path):
    """Each case's own code runs (a CPU smoke of all 23): against a server that answers every request with a 400
    and a message, the refusals are as due, and the cases that allow a correct answer accept a refusal too."""
    url, st = server
    t = target(url, 1, tmp_path)
    for name, case in hostile_cases.REGISTRY.items():
        result = case(t)
        assert result.findings, name
        bad = [f.what for f in result.findings if not f.ok]
        if name == "admin_endpoints_unkeyed":  # every 400 is no 401/403, and the CPU venv may have no sglang
            assert bad, name
            continue
        assert not bad, (name, bad)
    assert max(st.bodies) > 64 << 20  # the 64 MiB body went out whole


def test_every_case_answered_by_a_500_is_wrong(server, tmp_path):
    url, st = server
    st.mode = "500"
    t = target(url, 1, tmp_path)
    for name in ("oov_ids_generate", "prompt_equals_context", "overload_c256", "json_100k_deep"):
        result = hostile_cases.REGISTRY[name](t)
        assert any(not f.ok and f.status == 500 for f in result.findings), name


ADMIN_SOURCE = '''
@app.get("/health")
async def health(): ...
''' + ADMIN_ROUTES + '''
if os.environ.get("DUMPER_SERVER_PORT") == "reuse":
    @app.api_route("/dumper/{method}", methods=["POST"])
    @auth_level(AuthLevel.ADMIN_OPTIONAL)
    async def dumper(method): ...

@app.get("/list_external_corpora")
@auth_level(AuthLevel.ADMIN_FORCE)
async def corpora(): ...
'''


def test_admin_routes_are_read_from_the_server_module():
    assert sorted(hostile_cases.admin_routes(ADMIN_SOURCE)) == [
        ("GET", "/list_external_corpora"), ("POST", "/dumper/{method}"), ("POST", "/flush_cache"),
        ("POST", "/update_weights_from_disk")]


def test_admin_case_counts_what_was_accepted(server, tmp_path, monkeypatch):
    url, st = server
    monkeypatch.setattr(hostile_cases, "installed_admin_routes",
                        lambda: (hostile_cases.admin_routes(ADMIN_SOURCE), "sample"))
    t = target(url, 1, tmp_path)
    st.mode = "403"
    result = hostile_cases.admin_endpoints_unkeyed(t)
    assert all(f.ok for f in result.findings) and len(result.findings) == 8
    assert result.measured["admin_accepted"] == 0
    st.mode = "200"
    result = hostile_cases.admin_endpoints_unkeyed(t)
    assert result.measured["admin_accepted"] == 8 and not any(f.ok for f in result.findings)
    assert "POST /update_weights_from_disk (no key): 200: ACCEPTED" in result.findings[2].what
