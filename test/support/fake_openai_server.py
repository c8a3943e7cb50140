"""A fake OpenAI-compatible server for CPU tests of `bench eagle3` (a real HTTP server in its own process, like
`vllm serve`): it has ONLY the OpenAI endpoints, so it is what `--attach` meets on a vLLM box, no SGLang extras.

  GET  /health               200 (FAKE_NO_HEALTH=1: 404, a server without it)
  GET  /v1/models            {"object": "list", "data": [{"id": <--model>, ...}]}
  POST /v1/completions       prompt (text or token ids), max_tokens, ignore_eos, stream, stream_options
  POST /v1/chat/completions  messages; streamed with a role-only first chunk, as vLLM and SGLang do
  GET  /metrics, /version    only with FAKE_METRICS=vllm: vLLM's Prometheus spec-decode counters (their
                             `_total` names, per-engine labels; registered only on speculative servers) and
                             {"version": FAKE_VERSION}
  anything else              404 {"detail": "Not Found"} (no /server_info, /generate, /flush_cache, /start_profile)

Stream shape (Transfer-Encoding: chunked, one SSE event per chunk, `data: [DONE]` last): the first token after
FAKE_TTFT_MS; then one chunk per FAKE_STEP_MS holding 1 token, or, with FAKE_CHUNKS="2,3,1" (a speculative
server: the tokens one verify step accepted arrive together), that many tokens in turn. Chat with
FAKE_REASONING=k: the first k tokens arrive as delta.reasoning_content (a reasoning parser), the rest as content.
Length: max_tokens tokens with ignore_eos; without it the "model" meets EOS after FAKE_EOS_AT (5) tokens;
FAKE_SHORT=k makes k tokens fewer even with ignore_eos (a server that stops early). usage (prompt, completion,
total tokens) comes in a final chunk with choices [] only when stream_options.include_usage is true, like vLLM
(FAKE_NO_USAGE=1: never, a server that ignores stream_options). FAKE_CUT_AFTER=k: the connection drops after k
chunks, mid-stream (a server that died).
A model name other than the served one: 404 with an error object, like vLLM.
FAKE_REQUEST_LOG: every request body is appended there as a JSON line.

`OpenAIRoutes` is also the OpenAI half of fake_sglang_server.py (SGLang serves these endpoints too).
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def _words(body: dict[str, Any]) -> int:
    if "messages" in body:
        return sum(len(str(m.get("content", "")).split()) for m in body["messages"])
    p = body.get("prompt")
    return len(p) if isinstance(p, list) else len(str(p or "").split())


class OpenAIRoutes(BaseHTTPRequestHandler):
    """The OpenAI endpoints over `produce` (the subclass' model: yields each chunk's token strings, sleeping
    before each as the server's speed says)."""

    protocol_version = "HTTP/1.1"
    model = "fake-model"
    eos_at = 5
    short = 0
    reasoning = 0
    no_usage = False
    cut_after = 0
    request_log: str | None = None
    log_lock = threading.Lock()

    def log_message(self, fmt: str, *a: Any) -> None:
        pass

    def produce(self, n: int, seed: int) -> Iterator[list[str]]:
        raise NotImplementedError

    def _send(self, code: int, obj: Any, ctype: str = "application/json") -> None:
        body = (json.dumps(obj) if ctype == "application/json" else obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _body(self) -> dict[str, Any]:
        n = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(n)) if n else {}

    def openai_get(self) -> bool:
        if self.path == "/v1/models":
            self._send(200, {"object": "list", "data": [{"id": self.model, "object": "model",
                                                         "created": 0, "owned_by": "fake"}]})
            return True
        return False

    def openai_post(self, body: dict[str, Any]) -> bool:
        if self.path not in ("/v1/completions", "/v1/chat/completions"):
            return False
        if self.request_log:
            with self.log_lock, open(self.request_log, "a") as f:
                f.write(json.dumps({"path": self.path, "body": body}) + "\n")
        if body.get("model") != self.model:
            self._send(404, {"error": {"message": f"The model `{body.get('model')}` does not exist.",
                                       "type": "NotFoundError", "code": 404}})
            return True
        chat = self.path.endswith("chat/completions")
        if (chat and not body.get("messages")) or (not chat and body.get("prompt") in (None, "", [])):
            self._send(400, {"error": {"message": "messages/prompt required", "code": 400}})
            return True
        asked = int(body.get("max_tokens") or 16)
        n = max((asked if body.get("ignore_eos") else min(asked, self.eos_at)) - self.short, 1)
        self.complete(body, chat, n)
        return True

    def complete(self, body: dict[str, Any], chat: bool, n: int) -> None:
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:12]}"
        base = {"id": rid, "object": "chat.completion.chunk" if chat else "text_completion",
                "created": int(time.time()), "model": self.model}
        usage = {"prompt_tokens": _words(body), "completion_tokens": n, "total_tokens": _words(body) + n}
        seed = _words(body)
        if not body.get("stream"):
            text = "".join(t for toks in self.produce(n, seed) for t in toks)
            choice = ({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
                      if chat else {"index": 0, "text": text, "logprobs": None, "finish_reason": "length"})
            return self._send(200, {**base, "object": "chat.completion" if chat else "text_completion",
                                    "choices": [choice], "usage": usage})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        made, first = 0, True
        for i, toks in enumerate(self.produce(n, seed)):
            if self.cut_after and i == self.cut_after:  # no terminating chunk: the stream is cut off
                self.wfile.flush()
                self.close_connection = True
                return
            if chat and first:  # vLLM and SGLang: a role-only first chunk, then the content
                self._event({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                                  "logprobs": None, "finish_reason": None}]})
            first = False
            made += len(toks)
            done = "length" if made >= n else None
            if chat:
                k = max(0, min(len(toks), self.reasoning - (made - len(toks))))
                delta = {}
                if k:
                    delta["reasoning_content"] = "".join(toks[:k])
                if toks[k:]:
                    delta["content"] = "".join(toks[k:])
                choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": done}
            else:
                choice = {"index": 0, "text": "".join(toks), "logprobs": None, "finish_reason": done}
            self._event({**base, "choices": [choice]})
        if (body.get("stream_options") or {}).get("include_usage") and not self.no_usage:
            self._event({**base, "choices": [], "usage": usage})
        self._chunk(b"data: [DONE]\n\n")
        self._chunk(b"")  # the connection stays open for the next request (keep-alive), as uvicorn's does

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _event(self, obj: dict[str, Any]) -> None:
        self._chunk(b"data: " + json.dumps(obj).encode() + b"\n\n")


class FakeOpenAI(OpenAIRoutes):
    ttft_s = 0.005
    step_s = 0.002
    chunks: list[int] = [1]
    no_health = False
    vllm_metrics = False
    version = "0.18.0-fake"
    lock = threading.Lock()
    counters = {"drafts": 0, "draft_tokens": 0, "accepted": 0}

    @classmethod
    def speculative(cls) -> bool:
        return cls.chunks != [1]

    def produce(self, n: int, seed: int) -> Iterator[list[str]]:
        time.sleep(self.ttft_s)
        made = 1
        yield [f" t{seed % 97}"]
        r = 0
        while made < n:
            time.sleep(self.step_s)
            k = min(self.chunks[r % len(self.chunks)], n - made)
            if self.speculative():
                with self.lock:
                    self.counters["drafts"] += 1
                    self.counters["draft_tokens"] += max(self.chunks)
                    self.counters["accepted"] += k - 1
            yield [f" t{(seed + made + j) % 97}" for j in range(k)]
            made += k
            r += 1

    def do_GET(self) -> None:
        if self.path == "/health" and not self.no_health:
            return self._send(200, {})
        if self.openai_get():
            return None
        if self.vllm_metrics and self.path == "/version":
            return self._send(200, {"version": self.version})
        if self.vllm_metrics and self.path == "/metrics":
            return self._send(200, self.metrics_text(), "text/plain; version=0.0.4")
        return self._send(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        body = self._body()
        if not self.openai_post(body):
            self._send(404, {"detail": "Not Found"})

    def metrics_text(self) -> str:
        labels = f'engine="0",model_name="{self.model}"'
        lines = ["# HELP vllm:num_requests_running Number of requests in model execution batches.",
                 "# TYPE vllm:num_requests_running gauge", f"vllm:num_requests_running{{{labels}}} 0.0"]
        if self.speculative():
            with self.lock:
                c = dict(self.counters)
            for name, key in (("drafts", "drafts"), ("draft_tokens", "draft_tokens"),
                              ("accepted_tokens", "accepted")):
                lines += [f"# TYPE vllm:spec_decode_num_{name} counter",
                          f"vllm:spec_decode_num_{name}_total{{{labels}}} {float(c[key])}",
                          f"vllm:spec_decode_num_{name}_created{{{labels}}} 1.7e9"]
        return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--model", default="fake-model")
    a = ap.parse_args()
    env = os.environ.get
    FakeOpenAI.model = a.model
    FakeOpenAI.ttft_s = float(env("FAKE_TTFT_MS", "5")) / 1e3
    FakeOpenAI.step_s = float(env("FAKE_STEP_MS", "2")) / 1e3
    FakeOpenAI.chunks = [int(x) for x in env("FAKE_CHUNKS", "1").split(",")]
    FakeOpenAI.eos_at = int(env("FAKE_EOS_AT", "5"))
    FakeOpenAI.short = int(env("FAKE_SHORT", "0"))
    FakeOpenAI.reasoning = int(env("FAKE_REASONING", "0"))
    FakeOpenAI.no_health = env("FAKE_NO_HEALTH") == "1"
    FakeOpenAI.no_usage = env("FAKE_NO_USAGE") == "1"
    FakeOpenAI.cut_after = int(env("FAKE_CUT_AFTER", "0"))
    FakeOpenAI.vllm_metrics = env("FAKE_METRICS") == "vllm"
    FakeOpenAI.request_log = env("FAKE_REQUEST_LOG")
    print(f"fake openai server pid {os.getpid()} model={a.model} chunks={FakeOpenAI.chunks}", flush=True)
    ThreadingHTTPServer.daemon_threads = True
    ThreadingHTTPServer((a.host, a.port), FakeOpenAI).serve_forever()


if __name__ == "__main__":
    main()
