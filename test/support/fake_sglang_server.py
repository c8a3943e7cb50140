"""A fake SGLang server for CPU tests of `bench eagle3`: launched by the harness exactly like
`python3 -m sglang.launch_server` (same command-line flags, own session), it speaks the parts of SGLang's
HTTP API the harness uses, with speeds set by environment variables, so a test knows what the benchmark
should conclude.

  GET  /health            503 for FAKE_STARTUP_S seconds, then 200
  POST /generate          input_ids or text; sampling_params.max_new_tokens; stream on/off (SSE like SGLang)
  GET  /server_info       server args + internal_states[0]: avg_spec_accept_length, step_time_dict
                          (the latter only with SGLANG_RECORD_STEP_TIME=1, like SGLang)
  POST /set_internal_state  resets the spec accept totals
  GET|POST /flush_cache   200
  POST /start_profile     with FAKE_TRACE (a real profiler trace file): copies it into output_dir as each TP
                          rank's trace (rank r: FAKE_TRACE_TP<r> where set), named like SGLang's
                          (<prefix>-<time>-TP-<r>.trace.json[.gz], one per rank as SGLang writes them); else 400.
                          FAKE_TRACES (comma list): the rank-0 trace of the 1st, 2nd, ... window (the last repeats).
                          With profile_by_stage (SGLang 0.5.9+) two per rank, as SGLang names them:
                          <...>-TP-<r>-EXTEND.trace.json[.gz] (FAKE_TRACE_PREFILL where set, else the same file)
                          and <...>-TP-<r>-DECODE.trace.json[.gz]
  POST /stop_profile      200
  GET  /v1/models, POST /v1/completions, /v1/chat/completions   SGLang's OpenAI endpoints (served model name =
                          --model-path), streamed like fake_openai_server.py's (whose OpenAIRoutes they are), at
                          the same speeds and counted in the same spec totals and step times as /generate
Speeds: one prefill (FAKE_PREFILL_MS) yields the first token; then a non-speculative server makes one token
per FAKE_STEP_MS, a speculative one (--speculative-algorithm given) FAKE_ACCEPT_LEN tokens per FAKE_ROUND_MS
round; FAKE_CTX_MS_PER_KTOK adds that many ms to every step (or round) per 1000 prompt tokens (long contexts cost).
Triton, as SGLang's eager EAGLE kernels meet it (bs_upper = next_power_of_2(bs) is a tl.constexpr): with
FAKE_TRITON_COMPILE_MS, the first time the running batch reaches a new power-of-two bucket the request that got
there "compiles" FAKE_TRITON_KERNEL (default assign_extend_cache_locs): it sleeps that long and writes a cache entry
(<dir>/<hash>/<name>.json, __grp__<name>.json, <name>.cubin) into the Triton cache dir of its environment
(TRITON_CACHE_DIR, else $TRITON_HOME/.triton/cache, else ~/.triton/cache). FAKE_STARTUP_COMPILES=n: before it
reports healthy the server "compiles" n kernels of its start (startup_kernel_0.., as a CUDA-graph capture and the
warm-up do), each an entry of that cache unless the cache holds it already (a carried or earlier server's cache).
Outputs: every request's output ids follow from its prompt's length and position alone (the same on both arms:
greedy speculation is lossless); FAKE_WRONG_FROM=k makes every output token from position k on one id off (a
wrong kernel past some length). FAKE_PROMPT_LOG=<file>: one line per request, "<path> <prompt tokens> <sha256
of the prompt as JSON, 16 hex>", in arrival order.
Misbehaviour for teardown tests: FAKE_IGNORE_SIGTERM=1; FAKE_SPAWN_CHILD=1 (a child that ignores SIGTERM too;
FAKE_CHILD_NEW_PGRP=1 moves it to its own process group, still in our session); FAKE_PID_FILE gets the pids.
"""

import argparse
import hashlib
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
import zlib
from http.server import ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from support.fake_openai_server import OpenAIRoutes  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--model-path", required=True)
ap.add_argument("--port", type=int, required=True)
ap.add_argument("--host", default="127.0.0.1")
ap.add_argument("--tp-size", type=int, default=1)
ap.add_argument("--skip-tokenizer-init", action="store_true")
ap.add_argument("--speculative-algorithm")
ap.add_argument("--speculative-draft-model-path")
ap.add_argument("--speculative-num-steps", type=int)
ap.add_argument("--speculative-eagle-topk", type=int)
ap.add_argument("--speculative-num-draft-tokens", type=int)
ap.add_argument("--fake-fusion-on", action="store_true")
args, unknown = ap.parse_known_args()

env = os.environ.get
STARTUP_S = float(env("FAKE_STARTUP_S", "0.3"))
PREFILL_S = float(env("FAKE_PREFILL_MS", "5")) / 1e3
STEP_S = float(env("FAKE_STEP_MS", "4")) / 1e3
ROUND_S = float(env("FAKE_ROUND_MS", "6")) / 1e3
ACCEPT = float(env("FAKE_ACCEPT_LEN", "2.5"))
RECORD = env("SGLANG_RECORD_STEP_TIME") == "1"
CTX_S_PER_KTOK = float(env("FAKE_CTX_MS_PER_KTOK", "0")) / 1e3
COMPILE_S = float(env("FAKE_TRITON_COMPILE_MS", "0")) / 1e3
KERNEL = env("FAKE_TRITON_KERNEL", "assign_extend_cache_locs")
SPEC = bool(args.speculative_algorithm)
WRONG_FROM = int(env("FAKE_WRONG_FROM", "0"))
PROMPT_LOG = env("FAKE_PROMPT_LOG")
INTERVAL = 4  # like --decode-log-interval, small so short requests record step times

T0 = time.monotonic()
lock = threading.Lock()
state = {"running": 0, "accept": 0, "forward": 0, "steps": {}, "buckets": set()}

if env("FAKE_IGNORE_SIGTERM") == "1":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = None
if env("FAKE_SPAWN_CHILD") == "1":
    code = ("import os, signal, time\n"
            "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            + ("os.setpgid(0, 0)\n" if env("FAKE_CHILD_NEW_PGRP") == "1" else "")
            + "time.sleep(3600)\n")
    child = subprocess.Popen([sys.executable, "-c", code])
if env("FAKE_PID_FILE"):
    with open(env("FAKE_PID_FILE"), "w") as f:
        json.dump({"server": os.getpid(), "child": child.pid if child else None}, f)
print(f"fake sglang server pid {os.getpid()} spec={SPEC} unknown flags: {unknown}", flush=True)


def decode_steps(n_tokens, prompt_len=0):
    """(sleep seconds, tokens) per decode step after the prefill token."""
    left, r = n_tokens - 1, 0
    extra = CTX_S_PER_KTOK * prompt_len / 1000
    while left > 0:
        if SPEC:
            k = min(left, math.floor((r + 1) * ACCEPT) - math.floor(r * ACCEPT))
            yield ROUND_S + extra, max(k, 1)
            left -= max(k, 1)
        else:
            yield STEP_S + extra, 1
            left -= 1
        r += 1


def triton_cache_dir():
    if env("TRITON_CACHE_DIR"):
        return Path(env("TRITON_CACHE_DIR"))
    return Path(env("TRITON_HOME") or env("HOME") or "~").expanduser() / ".triton" / "cache"


def compile_bucket(bs):
    """The first batch of a new power-of-two bucket compiles the kernel again (a new cache entry), once; a cache
    that already holds the entry (an earlier server with the same cache dir) compiles nothing."""
    bucket = 1 << (bs - 1).bit_length()
    with lock:
        if not COMPILE_S or bucket in state["buckets"]:
            return
        state["buckets"].add(bucket)
    entry = triton_cache_dir() / f"{zlib.crc32(KERNEL.encode()):08x}-bs{bucket}"
    if entry.is_dir():
        return
    time.sleep(COMPILE_S)
    entry.mkdir(parents=True, exist_ok=True)
    (entry / f"{KERNEL}.json").write_text(json.dumps({"name": KERNEL, "constants": {"bs_upper": bucket}}))
    (entry / f"{KERNEL}.cubin").write_bytes(b"\0" * 16)
    (entry / f"__grp__{KERNEL}.json").write_text(json.dumps({"child_paths": {f"{KERNEL}.json": str(entry)}}))


def produce_ids(n, seed, prompt_len=0):
    """The token ids of each chunk of one request of n tokens: the prefill's first token, then a decode step's
    (or a verify round's) tokens, sleeping as the server's speed says and counting spec totals and step times."""
    with lock:
        state["running"] += 1
        running = state["running"]
    try:
        compile_bucket(running)
        time.sleep(PREFILL_S)
        yield [100 + seed % 2048]
        made, tic = 1, time.perf_counter()
        for k, (dt, toks) in enumerate(decode_steps(n, prompt_len), 1):
            time.sleep(dt)
            with lock:
                if SPEC:
                    state["accept"] += toks
                    state["forward"] += 1
                if RECORD and k % INTERVAL == 0:
                    now = time.perf_counter()
                    state["steps"].setdefault(state["running"], []).append((now - tic) / INTERVAL)
                    tic = now
            yield [100 + (seed + made + j + (1 if WRONG_FROM and made + j >= WRONG_FROM else 0)) % 2048
                   for j in range(toks)]
            made += toks
    finally:
        with lock:
            state["running"] -= 1


class Handler(OpenAIRoutes):
    model = args.model_path

    def produce(self, n, seed):  # OpenAIRoutes seeds with the prompt's token count
        for ids in produce_ids(n, seed, prompt_len=seed):
            yield [f" t{i}" for i in ids]

    def do_GET(self):
        if self.path == "/health":
            return self._send(200 if time.monotonic() - T0 > STARTUP_S else 503, {})
        if self.openai_get():
            return None
        if self.path in ("/server_info", "/get_server_info"):
            with lock:
                st = {}
                if SPEC and state["forward"]:
                    st["avg_spec_accept_length"] = state["accept"] / state["forward"]
                if RECORD:
                    st["step_time_dict"] = {str(k): list(v) for k, v in state["steps"].items()}
            return self._send(200, {"version": "0.5.14-fake", "model_path": args.model_path,
                                    "host": args.host, "port": args.port, "tp_size": args.tp_size,
                                    "speculative_algorithm": args.speculative_algorithm,
                                    "speculative_num_draft_tokens": args.speculative_num_draft_tokens,
                                    "skip_tokenizer_init": args.skip_tokenizer_init, "internal_states": [st]})
        if self.path.startswith("/flush_cache"):
            return self._send(200, "Cache flushed.\n", "text/plain")
        return self._send(404, {"detail": "Not Found"})

    def do_POST(self):
        if self.path.startswith("/flush_cache"):
            return self._send(200, "Cache flushed.\n", "text/plain")
        body = self._body()
        prompt = body.get("input_ids", body.get("prompt", body.get("text")))
        if PROMPT_LOG and prompt is not None:
            digest = hashlib.sha256(json.dumps(prompt).encode()).hexdigest()[:16]
            with lock, open(PROMPT_LOG, "a") as f:
                f.write(f"{self.path} {len(prompt)} {digest}\n")
        if self.path == "/set_internal_state":
            with lock:
                state["accept"] = state["forward"] = 0
            return self._send(200, [True])
        if self.path == "/generate":
            return self.generate(body)
        if self.path.startswith("/v1/") and args.skip_tokenizer_init:
            return self._send(400, {"error": {"message": "the OpenAI API needs a tokenizer (--skip-tokenizer-init)"}})
        if self.openai_post(body):
            return None
        if self.path == "/start_profile":
            src = os.environ.get("FAKE_TRACE")
            if os.environ.get("FAKE_TRACES"):
                listed = os.environ["FAKE_TRACES"].split(",")
                with lock:
                    src = listed[min(state.setdefault("windows", 0), len(listed) - 1)]
                    state["windows"] += 1
            if not src:
                return self._send(400, {"error": {"message": "profiling is not enabled (no FAKE_TRACE)"}})
            stamp = time.time()
            # profile_by_stage: the prefill batches' trace and the decode batches' trace, each named with its
            # stage (SGLang's ForwardMode name) after the rank; the prefill one is FAKE_TRACE_PREFILL where set
            stages = [("-EXTEND", os.environ.get("FAKE_TRACE_PREFILL")), ("-DECODE", None)] if body.get(
                "profile_by_stage") else [("", None)]
            for rank in range(args.tp_size):
                for stage, own in stages:
                    path = own or (os.environ.get(f"FAKE_TRACE_TP{rank}", src) if rank else src)
                    suffix = ".trace.json.gz" if path.endswith(".gz") else ".trace.json"
                    name = f"{body.get('profile_prefix', '')}-{stamp}-TP-{rank}{stage}{suffix}"
                    with open(path, "rb") as f, open(os.path.join(body["output_dir"], name), "wb") as g:
                        g.write(f.read())
            return self._send(200, "Start profiling.\n", "text/plain")
        if self.path == "/stop_profile":
            return self._send(200, "Stop profiling.\n", "text/plain")
        return self._send(404, {"detail": "Not Found"})

    def generate(self, body):
        ids, text = body.get("input_ids"), body.get("text")
        if ids is None and (text is None or args.skip_tokenizer_init):
            msg = "text prompt needs a tokenizer (--skip-tokenizer-init)"
            return self._send(400, {"error": {"message": msg}})
        n = int(body.get("sampling_params", {}).get("max_new_tokens", 16))
        stream = bool(body.get("stream"))
        seed = sum(ids) if ids else len(text)
        t0 = time.perf_counter()
        if stream:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
        out, verify_ct = [], 0
        for new in produce_ids(n, seed, prompt_len=len(ids) if ids else 0):
            out += new
            verify_ct += 1 if SPEC and len(out) > 1 else 0
            if stream:
                self._event_sse({"output_ids": list(out), "meta_info": {"completion_tokens": len(out)}})
        meta = {"prompt_tokens": len(ids) if ids else len(text.split()), "completion_tokens": len(out),
                "e2e_latency": time.perf_counter() - t0, "finish_reason": {"type": "length", "length": n}}
        if SPEC:
            meta.update(spec_verify_ct=verify_ct, spec_accept_length=len(out) / max(verify_ct, 1))
        final = {"output_ids": out, "meta_info": meta}
        if not stream:
            return self._send(200, final)
        self._event_sse(final)
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True

    def _event_sse(self, obj):  # /generate streams unframed (Connection: close), the OpenAI routes chunked
        self.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
        self.wfile.flush()


def startup_compiles(n):
    """The kernels a server compiles while it starts (FAKE_STARTUP_COMPILES): one cache entry each, unless cached."""
    for i in range(n):
        name = f"startup_kernel_{i}"
        entry = triton_cache_dir() / f"{zlib.crc32(name.encode()):08x}-start"
        if entry.is_dir():
            continue
        entry.mkdir(parents=True, exist_ok=True)
        (entry / f"{name}.json").write_text(json.dumps({"name": name}))
        (entry / f"__grp__{name}.json").write_text(json.dumps({"child_paths": {f"{name}.json": str(entry)}}))


startup_compiles(int(env("FAKE_STARTUP_COMPILES", "0")))
ThreadingHTTPServer.daemon_threads = True
ThreadingHTTPServer((args.host, args.port), Handler).serve_forever()
