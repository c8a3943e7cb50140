"""A fake SGLang 0.5.14 server for the CPU test of the hostile-request GPU suite (test/gpu/hostile) and its runner
(benchmark/lab/hostile.sh): started as `python -m sglang.launch_server` (through `sglang-blackwell serve`, a
stand-in `sglang/launch_server.py` runs this file) with the suite's real flags, in its own session, with a child
process titled `sglang::scheduler` as sglang's has. It behaves like a server that refuses everything hostile:
/health needs no key, every other endpoint the --api-key (401 without), the admin endpoints are closed (403, P12's
message); the reference request (a string prompt) gets a fixed greedy text; every other request is a 400 with a
message; /v1/loads reports an idle KV pool.

FAKE_HOSTILE_BREAK (comma list) injects what the suite must catch: `die_on_oov` (a /generate prompt id past the
vocabulary ends the server, its scheduler first: the CUDA assert of issue 31), `leak` (after a request with n >= 64
the pool keeps 64 tokens and one request for ever), `admin_open` (the admin endpoints answer 200), `deep_500` (a
body too deep to parse is a 500).

For the soak (test/gpu/soak, benchmark/lab/soak.sh): with FAKE_STREAM_ITL_S set, a streamed /v1/completions of a
token-id prompt is answered as sglang streams one (an event per token, FAKE_STREAM_ITL_S apart, max_tokens of them,
then `data: [DONE]`), and a non-streamed one of token ids with a greedy text of its own (the soak's reference
requests). Its defects, in FAKE_HOSTILE_BREAK too: `stream_500` (every 7th streamed request a 500),
`reference_drift` (after 5 streamed requests the token-id reference texts change), `leak_on_abort` (a streamed request
its client hung up on leaves 64 tokens in the pool).
"""

import argparse
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ap = argparse.ArgumentParser()
ap.add_argument("--model-path", required=True)
ap.add_argument("--port", type=int, required=True)
ap.add_argument("--host", default="127.0.0.1")
ap.add_argument("--api-key")
ap.add_argument("--context-length", type=int, default=4096)
args, rest = ap.parse_known_args()
BREAK = set(filter(None, os.environ.get("FAKE_HOSTILE_BREAK", "").split(",")))
VOCAB = json.loads((Path(args.model_path) / "config.json").read_text())["vocab_size"]
ADMIN = {"/flush_cache", "/update_weights_from_disk", "/start_profile", "/pause_generation", "/slow_down",
         "/configure_logging", "/set_internal_state", "/abort_request", "/release_memory_occupation"}
REFERENCE_TEXT = " Paris, and the capital of Italy is Rome."
STATE = {"leaked": False, "streams": 0, "abort_leaked": 0}
ITL_S = float(os.environ["FAKE_STREAM_ITL_S"]) if os.environ.get("FAKE_STREAM_ITL_S") else None
LOCK = threading.Lock()
SCHEDULER = subprocess.Popen(["bash", "-c", "exec -a sglang::scheduler sleep 100000"])
print(f"fake sglang: {args.model_path} on {args.host}:{args.port}, vocab {VOCAB}, flags {sys.argv[1:]}", flush=True)


def die() -> None:
    print("vectorized gather kernel index out of bounds (fake)", flush=True)
    SCHEDULER.kill()
    os._exit(1)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def send(self, status, doc=None, raw=None):
        body = raw if raw is not None else json.dumps(doc if doc is not None else {}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        with contextlib.suppress(OSError):  # the client hung up: as uvicorn, carry on
            self.wfile.write(body)

    def bad(self, msg):
        self.send(400, {"object": "error", "message": msg, "type": "BadRequest", "code": 400})

    def route(self, body):
        path = self.path.split("?")[0]
        if path == "/health":
            return self.send(200, raw=b"")
        if path in ADMIN:
            if "admin_open" in BREAK:
                return self.send(200, {"success": True})
            return self.send(403, {"error": "Forbidden: this server listens beyond loopback and has no "
                                            "--admin-api-key, so its admin endpoints are closed"})
        if self.headers.get("Authorization") != f"Bearer {args.api_key}":
            return self.send(401, {"error": "Unauthorized"})
        if path == "/v1/models":
            return self.send(200, {"data": [{"id": args.model_path, "max_model_len": args.context_length}]})
        if path == "/server_info":
            return self.send(200, {"version": "0.5.14", "tp_size": 1, "host": args.host,
                                   "context_length": args.context_length})
        if path == "/v1/loads":
            used, running = (64, 1) if STATE["leaked"] else (0, 0)
            used += 64 * STATE["abort_leaked"]
            return self.send(200, {"loads": [{"num_used_tokens": used, "num_running_reqs": running,
                                              "num_waiting_reqs": 0}]})
        try:
            doc = json.loads(body.decode("utf-8"))
        except UnicodeDecodeError:
            return self.bad("the body is not valid UTF-8")
        except RecursionError:
            if "deep_500" in BREAK:
                return self.send(500, raw=b"Internal Server Error")
            return self.bad("the body nests too deep")
        except ValueError as e:
            return self.bad(f"invalid JSON: {e}")
        if not isinstance(doc, dict):
            return self.bad("the body is not a JSON object")
        if path == "/v1/completions" and isinstance(doc.get("prompt"), str) and doc["prompt"].strip() \
                and len(doc["prompt"]) < 100 and not doc.get("n"):
            return self.send(200, {"choices": [{"text": REFERENCE_TEXT, "finish_reason": "length"}],
                                   "usage": {"completion_tokens": doc.get("max_tokens", 1)}})
        if ITL_S is not None and path == "/v1/completions" and isinstance(doc.get("prompt"), list):
            return self.soak_completion(doc)
        ids = doc.get("input_ids")
        flat = [x for row in ids for x in (row if isinstance(row, list) else [row])] if isinstance(ids, list) else []
        if path == "/generate" and "die_on_oov" in BREAK and any(isinstance(x, int) and x >= VOCAB for x in flat):
            die()
        if (doc.get("n") or 1) >= 64 and "leak" in BREAK:
            STATE["leaked"] = True
        return self.bad(f"refused by the fake: {path} {sorted(doc)[:6]}")

    def soak_completion(self, doc):
        """A token-id prompt, as the soak sends them: streamed, or (its reference requests) not."""
        n = int(doc.get("max_tokens") or 16)
        drift = "reference_drift" in BREAK and STATE["streams"] >= 5
        if not doc.get("stream"):
            text = f" ref{len(doc['prompt'])}" + (" drifted" if drift else "")
            return self.send(200, {"choices": [{"text": text, "finish_reason": "length"}],
                                   "usage": {"completion_tokens": n}})
        with LOCK:
            STATE["streams"] += 1
            k = STATE["streams"]
        if "stream_500" in BREAK and k % 7 == 0:
            return self.send(500, raw=b"Internal Server Error")
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        try:
            for i in range(n):
                event = {"object": "text_completion", "choices": [{"index": 0, "text": f" t{i}",
                                                                   "finish_reason": None}]}
                self.wfile.write(b"data: " + json.dumps(event).encode() + b"\n\n")
                self.wfile.flush()
                time.sleep(ITL_S)
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except OSError:  # the client hung up: an abort
            if "leak_on_abort" in BREAK:
                with LOCK:
                    STATE["abort_leaked"] += 1

    def do_GET(self):
        self.route(b"")

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = b""
        while len(body) < n:
            chunk = self.rfile.read(min(n - len(body), 1 << 20))
            if not chunk:
                return
            body += chunk
        self.route(body)

    do_PUT = do_POST


class Listener(ThreadingHTTPServer):
    request_queue_size = 2048  # uvicorn's backlog
    daemon_threads = True
    allow_reuse_address = True


Listener((args.host, args.port), Handler).serve_forever()
