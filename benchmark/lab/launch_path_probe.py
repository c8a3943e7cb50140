#!/usr/bin/env python3
"""What a normal sglang launch imports, found by importing it: the launch path's modules, the default grammar
backend built with the model's tokenizer (and a JSON-schema grammar decoded greedily on CPU when a model is
given), the OpenAI + Responses serving modules, and the `openai` client's first completions and chat calls
(streamed and not) and a Responses call against a local fake endpoint. With --bench-serving, also upstream's
benchmark client as users run it: `python -m sglang.bench_serving --help`, its random-ids dataset (get_dataset)
with the tokenizer, and a real run (BENCH_ARGS) against a local fake OpenAI server (test/support/
fake_openai_server.py: streamed /v1/completions). Every step records what failed and which module was missing;
the last line printed is a JSON summary (all of it is written to --out).

    python3 benchmark/lab/launch_path_probe.py --tokenizer DIR [--model DIR] [--out FILE.json] [--bench-serving]
                                               [--site DIR] [--cpu] [--simulate-cuda 9.0]

--site DIR: the bundle's install target (the lab's /tmp/site): each imported distribution is reported as
"bundle" (installed there) or "image" (anywhere else). On a machine without CUDA, --cpu puts the test suite's
import-only stand-ins in place of what cannot load there (test/support: shims/ for sgl_kernel and torchvision,
fi_comm.py for flashinfer.comm, which loads libcudart at import), and --simulate-cuda MAJOR.MINOR (implies
--cpu) makes torch report one GPU of that capability (cuda_sim.py) before sglang is imported, so sglang takes
the import branches a GPU machine takes. Exit code: 0 when every step passed, 1 otherwise.
Used on CPU to find the bundle's launch-path dependencies (benchmark/lab/README.md) and on the lab as a check.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import importlib.metadata as md
import importlib.util
import io
import json
import runpy
import sys
import tempfile
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "test" / "gpu" / "userpath"))  # the user-path GPU tests' JSON schema
from userpath_env import JSON_MAX_TOKENS, JSON_SCHEMA, schema_matches  # noqa: E402

# what a server process imports on the way to serving the lab pair (http server process, scheduler and
# detokenizer processes, the model and the speculative worker), in import order
LAUNCH_MODULES = (
    "sglang", "sglang.launch_server", "sglang.srt.server_args", "sglang.srt.entrypoints.http_server",
    "sglang.srt.entrypoints.engine", "sglang.srt.managers.tokenizer_manager",
    "sglang.srt.managers.detokenizer_manager", "sglang.srt.managers.scheduler",
    "sglang.srt.model_executor.model_runner", "sglang.srt.layers.attention.triton_backend",
    "sglang.srt.models.deepseek_v2", "sglang.srt.models.llama_eagle3", "sglang.srt.speculative.eagle_worker_v2",
    "sglang.srt.constrained.xgrammar_backend",
)
SERVING_MODULES = (
    "sglang.srt.entrypoints.openai.serving_completions", "sglang.srt.entrypoints.openai.serving_chat",
    "sglang.srt.entrypoints.openai.serving_responses",
)


def _error(e: BaseException) -> dict[str, Any]:
    frames = [f for f in traceback.extract_tb(e.__traceback__) if "/sglang/" in f.filename]
    where = f"{frames[-1].filename.split('/sglang/', 1)[-1]}:{frames[-1].lineno}" if frames else None
    return {"error": f"{type(e).__name__}: {e}"[:400], "missing": getattr(e, "name", None)
            if isinstance(e, ModuleNotFoundError) else None, "raised_in": where}


FIRST_SEEN: dict[str, str] = {}  # top-level module -> the first step after which it was imported


def step(name: str, results: dict[str, Any], fn, *args) -> Any:
    t0 = time.monotonic()
    try:
        return _step(name, results, fn, *args)
    finally:
        for m in list(sys.modules):
            FIRST_SEEN.setdefault(m.split(".", 1)[0], name)
        results[name]["s"] = round(time.monotonic() - t0, 2)


def _step(name: str, results: dict[str, Any], fn, *args) -> Any:
    try:
        value = fn(*args)
        results[name] = {"ok": True, **(value if isinstance(value, dict) else {})}
        return value
    except BaseException as e:  # noqa: BLE001 - every failure is a finding
        if isinstance(e, KeyboardInterrupt):
            raise
        results[name] = {"ok": False, **_error(e)}
        print(f"probe: {name}: {results[name]['error']}", file=sys.stderr)
        return None


def default_server_args():
    """sglang's ServerArgs field defaults as a namespace (constructing ServerArgs needs a model and a GPU)."""
    from sglang.srt.server_args import ServerArgs

    ns = type("DefaultServerArgs", (), {})()
    for f in dataclasses.fields(ServerArgs):
        if f.default is not dataclasses.MISSING:
            setattr(ns, f.name, f.default)
        elif f.default_factory is not dataclasses.MISSING:
            setattr(ns, f.name, f.default_factory())
    ServerArgs._handle_grammar_backend(ns)  # None -> the default backend
    return ns


def grammar(tokenizer_dir: str, model_dir: str | None) -> dict[str, Any]:
    from sglang.srt.constrained.base_grammar_backend import create_grammar_backend
    from transformers import AutoTokenizer

    cfg = json.loads((Path(model_dir or tokenizer_dir) / "config.json").read_text())
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    args = default_server_args()
    backend = create_grammar_backend(args, tok, cfg["vocab_size"], {cfg["eos_token_id"]})
    out: dict[str, Any] = {"grammar_backend": args.grammar_backend, "backend_class": type(backend).__name__}
    if backend is None:
        raise RuntimeError(f"create_grammar_backend returned None (grammar_backend={args.grammar_backend!r})")
    if out["grammar_backend"] == "xgrammar":  # how xgrammar reads the vocabulary (BYTE_LEVEL for the lab pair)
        import xgrammar

        out["vocab_type"] = str(xgrammar.TokenizerInfo.from_huggingface(tok, vocab_size=cfg["vocab_size"]).vocab_type)
    g = backend.dispatch_json(json.dumps(JSON_SCHEMA))
    if model_dir:
        out["greedy"] = greedy_under_grammar(g, tok, model_dir, cfg["vocab_size"])
    return out


def greedy_under_grammar(g, tok, model_dir: str, vocab: int, max_tokens: int = JSON_MAX_TOKENS) -> dict[str, Any]:
    """Greedy decoding of the model under the grammar object, on CPU (xgrammar's CPU mask kernel): the GPU tests'
    JSON-schema answer must end within their token budget and match the schema."""
    import torch
    import xgrammar
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).eval()
    ids = tok.encode("Answer in JSON: ")
    mask = g.allocate_vocab_mask(vocab, 1, "cpu")
    out: list[int] = []
    while len(out) < max_tokens and not g.is_terminated():
        with torch.no_grad():
            logits = model(torch.tensor([ids + out])).logits[:, -1].float()
        g.fill_vocab_mask(mask, 0)
        xgrammar.apply_token_bitmask_inplace(logits, mask)
        t = int(logits.argmax())
        g.accept_token(t)
        out.append(t)
    text = tok.decode(out, skip_special_tokens=True)
    if not g.is_terminated():
        raise AssertionError(f"the grammar did not end within {max_tokens} tokens: {text!r}")
    if not schema_matches(json.loads(text), JSON_SCHEMA):
        raise AssertionError(f"grammar output {text!r} does not match the schema")
    return {"tokens": len(out), "terminated": g.is_terminated(), "text": text}


# ---- the openai client against a fake endpoint -------------------------------------------------------------

def _completion(chat: bool) -> dict[str, Any]:
    usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    if chat:
        return {"id": "c1", "object": "chat.completion", "created": 0, "model": "m", "usage": usage,
                "choices": [{"index": 0, "finish_reason": "length",
                             "message": {"role": "assistant", "content": "ab"}}]}
    return {"id": "c1", "object": "text_completion", "created": 0, "model": "m", "usage": usage,
            "choices": [{"index": 0, "text": "ab", "finish_reason": "length", "logprobs": None}]}


def _chunks(chat: bool) -> list[dict[str, Any]]:
    out = []
    for i, piece in enumerate(("a", "b")):
        if chat:
            delta = {"role": "assistant", "content": piece} if i == 0 else {"content": piece}
            out.append({"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "m",
                        "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
        else:
            out.append({"id": "c1", "object": "text_completion", "created": 0, "model": "m",
                        "choices": [{"index": 0, "text": piece, "finish_reason": None, "logprobs": None}]})
    return out


RESPONSE = {"id": "r1", "object": "response", "created_at": 0, "model": "m", "status": "completed",
            "parallel_tool_calls": False, "tool_choice": "auto", "tools": [],
            "output": [{"type": "message", "id": "m1", "role": "assistant", "status": "completed",
                        "content": [{"type": "output_text", "text": "ab", "annotations": []}]}]}


class FakeOpenAI(BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        chat = self.path.endswith("/chat/completions")
        if self.path.endswith("/responses"):
            self._json(RESPONSE)
        elif body.get("stream"):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for c in _chunks(chat):
                self.wfile.write(f"data: {json.dumps(c)}\n\n".encode())
            self.wfile.write(b"data: [DONE]\n\n")
        else:
            self._json(_completion(chat))

    def _json(self, obj: dict[str, Any]) -> None:
        raw = json.dumps(obj).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)


def openai_client() -> dict[str, Any]:
    import openai

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), FakeOpenAI)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{httpd.server_port}/v1", api_key="none", max_retries=0)
        got = {
            "completions": client.completions.create(model="m", prompt="x", max_tokens=2).choices[0].text,
            "completions_stream": "".join(c.choices[0].text for c in client.completions.create(
                model="m", prompt="x", max_tokens=2, stream=True)),
            "chat": client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}],
                                                   max_tokens=2).choices[0].message.content,
            "chat_stream": "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "x"}], max_tokens=2, stream=True)),
            "responses": client.responses.create(model="m", input="x", max_output_tokens=2).output_text,
        }
    finally:
        httpd.shutdown()
    if set(got.values()) != {"ab"}:
        raise AssertionError(f"unexpected client results {got}")
    return {"openai": openai.__version__}


# ---- upstream's benchmark client: python -m sglang.bench_serving --------------------------------------------

# the command users reach for first (with --tokenizer, --base-url and --output-file added)
BENCH_ARGS = ("--backend", "sglang-oai", "--dataset-name", "random-ids", "--random-input-len", "2048",
              "--random-output-len", "256", "--random-range-ratio", "1.0", "--num-prompts", "8",
              "--max-concurrency", "4")
BENCH_PROMPTS, BENCH_INPUT, BENCH_OUTPUT = 8, 2048, 256


def run_module(name: str, argv: list[str]) -> tuple[object, str]:
    """`python -m name argv...` in this process (the stand-ins stay in place): its exit code and stdout."""
    old, buf = sys.argv, io.StringIO()
    sys.argv = [name, *argv]
    sys.modules.pop(name, None)  # run as __main__ afresh, as `python -m` does (a step may have imported it)
    code: object = 0
    try:
        with contextlib.redirect_stdout(buf):
            runpy.run_module(name, run_name="__main__", alter_sys=True)
    except SystemExit as e:
        code = e.code
    finally:
        sys.argv = old
    return code or 0, buf.getvalue()


def bench_help() -> dict[str, Any]:
    code, out = run_module("sglang.bench_serving", ["--help"])
    if code != 0 or "--dataset-name" not in out:
        raise AssertionError(f"python -m sglang.bench_serving --help: exit {code}: {out[-300:]!r}")
    return {"help_lines": len(out.splitlines())}


def bench_dataset(tokenizer_dir: str) -> dict[str, Any]:
    """bench_serving's own get_dataset for random-ids (RandomDataset -> sample_random_requests) with its own
    get_tokenizer, on the arguments of BENCH_ARGS."""
    from sglang.bench_serving import get_dataset, get_tokenizer

    tok = get_tokenizer(tokenizer_dir)
    args = argparse.Namespace(dataset_name="random-ids", random_input_len=BENCH_INPUT, random_output_len=BENCH_OUTPUT,
                              random_range_ratio=1.0, num_prompts=BENCH_PROMPTS, dataset_path="",
                              tokenize_prompt=False)
    with contextlib.redirect_stdout(io.StringIO()):
        rows = get_dataset(args, tok, None)
    want = BENCH_INPUT - int(tok.num_special_tokens_to_add())
    bad = [r for r in rows if not (isinstance(r.prompt, str) and r.prompt and r.prompt_len == want
                                   and r.output_len == BENCH_OUTPUT)]
    if len(rows) != BENCH_PROMPTS or bad:
        raise AssertionError(f"{len(rows)} rows, {len(bad)} not ({want}-token text prompt, {BENCH_OUTPUT} out)")
    return {"rows": len(rows), "prompt_len": want, "output_len": BENCH_OUTPUT,
            "retokenized_prompt_len": len(tok.encode(rows[0].prompt, add_special_tokens=False))}


def bench_run(tokenizer_dir: str) -> dict[str, Any]:
    """The real benchmark: BENCH_ARGS against fake_openai_server.py (served model name = the tokenizer directory,
    as sglang names a model by its path), result read back from --output-file."""
    spec = importlib.util.spec_from_file_location("fake_openai_server", REPO / "test/support/fake_openai_server.py")
    fake = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fake)  # by path: test/support stays off sys.path (only --cpu puts it there)
    FakeOpenAI = fake.FakeOpenAI  # noqa: N806

    with tempfile.TemporaryDirectory(prefix="probe-bench-") as tmp:
        log, result = Path(tmp) / "requests.jsonl", Path(tmp) / "bench.jsonl"
        server = type("BenchServer", (FakeOpenAI,), {"model": tokenizer_dir, "ttft_s": 0.005, "step_s": 0.0005,
                                                     "request_log": str(log)})
        httpd = ThreadingHTTPServer(("127.0.0.1", 0), server)
        httpd.daemon_threads = True
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        try:
            code, out = run_module("sglang.bench_serving", [
                *BENCH_ARGS, "--tokenizer", tokenizer_dir, "--base-url", f"http://127.0.0.1:{httpd.server_port}",
                "--output-file", str(result)])
        finally:
            httpd.shutdown()
        if code != 0 or not result.exists():
            raise AssertionError(f"python -m sglang.bench_serving: exit {code}, no result: {out[-400:]!r}")
        res = json.loads(result.read_text().splitlines()[-1])
        bodies = [json.loads(line)["body"] for line in log.read_text().splitlines()]
    # one warmup request first (bench_serving caps its output), then the benchmark's
    sent = [(b.get("model"), b.get("stream"), b.get("ignore_eos"), b.get("max_tokens")) for b in bodies]
    if res["completed"] != BENCH_PROMPTS or res["total_output_tokens"] != BENCH_PROMPTS * BENCH_OUTPUT \
            or sent[1:] != [(tokenizer_dir, True, True, BENCH_OUTPUT)] * BENCH_PROMPTS:
        raise AssertionError(f"completed {res['completed']}, {res['total_output_tokens']} output tokens, "
                             f"requests {sent}")
    return {"requests": len(bodies), **{k: res[k] for k in (
        "completed", "total_input_tokens", "total_output_tokens", "output_throughput", "duration")}}


# ---- which distributions the imports came from ---------------------------------------------------------------

def distributions(site: str | None) -> dict[str, Any]:
    by_top = md.packages_distributions()
    used: dict[str, dict[str, Any]] = {}
    for name in sorted({m.split(".", 1)[0] for m in list(sys.modules)}, key=lambda n: (_order(n), n)):
        for dist in by_top.get(name, []):
            if dist in used:
                continue
            try:
                d = md.distribution(dist)
            except md.PackageNotFoundError:
                continue
            where = str(d.locate_file(""))
            used[dist] = {"version": d.version, "module": name, "first_needed_by": FIRST_SEEN.get(name),
                          "from": None if site is None else ("bundle" if where.startswith(site) else "image")}
    return used


def _order(module: str) -> int:
    names = list(dict.fromkeys(FIRST_SEEN.values()))
    return names.index(FIRST_SEEN[module]) if module in FIRST_SEEN else len(names)


def cpu_standins(simulate: str | None) -> None:
    support = REPO / "test" / "support"
    sys.path[:0] = [str(support / "shims"), str(support)]
    if simulate:
        import cuda_sim

        major, minor = (int(x) for x in simulate.split("."))
        cuda_sim.simulate_cuda(capability=(major, minor), device_count=1, name="simulated GPU")
    if importlib.util.find_spec("flashinfer") is None:
        return  # nothing to stand in for: its absence is a finding of the import steps
    import _standin
    import fi_comm

    fi_comm.install().__path__ = []  # a package: its submodules (flashinfer.comm.mnnvl, ...) are stand-ins too
    sys.meta_path.insert(0, _standin._Finder("flashinfer.comm"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("--tokenizer", required=True, help="model directory with the tokenizer files")
    ap.add_argument("--model", help="model directory: also decode a JSON-schema grammar greedily on CPU")
    ap.add_argument("--out", help="also write the JSON summary here")
    ap.add_argument("--bench-serving", action="store_true",
                    help="also python -m sglang.bench_serving: --help, its random-ids dataset, a run against a fake")
    ap.add_argument("--site", help="the bundle's install target (reports bundle vs image per distribution)")
    ap.add_argument("--cpu", action="store_true", help="import-only stand-ins for what needs CUDA at import")
    ap.add_argument("--simulate-cuda", help="MAJOR.MINOR: pretend one GPU of that capability (implies --cpu)")
    a = ap.parse_args(argv)
    if a.cpu or a.simulate_cuda:
        cpu_standins(a.simulate_cuda)
    for m in list(sys.modules):  # what the interpreter (and the stand-ins) had before the first step
        FIRST_SEEN.setdefault(m.split(".", 1)[0], "(before the probe)")
    res: dict[str, Any] = {"python": sys.version.split()[0], "cpu_standins": bool(a.cpu or a.simulate_cuda),
                           "simulated_cuda": a.simulate_cuda, "steps": {}}
    steps = res["steps"]
    for mod in LAUNCH_MODULES + SERVING_MODULES:
        step(f"import {mod}", steps, importlib.import_module, mod)
    step("grammar backend", steps, grammar, a.tokenizer, a.model)
    step("openai client", steps, openai_client)
    if a.bench_serving:
        step("bench_serving --help", steps, bench_help)
        step("bench_serving random-ids dataset", steps, bench_dataset, a.tokenizer)
        step("bench_serving run", steps, bench_run, a.tokenizer)
    res["distributions"] = distributions(str(Path(a.site).resolve()) if a.site else None)
    res["missing_modules"] = sorted({s["missing"] for s in steps.values() if s.get("missing")})
    res["ok"] = all(s["ok"] for s in steps.values())
    text = json.dumps(res, indent=1)
    if a.out:
        Path(a.out).write_text(text + "\n")
    print(json.dumps({k: res[k] for k in ("ok", "missing_modules")} | {
        "failed": {k: v["error"] for k, v in steps.items() if not v["ok"]}}))
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
