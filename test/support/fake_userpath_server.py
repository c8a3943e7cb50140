"""A fake SGLang 0.5.14 server for CPU tests of the user-path GPU tests (test/gpu/userpath) and their runner:
started as `python -m sglang.launch_server` (through `sglang-blackwell serve`, a stand-in `sglang/launch_server.py`
runs this file) with the tests' real flags, in its own session. It serves a generated lab target (the tiny
preset) the way the real server does on the lab: the target's own tokenizer (transformers) and chat template,
greedy output = the bigram chain of gen_lab_pair.bigram_map(preset, seed), OpenAI-compatible JSON and SSE.

  GET  /health, /server_info (server args + internal_states[0].grammar_backend, avg_spec_accept_length),
       /v1/models (max_model_len)
  POST /set_internal_state (the spec counters reset, as bench eagle3 and the accept-length test ask),
       /v1/completions, /v1/chat/completions (stream, stream_options.include_usage, logprobs, response_format
       json_schema: a fixed answer that matches the tests' schema), /v1/responses (string input)
Bad input (negative max_tokens or temperature, a prompt of >= max_model_len tokens) is a 400, as in SGLang.
FAKE_USERPATH_BREAK (comma list) injects defects the tests must catch: `grammar` (the scheduler fell back to
grammar_backend "none"), `traceback` (a traceback in the log), `greedy` (completions off by one token),
`stream` (streamed text loses its last chunk), `usage` (prompt_tokens one short).
"""

import argparse
import importlib.util
import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ap = argparse.ArgumentParser()
ap.add_argument("--model-path", required=True)
ap.add_argument("--port", type=int, required=True)
ap.add_argument("--host", default="127.0.0.1")
ap.add_argument("--speculative-algorithm")
ap.add_argument("--speculative-num-draft-tokens", type=int)
ap.add_argument("--speculative-draft-model-path")
ap.add_argument("--attention-backend")
args, rest = ap.parse_known_args()
BREAK = set(filter(None, os.environ.get("FAKE_USERPATH_BREAK", "").split(",")))
CONTEXT = 4096
ANSWER = '{"ok":true,"color":"red","size":"S"}'

REPO = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("gen_lab_pair", REPO / "benchmark" / "models" / "gen_lab_pair.py")
gen = importlib.util.module_from_spec(spec)
sys.modules["gen_lab_pair"] = gen
spec.loader.exec_module(gen)
from transformers import AutoTokenizer  # noqa: E402

target = Path(args.model_path)
meta = json.loads((target / gen.PAIR_FILE).read_text())
BMAP = gen.bigram_map(meta["preset"], meta["seed"])
TOK = AutoTokenizer.from_pretrained(str(target))
SPEC = args.speculative_algorithm
print(f"fake sglang: serving {target} ({meta['preset']}, seed {meta['seed']}), flags {sys.argv[1:]}", flush=True)
if "traceback" in BREAK:
    print("Traceback (most recent call last):\n  File \"scheduler.py\", line 1\nRuntimeError: injected", flush=True)


class BadRequest(Exception):
    pass


def chain(ids, n):
    out, t = [], ids[-1]
    for _ in range(n):
        t = BMAP[t]
        out.append(t)
    if "greedy" in BREAK:
        out = out[1:] + [BMAP[out[-1]]]
    return out


def check(body, ids):
    if (body.get("max_tokens") or 0) < 0:
        raise BadRequest("max_new_tokens must be at least 0")
    if (body.get("temperature") or 0) < 0:
        raise BadRequest("temperature must be non-negative")
    if len(ids) >= CONTEXT:
        raise BadRequest(f"The input ({len(ids)} tokens) is longer than the model's context length ({CONTEXT} tokens).")


def usage(ids, out):
    p = len(ids) - (1 if "usage" in BREAK else 0)
    return {"prompt_tokens": p, "completion_tokens": len(out), "total_tokens": p + len(out)}


def top(tok_id, k):
    rest = [t for t in (105, 106, 107, 108) if t != tok_id][: k - 1]
    return [(TOK.decode([tok_id]), -1e-5)] + [(TOK.decode([t]), -20.0 - i) for i, t in enumerate(rest)]


def server_info():
    state = {"grammar_backend": "none" if "grammar" in BREAK else "xgrammar"}
    if SPEC:
        state["avg_spec_accept_length"] = 3.0
    return {"version": "0.5.14", "tp_size": 1, "grammar_backend": "xgrammar", "disable_radix_cache": False,
            "skip_tokenizer_init": False, "speculative_algorithm": SPEC,
            "speculative_num_draft_tokens": args.speculative_num_draft_tokens, "attention_backend":
            args.attention_backend, "internal_states": [state]}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def _json(self, code, obj):
        raw = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def _sse(self, chunks):
        if "stream" in BREAK:
            chunks = chunks[:-2] + chunks[-1:]
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        for c in chunks:
            self.wfile.write(f"data: {json.dumps(c)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True

    def do_GET(self):
        if self.path == "/health":
            self._json(200, {})
        elif self.path in ("/server_info", "/get_server_info"):
            self._json(200, server_info())
        elif self.path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": str(target), "object": "model", "created": 0,
                                                          "owned_by": "sglang", "max_model_len": CONTEXT}]})
        else:
            self._json(404, {"detail": "Not Found"})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        try:
            if self.path == "/v1/completions":
                self.completions(body)
            elif self.path == "/v1/chat/completions":
                self.chat(body)
            elif self.path == "/v1/responses":
                self.response_api(body)
            elif self.path == "/set_internal_state":  # resets the spec counters (the accept length stays the
                self._json(200, [True])               # construction's 3.0: every round accepts both drafts)
            else:
                self._json(404, {"detail": "Not Found"})
        except BadRequest as e:
            self._json(400, {"object": "error", "message": str(e), "type": "BadRequestError", "code": 400})

    def completions(self, body):
        ids = TOK.encode(body["prompt"])
        check(body, ids)
        out = chain(ids, body.get("max_tokens") or 16)
        lp = None
        if body.get("logprobs"):
            k = body["logprobs"]
            lp = {"tokens": [TOK.decode([t]) for t in out], "token_logprobs": [-1e-5] * len(out),
                  "top_logprobs": [dict(top(t, k)) for t in out], "text_offset": [0] * len(out)}
        base = {"id": "cmpl-1", "object": "text_completion", "created": int(time.time()), "model": str(target)}
        if body.get("stream"):
            chunks = [{**base, "choices": [{"index": 0, "text": TOK.decode([t]), "logprobs": None,
                                            "finish_reason": None}]} for t in out]
            chunks[-1]["choices"][0]["finish_reason"] = "length"
            if (body.get("stream_options") or {}).get("include_usage"):
                chunks.append({**base, "choices": [], "usage": usage(ids, out)})
            return self._sse(chunks)
        self._json(200, {**base, "usage": usage(ids, out), "choices": [
            {"index": 0, "text": TOK.decode(out), "logprobs": lp, "finish_reason": "length"}]})

    def chat(self, body):
        ids = TOK.apply_chat_template(body["messages"], add_generation_prompt=True, tokenize=True, return_dict=False)
        check(body, ids)
        fmt = body.get("response_format") or {}
        if fmt.get("type") == "json_schema":
            out, finish = TOK.encode(ANSWER), "stop"
        else:
            out, finish = chain(ids, body.get("max_tokens") or 16), "length"
        lp = None
        if body.get("logprobs"):
            k = body.get("top_logprobs") or 1
            lp = {"content": [{"token": TOK.decode([t]), "logprob": -1e-5, "bytes": list(TOK.decode([t]).encode()),
                               "top_logprobs": [{"token": s, "logprob": v, "bytes": list(s.encode())}
                                                for s, v in top(t, k)]} for t in out]}
        base = {"id": "chatcmpl-1", "object": "chat.completion", "created": int(time.time()), "model": str(target)}
        if body.get("stream"):
            chunks = [{**base, "object": "chat.completion.chunk", "choices": [
                {"index": 0, "delta": {"role": "assistant", "content": TOK.decode([t])} if i == 0
                 else {"content": TOK.decode([t])}, "finish_reason": None}]} for i, t in enumerate(out)]
            chunks[-1]["choices"][0]["finish_reason"] = finish
            if (body.get("stream_options") or {}).get("include_usage"):
                chunks.append({**base, "object": "chat.completion.chunk", "choices": [], "usage": usage(ids, out)})
            return self._sse(chunks)
        self._json(200, {**base, "usage": usage(ids, out), "choices": [
            {"index": 0, "message": {"role": "assistant", "content": TOK.decode(out)}, "logprobs": lp,
             "finish_reason": finish}]})

    def response_api(self, body):
        ids = TOK.apply_chat_template([{"role": "user", "content": body["input"]}], add_generation_prompt=True,
                                      tokenize=True, return_dict=False)
        out = chain(ids, (body.get("max_output_tokens") or 16) - 2)  # sglang 0.5.14 keeps 2 tokens of headroom
        self._json(200, {"id": "resp-1", "object": "response", "created_at": int(time.time()), "model": str(target),
                         "status": "completed", "parallel_tool_calls": False, "tool_choice": "auto", "tools": [],
                         "usage": {"prompt_tokens": len(ids), "completion_tokens": len(out),  # sglang's form
                                   "total_tokens": len(ids) + len(out)},
                         "output": [{"type": "message", "id": "msg-1", "role": "assistant", "status": "completed",
                                     "content": [{"type": "output_text", "text": TOK.decode(out),
                                                  "annotations": []}]}]})


print(f"fake sglang: listening on {args.host}:{args.port}", flush=True)
ThreadingHTTPServer((args.host, args.port), Handler).serve_forever()
