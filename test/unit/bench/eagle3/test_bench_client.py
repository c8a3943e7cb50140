"""The bench eagle3 client: loopback never through a proxy, the OpenAI streaming client against a real
OpenAI-only server process (test/support/fake_openai_server.py), and the latency metrics on hand-computed
timings."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from bench_fakes import PROXY_VARS, dead_port, openai_servers, requests_of

from sglang_blackwell import httpclient
from sglang_blackwell.bench.eagle3 import client, transport
from sglang_blackwell.bench.eagle3.client import Endpoint, LevelRun, RequestError, RequestResult
from sglang_blackwell.bench.eagle3.config_workload import Prompt


@pytest.mark.parametrize("url, loop", [
    ("http://127.0.0.1:30000", True), ("http://127.8.9.10/x", True), ("http://localhost:1", True),
    ("http://LOCALHOST:1", True), ("http://api.localhost:8000", True), ("http://[::1]:8000/v1", True),
    ("http://[::ffff:127.0.0.1]:80", True), ("http://10.0.0.1:8000", False), ("http://example.com", False),
    ("http://128.0.0.1", False), ("http://[2001:db8::1]:80", False), ("http://localhost.example.com", False),
])
def test_is_loopback(url: str, loop: bool) -> None:
    assert transport.is_loopback(url) is loop


class _Recorder(BaseHTTPRequestHandler):
    """Answers every GET with {"via": <who>} and records the request line's target."""

    seen: list[str]
    who: str

    def log_message(self, *a: object) -> None:
        pass

    def do_GET(self) -> None:
        self.seen.append(self.path)
        body = json.dumps({"via": self.who}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def http_servers() -> Iterator[dict[str, tuple[str, list[str]]]]:
    out, running = {}, []
    for who in ("proxy", "target"):
        handler = type(f"R_{who}", (_Recorder,), {"seen": [], "who": who})
        srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        running.append(srv)
        out[who] = (f"http://127.0.0.1:{srv.server_address[1]}", handler.seen)
    yield out
    for srv in running:
        srv.shutdown()
        srv.server_close()


def test_loopback_bypasses_every_proxy_variable_others_keep_it(http_servers, monkeypatch) -> None:
    for k in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(k, raising=False)
    proxy, proxy_seen = http_servers["proxy"]
    target, target_seen = http_servers["target"]
    port = target.rsplit(":", 1)[1]
    for k in PROXY_VARS:
        monkeypatch.setenv(k, f"http://127.0.0.1:{dead_port()}")  # dead: a proxied request fails
    assert transport.http_json(target + "/a") == {"via": "target"}
    assert transport.http_json(f"http://localhost:{port}/b") == {"via": "target"}
    assert transport.status(target + "/c") == 200
    for k in PROXY_VARS:
        monkeypatch.setenv(k, proxy)  # a live proxy that records what reaches it
    assert transport.http_json(target + "/d") == {"via": "target"}
    assert target_seen == ["/a", "/b", "/c", "/d"] and proxy_seen == []
    # another host goes through the proxy as the environment says (urllib sends the absolute URL to it) ...
    assert transport.http_json("http://bench.example.invalid/e") == {"via": "proxy"}
    assert proxy_seen == ["http://bench.example.invalid/e"]
    # ... and the loopback rule is what keeps 127.0.0.1 away from it: without the rule urllib proxies it too
    monkeypatch.setattr(httpclient, "is_loopback", lambda url: False)  # the rule's home (transport's client)
    assert transport.http_json(target + "/f") == {"via": "proxy"}
    assert proxy_seen[-1] == f"{target}/f"


# ---- the streaming client against a real OpenAI-only server --------------------------------------------------

SPEC_ENV = {"FAKE_TTFT_MS": "5", "FAKE_STEP_MS": "2", "FAKE_CHUNKS": "1,3,2"}
# 16 tokens: the first alone, then 1,3,2,1,3,2,1 and the last capped at 2: 9 chunks, 8 gaps
CHUNKS_16 = 9


@pytest.fixture(scope="module")
def servers(tmp_path_factory) -> Iterator[tuple[Path, dict[str, str]]]:
    tmp = tmp_path_factory.mktemp("openai")
    specs = {"spec": SPEC_ENV, "reason": {**SPEC_ENV, "FAKE_REASONING": "4"}, "short": {"FAKE_SHORT": "3"},
             "nousage": {"FAKE_NO_USAGE": "1"}, "nohealth": {"FAKE_NO_HEALTH": "1"}, "cut": {"FAKE_CUT_AFTER": "3"}}
    with openai_servers(tmp, specs, model="org/served-name") as urls:
        yield tmp, urls


def test_model_id_and_health_from_the_openai_endpoints(servers) -> None:
    from sglang_blackwell.bench.eagle3.server import openai_health

    _, urls = servers
    assert client.model_id(urls["spec"]) == "org/served-name"
    assert openai_health(urls["spec"]) == (True, "/health: 200")
    assert openai_health(urls["nohealth"]) == (True, "/health: 404, /v1/models: 200")
    up, seen = openai_health(f"http://127.0.0.1:{dead_port()}")
    assert not up and "Connection refused" in seen


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_streamed_request_counts_tokens_from_usage_and_times_every_chunk(servers, api: str) -> None:
    tmp, urls = servers
    name = "reason" if api == "chat" else "spec"
    ep = Endpoint(url=urls[name], api=api, model="org/served-name")
    r = client.send(ep, Prompt(text="a b c"), 16)
    assert r.output_tokens == 16 and r.verify_ct is None
    # chat: the role-only first chunk carries no output and is not counted; reasoning_content chunks are
    assert r.chunk_s is not None and len(r.chunk_s) == CHUNKS_16
    assert r.chunk_s == sorted(r.chunk_s) and r.ttft_s == r.chunk_s[0]
    assert r.ttft_s >= 0.005  # the first token comes after FAKE_TTFT_MS
    assert r.e2e_s >= 0.005 + 8 * 0.002  # and 8 chunks after it, FAKE_STEP_MS apart
    body = requests_of(tmp, name)[-1]["body"]
    assert body == {**body, "model": "org/served-name", "max_tokens": 16, "temperature": 0.0, "ignore_eos": True,
                    "stream": True, "stream_options": {"include_usage": True}}
    assert (body["messages"] == [{"role": "user", "content": "a b c"}]) if api == "chat" else body["prompt"] == "a b c"


def test_token_id_prompts_over_completions(servers) -> None:
    tmp, urls = servers
    ep = Endpoint(url=urls["spec"], api="completions", model="org/served-name")
    assert client.send(ep, Prompt(input_ids=(101, 102, 103)), 4).output_tokens == 4
    assert requests_of(tmp, "spec")[-1]["body"]["prompt"] == [101, 102, 103]


def test_fewer_tokens_than_asked_fails_the_level(servers) -> None:
    _, urls = servers
    ep = Endpoint(url=urls["short"], api="completions", model="org/served-name")
    with pytest.raises(RequestError, match=r"asked for 12 tokens with ignore_eos, but 2 of 2 request\(s\) at "
                                           r"concurrency 1 produced 9 \(usage\.completion_tokens"):
        client.run_level(ep, [Prompt(text="x")], concurrency=1, rounds=2, output_len=12)


def test_errors_are_named(servers) -> None:
    _, urls = servers
    with pytest.raises(RequestError, match="reported no usage.completion_tokens"):
        client.send(Endpoint(url=urls["nousage"], api="chat", model="org/served-name"), Prompt(text="x"), 4)
    with pytest.raises(RequestError, match=r"/v1/completions: HTTP 404: .*model `nope` does not exist"):
        client.send(Endpoint(url=urls["spec"], api="completions", model="nope"), Prompt(text="x"), 4)
    with pytest.raises(RequestError, match=r"POST .*/generate: HTTP 404"):  # an OpenAI-only server
        client.generate(urls["spec"], Prompt(text="x"), 4, stream=False)
    with pytest.raises(RequestError, match="Connection refused"):
        client.model_id(f"http://127.0.0.1:{dead_port()}")
    # a stream cut off mid-way fails its level, and no client thread dies silently
    cut = Endpoint(url=urls["cut"], api="completions", model="org/served-name")
    with pytest.raises(RequestError, match=r"2 request\(s\) failed at concurrency 2; first: POST .*/v1/completions: "
                                           r"(StreamCut: the stream ended before data: \[DONE\]|IncompleteRead)"):
        client.run_level(cut, [Prompt(text="x")], concurrency=2, rounds=1, output_len=8)


# ---- the metrics of a level, on timings computed by hand ---------------------------------------------------

def test_level_metrics_by_hand() -> None:
    r1 = RequestResult(e2e_s=0.100, ttft_s=0.010, output_tokens=10, verify_ct=None,
                       chunk_s=[0.010, 0.030, 0.060, 0.100])
    r2 = RequestResult(e2e_s=0.200, ttft_s=0.020, output_tokens=10, verify_ct=None, chunk_s=[0.020, 0.050, 0.200])
    m = client.level_metrics(LevelRun(concurrency=2, wall_s=0.25, results=[r1, r2]), None)

    def ms(v: float) -> object:  # the inputs are exact to ~1e-17 s; 1e-9 ms is far above the float error
        return pytest.approx(v, abs=1e-9)

    assert m["tok_s"] == ms(20 / 0.25) and m["ttft_source"] == "stream"
    assert m["ttft_ms"] == ms(15.0) and m["ttft_ms_p99"] == ms(19.9)        # [10, 20]: h = 0.99 for p99
    assert m["tpot_ms"] == ms(15.0) and m["tpot_ms_p99"] == ms(19.9)        # (100-10)/9 = 10, (200-20)/9 = 20
    # gaps pooled over both requests: [20, 30, 40] + [30, 150] ms; p99: h = 3.96 -> 40 + 0.96 x 110
    assert m["itl_ms"] == ms(30.0) and m["itl_ms_p99"] == ms(145.6) and m["itl_samples"] == 5
    assert m["e2e_ms"] == ms(150.0) and m["e2e_ms_p99"] == ms(199.0)
    assert m["tokens_per_chunk"] == pytest.approx(20 / 7, abs=1e-4)  # rounded to 4 places
    assert m["accept_len"] is None and m["accept_len_source"] is None

    # non-streamed /generate: TTFT from the idle probe, TPOT against it, no ITL; accept from meta_info
    n1 = RequestResult(e2e_s=0.100, ttft_s=None, output_tokens=11, verify_ct=4)
    n2 = RequestResult(e2e_s=0.300, ttft_s=None, output_tokens=11, verify_ct=6)
    g = client.level_metrics(LevelRun(concurrency=1, wall_s=0.4, results=[n1, n2]), 0.020)
    assert g["ttft_source"] == "idle streamed probe" and g["ttft_ms"] == ms(20.0) and g["ttft_ms_p99"] is None
    assert g["tpot_ms"] == ms(((100 - 20) / 10 + (300 - 20) / 10) / 2) and g["itl_ms"] is None
    assert g["accept_len"] == ms(22 / 10) and g["accept_len_source"] == "meta_info" and g["verify_ct"] == 10


def test_the_real_openai_client_reads_the_fake_servers_streams_as_ours_does(servers) -> None:
    """The fake speaks the protocol the official `openai` package parses, chunk for chunk as our client counts."""
    openai = pytest.importorskip("openai")
    _, urls = servers
    oc = openai.OpenAI(base_url=urls["reason"] + "/v1", api_key="none", max_retries=0)
    extra = {"ignore_eos": True}
    chat = list(oc.chat.completions.create(model="org/served-name", messages=[{"role": "user", "content": "a b"}],
                                           max_tokens=16, temperature=0, stream=True,
                                           stream_options={"include_usage": True}, extra_body=extra))
    assert chat[0].choices[0].delta.role == "assistant" and not chat[0].choices[0].delta.content
    carrying = [c for c in chat if c.choices and (c.choices[0].delta.content
                                                  or getattr(c.choices[0].delta, "reasoning_content", None))]
    assert len(carrying) == CHUNKS_16 and chat[-1].choices == [] and chat[-1].usage.completion_tokens == 16
    comp = list(oc.completions.create(model="org/served-name", prompt="a b", max_tokens=16, temperature=0,
                                      stream=True, stream_options={"include_usage": True}, extra_body=extra))
    assert sum(1 for c in comp if c.choices and c.choices[0].text) == CHUNKS_16
    assert comp[-1].usage.completion_tokens == 16
    ours = client.send(Endpoint(url=urls["reason"], api="chat", model="org/served-name"), Prompt(text="a b"), 16)
    assert len(ours.chunk_s or []) == len(carrying) and ours.output_tokens == chat[-1].usage.completion_tokens
