"""P9 (a speculative server warms up every batch-size bucket before it reports ready): its probe's scenarios
against a patched sglang tree, on CPU.

- `sizes`: the batch sizes sglang.srt.entrypoints.warmup.batch_size_warmup_sizes picks, per server shape and
  switch, and which next_power_of_2 buckets a later batch of 1..max_running_requests requests (and its
  requests x draft tokens) can fall into that the warm-up never formed;
- `applies`: where first_use_warmup_applies lets the server run the first-use warm-up at all;
- `requests_sent`: what warmup_first_use sends to a real HTTP server on loopback (one recording thread): a
  1024-token prefill (MLA's JIT-compiled KV store takes prefills of >= 768 tokens), the cached repeat, the
  batch sizes;
- `wiring`: where the server's own warm-up (`_execute_server_warmup` in entrypoints/http_server.py) calls it,
  read from that function's syntax tree (the module itself needs uvicorn, FastAPI and the serving stack,
  which the CPU test environment does not install).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

WARMUP = "sglang.srt.entrypoints.warmup"
HTTP_SERVER = "sglang.srt.entrypoints.http_server"
SHAPES = [  # (speculative, max_running_requests, dp_size, disaggregation_mode, SGLANG_ENABLE_BATCH_SIZE_WARMUP)
    (True, 48, 1, "null", "1"),  # the speculative default (sglang sets 48)
    (True, 16, 1, "null", "1"),
    (True, 256, 1, "null", "1"),
    (True, 48, 1, "null", "0"),  # switched off
    (False, 48, 1, "null", "1"),  # not speculative
    (True, 48, 2, "null", "1"),  # data-parallel attention
    (True, 48, 1, "prefill", "1"),  # disaggregated
]
DRAFT_TOKENS = (3, 4)


def _pow2(n: int) -> int:
    return 1 << (n - 1).bit_length()


def uncovered_buckets(sizes: list[int], top: int) -> list[str]:
    """The next_power_of_2 buckets of batch sizes 1..top (and of batch x draft tokens) that neither the
    server's one general warm-up request (batch 1) nor the warm-up sizes formed."""
    formed = [1, *sizes]
    out = []
    for draft in DRAFT_TOKENS:
        warm = {_pow2(w) for w in formed} | {_pow2(w * draft) for w in formed}
        for s in range(1, top + 1):
            for what, v in (("batch", s), (f"batch x {draft} drafts", s * draft)):
                if _pow2(v) not in warm:
                    out.append(f"{what} {v} (bucket {_pow2(v)})")
    return sorted(set(out))


def sizes() -> dict:
    mod = importlib.import_module(WARMUP)
    fn = getattr(mod, "batch_size_warmup_sizes", None)
    if fn is None:
        return {"missing": True, "rows": []}
    rows = []
    for spec, top, dp, disagg, env in SHAPES:
        os.environ["SGLANG_ENABLE_BATCH_SIZE_WARMUP"] = env
        got = fn(spec, top, dp, disagg)
        rows.append({"shape": [spec, top, dp, disagg, env], "sizes": got,
                     "uncovered": uncovered_buckets(got, top) if got else None})
    os.environ.pop("SGLANG_ENABLE_BATCH_SIZE_WARMUP", None)
    return {"missing": False, "rows": rows}


class _Recorder(BaseHTTPRequestHandler):
    seen: list = []

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append({"path": self.path, "body": body})
        data = json.dumps([{"text": "x", "meta_info": {}}] * len(body.get("text") or body.get("input_ids") or [1]))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data.encode())

    def log_message(self, *args):
        pass


def applies() -> dict:
    mod = importlib.import_module(WARMUP)
    fn = getattr(mod, "first_use_warmup_applies", None)
    if fn is None:
        return {"missing": True, "rows": []}
    rows = []
    for dp, disagg, env in ((1, "null", "1"), (1, "null", "0"), (2, "null", "1"), (1, "prefill", "1")):
        os.environ["SGLANG_ENABLE_BATCH_SIZE_WARMUP"] = env
        rows.append({"shape": [dp, disagg, env], "applies": bool(fn(dp, disagg))})
    os.environ.pop("SGLANG_ENABLE_BATCH_SIZE_WARMUP", None)
    return {"missing": False, "rows": rows}


def requests_sent() -> dict:
    mod = importlib.import_module(WARMUP)
    fn = getattr(mod, "warmup_first_use", None)
    if fn is None:
        return {"missing": True}
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}"
    out = {"missing": False}
    try:
        for label, json_data, sizes in (
                ("text", {"text": "The capital city of France is",
                          "sampling_params": {"temperature": 0, "max_new_tokens": 8}}, [2, 4, 8]),
                ("input_ids", {"input_ids": [10, 11, 12],
                               "sampling_params": {"temperature": 0, "max_new_tokens": 8}}, [2, 4, 8]),
                ("not_speculative", {"text": "t"}, [])):
            _Recorder.seen = []
            fn(url, json_data, {}, True, sizes)
            out[label] = list(_Recorder.seen)
    finally:
        server.shutdown()
    return out


def wiring() -> dict:
    """Does `_execute_server_warmup` call warmup_first_use(..., batch_size_warmup_sizes(...)), gated by
    first_use_warmup_applies, after its general /generate warm-up succeeded and before the server is marked
    up?"""
    spec = importlib.util.find_spec(HTTP_SERVER)
    tree = ast.parse(Path(spec.origin).read_text())
    fn = next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "_execute_server_warmup"),
              None)
    if fn is None:
        return {"found": False}
    for node in ast.walk(fn):
        body = getattr(node, "body", None)
        if not isinstance(body, list):
            continue
        calls = [i for i, st in enumerate(body) if _calls(st, "warmup_first_use", "batch_size_warmup_sizes")
                 and "first_use_warmup_applies" in ast.unparse(st)]
        ups = [i for i, st in enumerate(body) if "ServerStatus.Up" in ast.unparse(st)]
        checks = [i for i, st in enumerate(body) if isinstance(st, ast.Assert) and "status_code" in ast.unparse(st)]
        if calls and ups and checks:
            return {"found": True, "after_check": checks[0] < calls[0], "before_up": calls[0] < ups[0],
                    "call": ast.unparse(body[calls[0]])[:400]}
    return {"found": True, "after_check": False, "before_up": False, "call": None}


def _calls(stmt: ast.stmt, outer: str, inner: str) -> bool:
    for n in ast.walk(stmt):
        if isinstance(n, ast.Call) and getattr(n.func, "id", None) == outer:
            return any(isinstance(m, ast.Call) and getattr(m.func, "id", None) == inner for m in ast.walk(n))
    return False
