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
import logging
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


# --- a warm-up that fails must not end the server -------------------------------------------------------------

FAILURE_MODES = ("400", "500", "hang")
WARMUP_TIMEOUT_S = "2"  # SGLANG_WARMUP_TIMEOUT in these scenarios: the bound on the hanging request


class _Scripted(BaseHTTPRequestHandler):
    """A sglang stand-in for the warm-up: /model_info, then /generate answered by `decide` (a status and a
    body), or never answered while mode is "hang" (until `release` is set)."""

    seen: list = []
    decide = staticmethod(lambda body: (200, "[]"))
    release = threading.Event()

    def do_GET(self):  # noqa: N802 (http.server's name)
        type(self).seen.append({"path": self.path})
        self._answer(200, json.dumps({"is_generation": True, "has_image_understanding": False,
                                      "model_path": "tiny", "architectures": ["LlamaForCausalLM"]}))

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append({"path": self.path, "body": body})
        status, data = type(self).decide(body)
        if status is None:  # hang: answer nothing until the scenario ends
            type(self).release.wait()
            return
        self._answer(status, data)

    def _answer(self, status: int, data: str) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data.encode())
        except OSError:  # the client gave up (the hang's timeout)
            pass

    def log_message(self, *args):
        pass


def _ok(body: dict) -> tuple[int, str]:
    n = len(body.get("input_ids") or body.get("text") or [1])
    return 200, json.dumps([{"text": "x", "meta_info": {}}] * n)


def _first_use_fails(mode: str):
    """The general warm-up request (a prompt of 3 ids) succeeds; every first-use request fails as `mode`."""
    def decide(body: dict):
        if body.get("input_ids") == [10, 11, 12] or body.get("text") == "t":
            return _ok(body)
        if mode == "hang":
            return None, ""
        return int(mode), json.dumps({"error": {"message": f"scripted {mode}"}})
    return decide


class _Logs(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.records: list[dict] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append({"level": record.levelname, "message": record.getMessage(),
                             "warmup": record.pathname.endswith("warmup.py")})


def _serve():
    _Scripted.seen = []
    _Scripted.release = threading.Event()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Scripted)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _stop(server) -> None:
    _Scripted.release.set()
    server.shutdown()
    server.server_close()


def first_use_failures() -> dict:
    """warmup_first_use against a server whose first-use requests answer 400, 500 or never (bounded by
    SGLANG_WARMUP_TIMEOUT): does it raise, what does it return and log, and what did it send after the
    failure."""
    mod = importlib.import_module(WARMUP)
    fn = getattr(mod, "warmup_first_use", None)
    if fn is None:
        return {"missing": True}
    os.environ["SGLANG_WARMUP_TIMEOUT"] = WARMUP_TIMEOUT_S
    logs = _Logs()
    logging.getLogger().addHandler(logs)
    out: dict = {"missing": False}
    try:
        for mode in FAILURE_MODES:
            server = _serve()
            _Scripted.decide = staticmethod(_first_use_fails(mode))
            logs.records = []
            try:
                returned = fn(f"http://127.0.0.1:{server.server_port}", {"input_ids": [10, 11, 12]}, {}, True,
                              [2, 4])
                raised = None
            except BaseException as e:  # noqa: BLE001 (what escapes is the finding)
                returned, raised = None, f"{type(e).__name__}: {str(e)[:200]}"
            finally:
                _stop(server)
            out[mode] = {"returned": returned, "raised": raised, "sent": len(_Scripted.seen),
                         "warnings": [r["message"] for r in logs.records if r["level"] == "WARNING"]}
    finally:
        logging.getLogger().removeHandler(logs)
        os.environ.pop("SGLANG_WARMUP_TIMEOUT", None)
    return out


def long_prefill_lengths() -> dict:
    """long_prefill_warmup_tokens per request budget (None: unknown)."""
    fn = getattr(importlib.import_module(WARMUP), "long_prefill_warmup_tokens", None)
    if fn is None:
        return {"missing": True}
    return {"missing": False, "rows": [[t, fn(t)] for t in (None, 4096, 1025, 1024, 512, 16, 2, 1, 0)]}


def server_warmup() -> dict:
    """The server's own warm-up (`_execute_server_warmup`, then `_wait_and_warmup`) against the scripted
    server, with a real TokenizerManager as the server's state:

    - per failure mode: does the warm-up end the server (kill_process_tree, recorded instead of run), is the
      server marked up, which warnings it logs;
    - a short context (--context-length 64): the scripted server answers every /generate through the real
      TokenizerManager's own length check (`_validate_one_request`), so a request that does not fit is the
      400 upstream gives;
    - --skip-server-warmup: what `_wait_and_warmup` sends (nothing) and whether the server is up.
    """
    from support.scenarios_requests import import_http_server, tokenizer_manager

    hs = import_http_server()
    from sglang.srt.managers.io_struct import GenerateReqInput

    kills: list = []
    hs.kill_process_tree = lambda *a, **k: kills.append(a)  # the probe's own process must not be ended
    os.environ["SGLANG_WARMUP_TIMEOUT"] = WARMUP_TIMEOUT_S
    logs = _Logs()
    root = logging.getLogger()
    level = root.level
    root.addHandler(logs)
    root.setLevel(logging.INFO)  # the warm-up's info lines (a shortened prefill, its timing) are findings too
    out: dict = {}

    def run(name: str, decide, wait_and_warmup: bool = False, **server_args) -> None:
        server = _serve()
        _Scripted.decide = staticmethod(decide)
        args, _, tm = tokenizer_manager(host="127.0.0.1", port=server.server_port, **server_args)
        hs.set_global_state(hs._GlobalState(tokenizer_manager=tm, template_manager=None, scheduler_info={}))
        kills.clear()
        logs.records = []
        try:
            if wait_and_warmup:
                hs._wait_and_warmup(args)
                returned = None
            else:
                returned = hs._execute_server_warmup(args)
            raised = None
        except BaseException as e:  # noqa: BLE001
            returned, raised = None, f"{type(e).__name__}: {str(e)[:200]}"
        finally:
            _stop(server)
        posts = [x["body"] for x in _Scripted.seen if "body" in x]
        out[name] = {"returned": returned, "raised": raised, "killed": len(kills),
                     "up": getattr(tm.server_status, "name", str(tm.server_status)) == "Up",
                     "generate_lengths": [_prompt_tokens(b) for b in posts],
                     "rejected": [x for x in _answers if x is not None],
                     "warnings": [r["message"] for r in logs.records if r["level"] == "WARNING"],
                     "infos": [r["message"] for r in logs.records if r["warmup"] and r["level"] == "INFO"]}
        _answers.clear()

    _answers: list = []

    def through_tokenizer_manager():
        def decide(body: dict):
            tm = hs._global_state.tokenizer_manager
            obj = GenerateReqInput(**body)
            try:
                obj.normalize_batch_and_arguments()
                subs = [obj] if obj.is_single else [obj[i] for i in range(obj.batch_size)]
                for sub in subs:
                    tm._validate_one_request(sub, list(sub.input_ids))
            except ValueError as e:
                _answers.append(str(e)[:200])
                return 400, json.dumps({"error": {"message": str(e)}})
            return _ok(body)
        return decide

    try:
        for mode in FAILURE_MODES:
            run(mode, _first_use_fails(mode))
        run("short_context", through_tokenizer_manager(), context_length=64)
        run("skip_server_warmup", _first_use_fails("500"), wait_and_warmup=True, skip_server_warmup=True)
    finally:
        root.removeHandler(logs)
        root.setLevel(level)
        os.environ.pop("SGLANG_WARMUP_TIMEOUT", None)
    return out


def _prompt_tokens(body: dict) -> list[int]:
    ids = body.get("input_ids")
    if not ids:
        return []
    rows = ids if isinstance(ids[0], list) else [ids]
    return [len(r) for r in rows]
