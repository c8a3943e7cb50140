"""The transport's rules, piece by piece (the hostile suite, test/unit/hostile/test_bench_hostile_net.py, runs them
through the real CLI): loopback from the parsed address, no redirect followed, the first-byte / idle / total / run
deadlines and the size caps; the optional sources' junk; the runs file's whole records and its own names."""

from __future__ import annotations

import errno
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest

from sglang_blackwell.bench.eagle3 import client, runs_file, sglang_api, transport, vllm_api
from sglang_blackwell.bench.eagle3.client import Endpoint, RequestError
from sglang_blackwell.bench.eagle3.config_workload import Prompt
from sglang_blackwell.errors import UserError


@pytest.mark.parametrize("url, loop", [
    ("http://127.1:8000", True), ("http://2130706433:1", True), ("http://0x7f.0.0.1/", True),
    ("http://0177.0.0.1", True), ("http://localhost.:30000", True), ("http://API.localhost.:1", True),
    ("http://0.0.0.0:1", True), ("http://[::]:1", True), ("http://128.1", False), ("http://10.1:1", False),
    ("http://1localhost:1", False), ("http://localhost.example.com.", False), ("http://3221225985", False),
])
def test_loopback_is_read_from_the_parsed_address(url: str, loop: bool) -> None:
    assert transport.is_loopback(url) is loop


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    seen: list[str] = []

    def log_message(self, *a: object) -> None:
        pass

    def do_GET(self) -> None:
        self.seen.append(self.path)
        if self.path.startswith("/redirect"):
            self.send_response(302)
            self.send_header("Location", "http://192.0.2.1:9/elsewhere")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.path == "/ok":
            body = b'{"a": 1}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_response(200)
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        try:
            if self.path.startswith("/dribble"):  # one byte a 0.1 s: the socket timeout never fires
                for _ in range(400):
                    self.wfile.write(b":")
                    self.wfile.flush()
                    time.sleep(0.1)
            elif self.path == "/huge":
                for _ in range(2000):
                    self.wfile.write(b"x" * 65536)
        except OSError:
            pass

    do_POST = do_GET


@pytest.fixture
def base() -> Iterator[str]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_a_redirect_is_never_followed(base: str) -> None:
    Handler.seen = []
    st = transport.status(base + "/redirect")
    assert isinstance(st, str) and "302" in st and "http://192.0.2.1:9/elsewhere" in st and "not followed" in st
    with pytest.raises(transport.Redirected) as e:
        transport.http_json(base + "/redirect", {"x": 1})
    assert e.value.code == 302 and Handler.seen == ["/redirect", "/redirect"]
    with pytest.raises(RequestError, match="not followed"):
        client.send(Endpoint(url=base + "/redirect", api="generate", stream=False), Prompt(input_ids=(1,)), 4)


def test_bytes_that_are_no_data_meet_the_first_byte_and_idle_deadlines(base: str) -> None:
    t = time.monotonic()
    with transport.request(base + "/dribble", first_byte_s=5, total_s=60, idle_s=60) as r, \
            pytest.raises(transport.Timeout, match=r"no data within 0.5 s \(first-byte deadline"):
        list(transport.sse_events(r, 0.5))
    assert time.monotonic() - t < 3


def test_the_total_and_the_run_deadline_cut_a_body_that_never_ends(base: str) -> None:
    with transport.request(base + "/dribble", first_byte_s=5, total_s=0.6, idle_s=5) as r, \
            pytest.raises(transport.Timeout, match="total deadline"):
        r.body()
    transport.set_run_deadline(0.5)
    try:
        t = time.monotonic()
        with pytest.raises(RequestError, match=r"--deadline-s 0.5 reached mid-request"):
            client.send(Endpoint(url=base + "/dribble", api="generate", stream=True), Prompt(input_ids=(1,)), 4)
        assert time.monotonic() - t < 3
        with pytest.raises(transport.RunDeadline):  # past it, nothing starts
            transport.http_json(base + "/ok")
    finally:
        transport.set_run_deadline(None)
    assert transport.http_json(base + "/ok") == {"a": 1}


def test_a_body_larger_than_the_cap_is_refused(base: str) -> None:
    with pytest.raises(transport.TooLarge, match="larger than 64 MiB"):
        transport.http_json(base + "/huge", timeout=30)


def test_headers_a_byte_at_a_time_meet_the_first_byte_deadline() -> None:
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen()

    def serve() -> None:
        conn, _ = lst.accept()
        with conn:
            try:
                for ch in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 200:
                    conn.sendall(bytes([ch]))
                    time.sleep(0.05)
            except OSError:
                pass

    threading.Thread(target=serve, daemon=True).start()
    t = time.monotonic()
    with pytest.raises(transport.Timeout, match="first-byte deadline"):
        transport.request(f"http://127.0.0.1:{lst.getsockname()[1]}/", first_byte_s=0.5)
    assert time.monotonic() - t < 3
    lst.close()


def test_metrics_junk_is_counted_and_skipped() -> None:
    m = vllm_api.parse_metrics("{x} 1\nvllm:spec_decode_num_drafts_total{a=\"1\"} 4\n"
                               "vllm:spec_decode_num_accepted_tokens_total 6 1700000000\n"
                               "vllm:spec_decode_num_drafts_total NaN\n 42\n")
    assert (m.vllm, m.drafts, m.accepted, m.junk, m.first_junk) == (True, 4.0, 6.0, 3, "{x} 1")
    assert "http://h/metrics: 3 malformed line(s) ignored" in vllm_api.junk_warning("http://h", m)


@pytest.mark.parametrize("d, why", [
    ("x", "is str"), ({"a": [1.0]}, "key 'a'"), ({"1": "y"}, "step_time_dict[1]"), ({"1": [None]}, "[1]"),
])
def test_malformed_step_times_are_no_step_times(d, why) -> None:
    info = {"internal_states": [{"step_time_dict": d}]}
    assert sglang_api.step_times(info) is None and why in sglang_api.step_times_problem(info)
    assert sglang_api.step_times({"internal_states": ["x"]}) is None
    assert sglang_api.step_times({"internal_states": [{"step_time_dict": {"2": [0.5]}}]}) == {2: [0.5]}


@pytest.mark.parametrize("final, field", [
    ({"meta_info": {"completion_tokens": "x"}}, "meta_info.completion_tokens"),
    ({"meta_info": {"completion_tokens": float("inf")}}, "meta_info.completion_tokens"),
    ({"meta_info": 3}, "meta_info"), ([1], "the answer is list, expected a JSON object"),
])
def test_a_malformed_generate_answer_names_the_field(final, field) -> None:
    with pytest.raises(RequestError, match="POST u/generate: " + field.replace(".", r"\.")):
        client._generate_result(final, 1.0, None, None, where="POST u/generate")


def test_claim_stem_gives_each_run_its_own_names(tmp_path: Path) -> None:
    base = tmp_path / "bench-eagle3_x_20260101T000000Z"
    a = runs_file.claim_stem(base, runs_file=True)
    b = runs_file.claim_stem(base, runs_file=True)
    assert (a.name, b.name) == (base.name, base.name + "-2")
    assert (tmp_path / (base.name + "-2_runs.jsonl")).is_file()
    (tmp_path / (base.name + "-3.json")).write_text("{}")  # a --from-runs receipt of this second
    assert runs_file.claim_stem(base, runs_file=True).name == base.name + "-4"
    assert runs_file.claim_stem(base, runs_file=False).name == base.name + "-5"


def test_an_append_that_fails_part_way_leaves_the_whole_records(tmp_path: Path, monkeypatch) -> None:
    cfg = SimpleNamespace(name="x", sha256="0" * 64)
    path = tmp_path / "r_runs.jsonl"
    runs_file.append_run(path, cfg, {"arm": "baseline", "repeat": 1})
    whole = path.read_bytes()
    real = os.write
    calls = []

    def full(fd: int, data) -> int:
        calls.append(len(data))
        if len(calls) == 1:
            return real(fd, bytes(data[:10]))  # part of it lands ...
        raise OSError(errno.ENOSPC, "No space left on device")  # ... then the disk is full

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(UserError, match=r"r_runs.jsonl: cannot append .* \(No space left on device\).*--from-runs"):
        runs_file.append_run(path, cfg, {"arm": "eagle3", "repeat": 1})
    assert path.read_bytes() == whole and json.loads(whole)["run"]["arm"] == "baseline"
