"""A fake SGLang 0.5.14 server serving the lab model pair, for CPU tests of the lab-line GPU suite
(test/gpu/labline) and its runner: started as `python -m sglang.launch_server` with the suite's real flags (a
stand-in `sglang/launch_server.py` runs this file), in its own session, it speaks the parts of SGLang's HTTP
API the suite uses and logs what SGLang logs, so the whole suite runs with a simulated GPU.

  GET  /health            503 for FAKE_STARTUP_S seconds, then 200
  GET  /server_info       the parsed flags under SGLang's server_args names + internal_states
  POST /generate          input_ids -> the bigram chain B(t) = 100 + (5 (t - 100) + 17) mod 2048, meta_info with
                          completion_tokens (+ spec_verify_ct, 3 tokens per verify, when speculative);
                          return_logprob / top_logprobs_num like SGLang with --skip-tokenizer-init
  POST /start_profile     {output_dir, num_steps, profile_prefix}: the next request writes
                          <prefix>-<id>-TP-{0,1}.trace.json.gz (support/kineto_trace.spec_trace) with 2L - 1 fused
                          all-reduce kernels per verify step when fusion is on, none when off
  POST /stop_profile      500 unless a profile is running (as SGLang: "Profiling is not in progress")
At startup, with fusion on, each rank logs SGLang's workspace line for the attention and the MoE workspace,
sized as P5 sizes them (decode max bs x draft tokens).
FAKE_LAB_BREAK (comma list) injects the defects the suite must catch: `fused` (2L - 2 fused kernels per verify),
`workspace` (workspaces of 2048 tokens, as without P5), `greedy` (a non-speculative server repeats output 39
at position 40).
"""

import argparse
import gzip
import json
import math
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from support.kineto_trace import spec_trace  # noqa: E402

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
ap.add_argument("--flashinfer-allreduce-fusion-backend")
ap.add_argument("--enforce-disable-flashinfer-allreduce-fusion", action="store_true")
ap.add_argument("--disable-custom-all-reduce", action="store_true")
ap.add_argument("--disable-radix-cache", action="store_true")
ap.add_argument("--attention-backend")
ap.add_argument("--cuda-graph-backend-prefill")
ap.add_argument("--cuda-graph-max-bs-decode", type=int, default=None)
ap.add_argument("--mem-fraction-static", type=float)
ap.add_argument("--trust-remote-code", action="store_true")
args, unknown = ap.parse_known_args()

BREAK = set(filter(None, os.environ.get("FAKE_LAB_BREAK", "").split(",")))
STARTUP_S = float(os.environ.get("FAKE_STARTUP_S", "0.1"))
SPEC = bool(args.speculative_algorithm)
FUSION = args.flashinfer_allreduce_fusion_backend is not None and not args.enforce_disable_flashinfer_allreduce_fusion
cfg = json.loads((Path(args.model_path) / "config.json").read_text())
LAYERS, HIDDEN = cfg["num_hidden_layers"], cfg["hidden_size"]
T0 = time.monotonic()
profile: dict = {}
lock = threading.Lock()

print(f"$ fake sglang 0.5.14 (lab pair) spec={SPEC} fusion={FUSION} unknown flags: {unknown}", flush=True)
print(f"[TP0] Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, layers={LAYERS}", flush=True)
if FUSION:
    tokens = 2048 if "workspace" in BREAK else (args.cuda_graph_max_bs_decode or 0) * (
        args.speculative_num_draft_tokens if SPEC else 1)
    for rank in range(args.tp_size):
        for _ in ("moe", "attn"):
            print(f"[TP{rank}] FlashInfer AllReduce Fusion enabled and workspace initialized: backend=trtllm, "
                  f"rank={rank}, world_size={args.tp_size}, max_token_num={tokens}, hidden_dim={HIDDEN}", flush=True)


def successor(t):
    return 100 + (5 * ((t - 100) % 2048) + 17) % 2048


def chain(last, n):
    out = []
    for i in range(n):
        last = successor(last)
        out.append(last)
        if "greedy" in BREAK and not SPEC and i == 40:
            out[-1] = out[-2]  # a token followed by itself here and by its successor's successor next
    return out


def write_traces():
    steps = profile["num_steps"]
    fused = 0 if not FUSION else (2 * LAYERS - 2 if "fused" in BREAK else 2 * LAYERS - 1)
    nccl = 2 if FUSION else 2 * LAYERS + 1
    for rank in range(args.tp_size):
        doc = spec_trace(max(steps - 1, 1), fused, draft_fused=0, nccl=nccl).document()
        name = f"{profile['prefix']}-{profile['id']}-TP-{rank}.trace.json.gz"
        path = Path(profile["output_dir"]) / name
        with gzip.open(path.with_suffix(".tmp"), "wt") as f:
            json.dump(doc, f)
        os.replace(path.with_suffix(".tmp"), path)
    print(f"[TP0] Profiling done. Traces are saved to: {profile['output_dir']}", flush=True)
    profile.clear()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *a):
        pass

    def _send(self, code, obj, ctype="application/json"):
        body = (json.dumps(obj) if ctype == "application/json" else obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(n)) if n else {}

    def do_GET(self):
        if self.path == "/health":
            return self._send(200 if time.monotonic() - T0 > STARTUP_S else 503, {})
        if self.path == "/server_info":
            info = {"version": "0.5.14", "model_path": args.model_path, "tp_size": args.tp_size,
                    "speculative_algorithm": args.speculative_algorithm,
                    "speculative_num_steps": args.speculative_num_steps,
                    "speculative_eagle_topk": args.speculative_eagle_topk,
                    "speculative_num_draft_tokens": args.speculative_num_draft_tokens,
                    "flashinfer_allreduce_fusion_backend": args.flashinfer_allreduce_fusion_backend if FUSION else None,
                    "enforce_disable_flashinfer_allreduce_fusion": args.enforce_disable_flashinfer_allreduce_fusion,
                    "disable_custom_all_reduce": args.disable_custom_all_reduce,
                    "disable_radix_cache": args.disable_radix_cache, "attention_backend": args.attention_backend,
                    "cuda_graph_max_bs_decode": args.cuda_graph_max_bs_decode, "enable_torch_symm_mem": False,
                    "max_running_requests": 48 if SPEC else None,
                    "internal_states": [{"avg_spec_accept_length": 3.0} if SPEC else {}]}
            return self._send(200, info)
        return self._send(404, {"detail": "Not Found"})

    def do_POST(self):
        body = self._body()
        if self.path == "/generate":
            return self.generate(body)
        if self.path == "/start_profile":
            with lock:
                profile.update(output_dir=body["output_dir"], num_steps=body["num_steps"],
                               prefix=body.get("profile_prefix") or "", id=str(time.time()))
            return self._send(200, "Start profiling.\n", "text/plain")
        if self.path == "/stop_profile":
            with lock:
                if not profile:
                    return self._send(500, {"detail": "Profiling is not in progress. Call /start_profile first."})
                write_traces()
            return self._send(200, "Stop profiling. This will take some time.\n", "text/plain")
        return self._send(404, {"detail": "Not Found"})

    def generate(self, body):
        ids = body.get("input_ids")
        if not ids:
            return self._send(400, {"error": {"message": "input_ids required (--skip-tokenizer-init)"}})
        n = int(body["sampling_params"]["max_new_tokens"])
        out = chain(ids[-1], n)
        time.sleep(0.0002 * n)
        meta = {"prompt_tokens": len(ids), "completion_tokens": n, "e2e_latency": 0.0002 * n,
                "finish_reason": {"type": "length", "length": n}}
        if SPEC:
            vct = math.ceil((n - 1) / 3)
            meta.update(spec_verify_ct=vct, spec_accept_length=n / vct)
        if body.get("return_logprob"):
            k = int(body.get("top_logprobs_num") or 0)
            jitter = 0.01 if SPEC else 0.0  # arms differ in the last bf16 digits
            meta["output_token_logprobs"] = [[-1e-9, t, None] for t in out]
            meta["output_top_logprobs"] = [[[-1e-9, t, None]] + [[-20.0 - j - (t % 7) / 10 + jitter, 100 + (t + j)
                                                                   % 2048, None] for j in range(1, k)] for t in out]
        with lock:
            if profile:
                write_traces()  # SGLang stops by itself after num_steps forward batches
        return self._send(200, {"output_ids": out, "meta_info": meta})


ThreadingHTTPServer.daemon_threads = True
ThreadingHTTPServer((args.host, args.port), Handler).serve_forever()
