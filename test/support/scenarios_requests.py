"""Upstream's request path on CPU, for P10 (request fields that index GPU tensors) and P12 (admin endpoints):
sglang's own FastAPI app (entrypoints/http_server.py) served by uvicorn on loopback, in front of a real
TokenizerManager built from a tiny model config this module writes (no weights: `skip_tokenizer_init`, so
prompts are token ids), and a stub scheduler: a zmq PULL socket connected where the real scheduler would read.

A request either comes back from the HTTP layer (its status and body) or reaches the scheduler (the stub
receives the tokenized request first): whichever happens first is the case's outcome, so nothing here waits
on a clock except the bound on a request that does neither.
"""

from __future__ import annotations

import importlib
import json
import queue
import socket
import sys
import tempfile
import threading
import time
import types
from pathlib import Path
from typing import Any

VOCAB_SIZE = 1000
HIDDEN_SIZE = 64
BOUND_S = 60.0  # a request that neither answers nor reaches the scheduler (a hang) is reported as such

CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": VOCAB_SIZE,
          "hidden_size": HIDDEN_SIZE, "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4,
          "num_key_value_heads": 4, "max_position_embeddings": 2048, "torch_dtype": "float32", "bos_token_id": 1,
          "eos_token_id": 2}


HTTP_SERVER = "sglang.srt.entrypoints.http_server"


def import_http_server():
    """sglang.srt.entrypoints.http_server. 0.5.23 imports xgrammar at module level (StructuralTag and the
    structural-tag formats, in function_call/, for type annotations and format builders), and no xgrammar
    release installs beside this test environment's apache-tvm-ffi pin (flashinfer's JIT) and transformers 5:
    where that import is what fails, and only then, `xgrammar` and `xgrammar.structural_tag` stand in, every name
    of theirs an empty pydantic model (these tests send no structural tags or grammars). 0.5.9 and 0.5.14 import
    xgrammar inside try/except and keep their own fallback."""
    _flashinfer_comm_standin()
    try:
        return importlib.import_module(HTTP_SERVER)
    except ModuleNotFoundError as e:
        if e.name is None or e.name.split(".")[0] != "xgrammar":
            raise
    for name in ("xgrammar", "xgrammar.structural_tag"):
        sys.modules[name] = _Placeholders(name)
    sys.modules["xgrammar"].structural_tag = sys.modules["xgrammar.structural_tag"]
    return importlib.import_module(HTTP_SERVER)


class _Placeholders(types.ModuleType):
    """A stand-in module: each attribute asked for is a new empty pydantic model of that name."""

    def __init__(self, name: str):
        super().__init__(name, "stand-in (support/scenarios_requests.import_http_server)")
        self.__path__: list[str] = []

    def __getattr__(self, key: str):
        if key.startswith("__"):
            raise AttributeError(key)
        import pydantic

        model = type(key, (pydantic.BaseModel,), {"model_config": pydantic.ConfigDict(extra="allow"),
                                                  "__module__": self.__name__})
        setattr(self, key, model)
        return model


def _flashinfer_comm_standin() -> None:
    """The scheduler module the TokenizerManager imports reaches flashinfer.comm (MoE token dispatcher), which
    loads libcudart at import: where flashinfer is on the path, support/fi_comm.py's stand-in takes its place
    (the request path calls none of it)."""
    if "flashinfer.comm" in sys.modules:
        return
    try:
        import flashinfer  # noqa: F401
    except ImportError:
        return
    from support import fi_comm

    fi_comm.install()


def tokenizer_manager(**server_args: Any):
    """(ServerArgs, PortArgs, a real TokenizerManager) for the tiny model, published as the process entry of
    0.5.23 publishes it."""
    _flashinfer_comm_standin()
    from sglang.srt.server_args import PortArgs, ServerArgs

    model = Path(tempfile.mkdtemp(prefix="sglb-tiny-model-"))
    (model / "config.json").write_text(json.dumps(CONFIG))
    args = ServerArgs(**{"model_path": str(model), "skip_tokenizer_init": True, "device": "cpu",
                         "disable_radix_cache": True, **server_args})
    port_args = PortArgs.init_new(args)
    try:  # 0.5.23: the process entry publishes the config before a TokenizerManager may be built
        from sglang.srt.runtime_context import publish
    except ImportError:
        pass
    else:
        publish(args, role="tokenizer")
    from sglang.srt.managers.tokenizer_manager import TokenizerManager

    tm = TokenizerManager(args, port_args)
    _KEEP.append(tm)
    return args, port_args, tm


# Every TokenizerManager made here stays referenced until the process ends: a garbage-collected one's zmq context
# terminates in __del__, which blocks on its sockets (lingering), wherever in the probe the collection happens.
_KEEP: list = []


# what a server sends its scheduler by itself, not for a request: 0.5.23's HTTP server freezes the GC once it is up
# (FreezeGCReq, after the skipped warm-up), at a time of its own; counted as the request's, it made a refused admin
# call look accepted (a race the P12 probe lost on a fast machine)
SERVER_INITIATED = frozenset({"FreezeGCReq"})


class Client:
    """Requests to a server on a loopback port, and the stub scheduler where its TokenizerManager sends them."""

    def __init__(self, port_args, port: int):
        import zmq

        self.port = port
        self.scheduler = zmq.Context().socket(zmq.PULL)
        self.scheduler.connect(port_args.scheduler_input_ipc_name)

    def wait_up(self) -> None:
        """Until the server answers /model_info (bounded by BOUND_S)."""
        import requests

        deadline = time.monotonic() + BOUND_S
        while time.monotonic() < deadline:
            try:
                if requests.get(f"http://127.0.0.1:{self.port}/model_info", timeout=BOUND_S).status_code < 500:
                    return
            except requests.exceptions.ConnectionError:
                time.sleep(0.05)
        raise RuntimeError(f"no server on port {self.port}")

    def send(self, path: str, body: dict, headers: dict | None = None, method: str = "POST") -> dict:
        """The outcome of one request: {"at": "scheduler", "got": <type>} or {"at": "http", "status", "body"}."""
        import requests

        answers: queue.Queue = queue.Queue()

        def client() -> None:
            try:
                r = requests.request(method, f"http://127.0.0.1:{self.port}{path}", json=body, headers=headers or {},
                                     timeout=BOUND_S)
                answers.put({"at": "http", "status": r.status_code, "body": r.text[:2000]})
            except Exception as e:  # the bound passed, or the connection broke
                answers.put({"at": "client", "error": repr(e)[:300]})

        threading.Thread(target=client, daemon=True).start()
        while True:
            if self.scheduler.poll(10):
                got = type(self.scheduler.recv_pyobj()).__name__
                if got in SERVER_INITIATED:
                    continue
                self._drain()
                return {"at": "scheduler", "got": got}
            try:
                return answers.get_nowait()
            except queue.Empty:
                pass

    def _drain(self) -> None:
        while self.scheduler.poll(50):
            self.scheduler.recv_pyobj()


class World(Client):
    """One TokenizerManager + sglang's app (routes and handlers, no middleware) served by uvicorn on a loopback
    port + the stub scheduler."""

    def __init__(self, **server_args: Any):
        import uvicorn

        self.server_args, port_args, self.tokenizer_manager = tokenizer_manager(**server_args)

        http_server = import_http_server()
        from sglang.srt.entrypoints.openai.serving_completions import OpenAIServingCompletion

        self.http_server = http_server
        templates = _template_manager()
        http_server.set_global_state(http_server._GlobalState(
            tokenizer_manager=self.tokenizer_manager, template_manager=templates, scheduler_info={}))
        http_server.app.state.openai_serving_completion = OpenAIServingCompletion(self.tokenizer_manager, templates)
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        super().__init__(port_args, sock.getsockname()[1])
        self._server = uvicorn.Server(uvicorn.Config(http_server.app, log_level="critical", lifespan="off"))
        threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, daemon=True).start()
        deadline = time.monotonic() + BOUND_S
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)

def _template_manager():
    try:
        from sglang.srt.managers.template_manager import TemplateManager
    except ImportError:  # 0.5.23 moved it
        from sglang.srt.parser.template_manager import TemplateManager
    return TemplateManager()


def message(outcome: dict) -> str:
    """The error text of an HTTP answer, whatever envelope the line uses ({"message"}, {"error": {"message"}},
    {"detail"})."""
    try:
        body = json.loads(outcome.get("body") or "")
    except ValueError:
        return outcome.get("body") or ""
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and "message" in err:
            return str(err["message"])
        for key in ("message", "detail", "error"):
            if key in body:
                return str(body[key])
    return json.dumps(body)


GREEDY = {"max_new_tokens": 1, "temperature": 0}
# a 400, whichever layer says it: the request model (pydantic: its message names the field, the position and the
# value; 0.5.23's JSON reader for /generate says "invalid type: boolean") or the TokenizerManager
ANY_400 = ""

# P10: (name, path, body, expected). expected is "scheduler" (the request is served) or the text a 400 names.
# The min_new_tokens penalizer's scatter is what an out-of-range stop token id breaks on the GPU; these cases
# leave min_new_tokens out because without a tokenizer upstream refuses it (0.5.14 and later): the check does not
# depend on it.
FIELD_CASES = [
    ("prompt in range", "/generate", {"input_ids": [0, 5, VOCAB_SIZE - 1], "sampling_params": GREEDY}, "scheduler"),
    ("prompt id >= vocab", "/generate", {"input_ids": [1, VOCAB_SIZE + 4000, 3], "sampling_params": GREEDY},
     f"Token id {VOCAB_SIZE + 4000} at position 1 of the prompt is out of vocabulary"),
    ("prompt id == vocab", "/generate", {"input_ids": [1, 2, VOCAB_SIZE], "sampling_params": GREEDY},
     f"Token id {VOCAB_SIZE} at position 2 of the prompt is out of vocabulary"),
    ("prompt id negative", "/generate", {"input_ids": [-3, 2], "sampling_params": GREEDY},
     "Token id -3 at position 0 of the prompt is out of vocabulary"),
    ("batch: second prompt bad", "/generate", {"input_ids": [[1, 2], [3, 4, VOCAB_SIZE]], "sampling_params": GREEDY},
     f"Token id {VOCAB_SIZE} at position 2 of prompt 1 is out of vocabulary"),
    ("batch: empty prompt", "/generate", {"input_ids": [[1, 2], []], "sampling_params": GREEDY},
     "prompt 1 of the batch is empty"),
    ("prompt id beyond int64", "/generate", {"input_ids": [1, 2**70], "sampling_params": GREEDY}, ANY_400),
    ("prompt id a bool", "/generate", {"input_ids": [1, True, 3], "sampling_params": GREEDY}, ANY_400),
    ("prompt id a float", "/generate", {"input_ids": [1, 2, 2.5], "sampling_params": GREEDY}, ANY_400),
    ("completions: prompt in range", "/v1/completions", {"model": "m", "prompt": [1, 2, 3], "max_tokens": 1},
     "scheduler"),
    ("completions: prompt id >= vocab", "/v1/completions",
     {"model": "m", "prompt": [1, VOCAB_SIZE + 1], "max_tokens": 1},
     f"Token id {VOCAB_SIZE + 1} at position 1 of the prompt is out of vocabulary"),
    ("completions: batch, second prompt negative", "/v1/completions",
     {"model": "m", "prompt": [[1], [2, 3, -1]], "max_tokens": 1},
     "Token id -1 at position 2 of prompt 1 is out of vocabulary"),
    ("completions: prompt id a bool", "/v1/completions", {"model": "m", "prompt": [1, True], "max_tokens": 1},
     ANY_400),
    ("stop_token_ids in range", "/generate",
     {"input_ids": [1, 2], "sampling_params": {**GREEDY, "stop_token_ids": [VOCAB_SIZE - 1]}},
     "scheduler"),
    ("stop_token_ids >= vocab", "/generate",
     {"input_ids": [1, 2], "sampling_params": {**GREEDY, "stop_token_ids": [VOCAB_SIZE + 7]}},
     f"stop_token_ids must be token ids in [0, {VOCAB_SIZE - 1}], got {VOCAB_SIZE + 7}"),
    ("stop_token_ids negative", "/generate",
     {"input_ids": [1, 2], "sampling_params": {**GREEDY, "stop_token_ids": [-2]}},
     f"stop_token_ids must be token ids in [0, {VOCAB_SIZE - 1}], got -2"),
    ("top_logprobs_num == vocab", "/generate",
     {"input_ids": [1, 2], "sampling_params": GREEDY, "return_logprob": True, "top_logprobs_num": VOCAB_SIZE},
     "scheduler"),
    ("top_logprobs_num > vocab", "/generate",
     {"input_ids": [1, 2], "sampling_params": GREEDY, "return_logprob": True, "top_logprobs_num": VOCAB_SIZE + 1},
     f"top_logprobs_num must be an integer in [0, {VOCAB_SIZE}]"),
    ("top_logprobs_num negative", "/generate",
     {"input_ids": [1, 2], "sampling_params": GREEDY, "return_logprob": True, "top_logprobs_num": -1},
     f"top_logprobs_num must be an integer in [0, {VOCAB_SIZE}]"),
    ("token_ids_logprob >= vocab", "/generate",
     {"input_ids": [1, 2], "sampling_params": GREEDY, "return_logprob": True, "token_ids_logprob": [3, VOCAB_SIZE]},
     str(VOCAB_SIZE)),
    ("logit_bias key >= vocab", "/generate",
     {"input_ids": [1, 2], "sampling_params": {**GREEDY, "logit_bias": {str(VOCAB_SIZE): 1.0}}}, str(VOCAB_SIZE)),
    ("input_embeds rows of the hidden size", "/generate",
     {"input_embeds": [[0.0] * HIDDEN_SIZE] * 2, "sampling_params": GREEDY}, "scheduler"),
    ("input_embeds rows of another size", "/generate",
     {"input_embeds": [[0.0] * HIDDEN_SIZE, [0.0] * (HIDDEN_SIZE - 1)], "sampling_params": GREEDY},
     f"input_embeds: row 1 has {HIDDEN_SIZE - 1} values; the model's hidden size is {HIDDEN_SIZE}"),
]


def field_cases() -> list[dict]:
    """Every FIELD_CASES request against one World: its outcome and the error text, if any."""
    world = World()
    out = []
    for name, path, body, expected in FIELD_CASES:
        got = world.send(path, body)
        out.append({"name": name, "expected": expected, "outcome": got,
                    "message": message(got) if got["at"] == "http" else None})
    return out
