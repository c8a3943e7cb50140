"""The hostile requests, one function per case of hostile_receipt.CASES (the names, and their order, are the
receipt's: a CPU test checks that every case is here and nothing else). A case sends its requests to a Target and
returns one Finding per answer (hostile_verdict.judge_reply: a 4xx with a clear message, or a correct answer,
checked against the lab target's ground truth where a 2xx is allowed) plus what it measured. Each is bounded: its
requests have timeouts, its budget (BUDGET_S) is what the suite reserves for it."""

from __future__ import annotations

import ast
import json
import random
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import server_http as http
from hostile_verdict import BUSY, Accept, Finding, admin_finding, judge_reply
from server_checks import Target

from sglang_blackwell.qualify.hostile_receipt import CASES


@dataclass
class CaseResult:
    findings: list[Finding]
    measured: dict[str, Any] = field(default_factory=dict)


Case = Callable[[Target], CaseResult]
REGISTRY: dict[str, Case] = {}
BUDGET_S: dict[str, float] = {}


def case(budget_s: float = 3.0) -> Callable[[Case], Case]:
    def register(fn: Case) -> Case:
        REGISTRY[fn.__name__] = fn
        BUDGET_S[fn.__name__] = budget_s
        return fn
    return register


# ---- what a correct answer is ----------------------------------------------------------------------------

def completion_is_truth(t: Target, ids: list[int], max_tokens: int, n: int = 1) -> Accept:
    """A completions answer to prompt `ids`: n choices, each the greedy ground truth for its completion tokens
    (<= max_tokens, prompt + answer within the context)."""
    def accept(doc: Any) -> str | None:
        try:
            choices, used = doc["choices"], doc["usage"]["completion_tokens"]
        except (TypeError, KeyError):
            return f"not a completion: {str(doc)[:200]}"
        if len(choices) != n:
            return f"{len(choices)} choices, {n} asked"
        per = used // n if n else used
        if per > max_tokens or len(ids) + per > t.context_len:
            return f"{per} tokens per choice: past max_tokens {max_tokens} or the context {t.context_len}"
        if t.truth is None:
            return None
        want = t.truth.text(t.truth.continuation(ids, per))
        bad = [i for i, c in enumerate(choices) if c.get("text") != want]
        return f"choices {bad[:5]} differ from the ground truth {want[:60]!r}" if bad else None
    return accept


def _ids(t: Target, n: int, start: int = 100) -> list[int]:
    """n valid prompt ids from `start` on (within the vocabulary)."""
    span = max(1, min(1000, t.vocab_size - start))
    return [start + (i * 7) % span for i in range(n)]


def _text_ids(t: Target, text: str) -> list[int]:
    return t.truth.prompt_ids(text) if t.truth is not None else []


def _complete(t: Target, body: dict[str, Any], timeout: float = 30.0) -> http.Reply:
    return http.post_json(t.url, "/v1/completions", {"model": t.model, "temperature": 0, **body}, key=t.key,
                          timeout=timeout)


def _chat(t: Target, body: dict[str, Any], timeout: float = 30.0) -> http.Reply:
    return http.post_json(t.url, "/v1/chat/completions", {"model": t.model, "temperature": 0, **body}, key=t.key,
                          timeout=timeout)


def _generate(t: Target, body: dict[str, Any], timeout: float = 30.0) -> http.Reply:
    return http.post_json(t.url, "/generate", body, key=t.key, timeout=timeout)


def _refused(replies: list[http.Reply]) -> CaseResult:
    return CaseResult([judge_reply(r) for r in replies])


SP = {"max_new_tokens": 4, "temperature": 0}


# ---- prompt token ids ------------------------------------------------------------------------------------

@case()
def oov_ids_generate(t: Target) -> CaseResult:
    v = t.vocab_size
    return _refused([_generate(t, {"input_ids": [11, 12, v + 7], "sampling_params": SP}),
                     _generate(t, {"input_ids": [[11, 12], [13, v]], "sampling_params": SP}),
                     _generate(t, {"input_ids": [2**40], "sampling_params": SP})])


@case()
def negative_ids_generate(t: Target) -> CaseResult:
    return _refused([_generate(t, {"input_ids": [11, -1, 12], "sampling_params": SP}),
                     _generate(t, {"input_ids": [[-5]], "sampling_params": SP})])


@case()
def oov_ids_completions(t: Target) -> CaseResult:
    v = t.vocab_size
    return _refused([_complete(t, {"prompt": [11, 12, v + 7], "max_tokens": 4}),
                     _complete(t, {"prompt": [[11], [v * 10]], "max_tokens": 4})])


@case()
def negative_ids_completions(t: Target) -> CaseResult:
    return _refused([_complete(t, {"prompt": [11, -1], "max_tokens": 4}),
                     _complete(t, {"prompt": [[-3]], "max_tokens": 4})])


# ---- admin endpoints -------------------------------------------------------------------------------------

ADMIN_LEVELS = ("ADMIN_OPTIONAL", "ADMIN_FORCE")
ROUTE_DECORATORS = {"get": "GET", "post": "POST", "put": "PUT", "delete": "DELETE", "api_route": None}


def admin_routes(source: str) -> list[tuple[str, str]]:
    """(method, path) of every route in an sglang HTTP server module whose endpoint is marked
    @auth_level(AuthLevel.ADMIN_OPTIONAL) (or ADMIN_FORCE), also those defined under an `if`; POST where a route
    takes several methods."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        level = next((ast.unparse(d.args[0]).rsplit(".", 1)[-1] for d in node.decorator_list
                      if isinstance(d, ast.Call) and ast.unparse(d.func) == "auth_level" and d.args), None)
        if level not in ADMIN_LEVELS:
            continue
        for d in node.decorator_list:
            if not (isinstance(d, ast.Call) and isinstance(d.func, ast.Attribute)
                    and d.func.attr in ROUTE_DECORATORS and d.args and isinstance(d.args[0], ast.Constant)):
                continue
            method = ROUTE_DECORATORS[d.func.attr]
            if method is None:
                kw = next((k.value for k in d.keywords if k.arg == "methods"), None)
                methods = [e.value for e in kw.elts] if isinstance(kw, (ast.List, ast.Tuple)) else ["GET"]
                method = "POST" if "POST" in methods else methods[0]
            out.append((method, str(d.args[0].value)))
    return out


def installed_admin_routes() -> tuple[list[tuple[str, str]], str]:
    """admin_routes of the installed sglang's HTTP server (found without importing it), and its path."""
    import importlib.util

    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        return [], "sglang not installed"
    path = Path(list(spec.submodule_search_locations)[0]) / "srt" / "entrypoints" / "http_server.py"
    if not path.is_file():
        return [], f"{path}: missing"
    return admin_routes(path.read_text()), str(path)


def admin_bodies(out: Path) -> dict[str, dict[str, Any]]:
    """Bodies that would leave a trace if an admin endpoint took them (a directory created, a model path read)."""
    return {"/start_profile": {"output_dir": str(out / "admin-probe-profile"), "num_steps": 1},
            "/update_weights_from_disk": {"model_path": str(out / "admin-probe-weights")},
            "/load_lora_adapter": {"lora_name": "admin-probe", "lora_path": str(out / "admin-probe-lora")},
            "/configure_logging": {"log_requests": True, "dump_requests_folder": str(out / "admin-probe-dump")},
            "/set_internal_state": {"server_args": {"max_running_requests": 1}}}


ADMIN_TRACES = ("admin-probe-profile", "admin-probe-dump")  # directories an accepted call would create


@case(budget_s=8.0)
def admin_endpoints_unkeyed(t: Target) -> CaseResult:
    """Every admin endpoint of the installed sglang called with no key and with the API key (the key every API user
    holds): the server listens on 0.0.0.0 with --api-key and no --admin-api-key, so each must be 401/403 (P12),
    and nothing may change: no trace directory, the same weights (the reference text, checked after every case)."""
    routes, where = installed_admin_routes()
    bodies = admin_bodies(t.out)
    findings: list[Finding] = []
    accepted: list[str] = []
    for method, path in routes:
        concrete = path.replace("{method}", "probe").replace("{", "").replace("}", "")
        body = json.dumps(bodies.get(path, {})).encode() if method != "GET" else None
        for key in (None, t.key):
            r = http.request(t.url, method, concrete, body, key=key, timeout=10.0)
            f = admin_finding(r)
            f.what = f"{method} {path} ({'API key' if key else 'no key'}): {f.what}"
            findings.append(f)
            if r.status is not None and 200 <= r.status < 300:
                accepted.append(f"{method} {path}")
    if not routes:
        findings.append(Finding(False, f"no admin endpoint found in {where}", None, ""))
    for name in ADMIN_TRACES:
        if (t.out / name).exists():
            findings.append(Finding(False, f"{t.out / name} exists: an admin call had an effect", None, ""))
    if accepted:  # undo what can be undone, so that the cases after this one measure a working server
        for path in ("/continue_generation", "/resume_memory_occupation"):
            http.request(t.url, "POST", path, b"{}", key=t.key, timeout=10.0)
    return CaseResult(findings, {"routes": len(routes), "source": where, "admin_accepted": len(accepted),
                                 "accepted": accepted})


# ---- prompt and output lengths ---------------------------------------------------------------------------

@case()
def empty_prompt(t: Target) -> CaseResult:
    ids = _text_ids(t, "")
    text_ok = completion_is_truth(t, ids, 4) if ids else None  # an empty encoding has nothing to continue
    return CaseResult([judge_reply(_complete(t, {"prompt": "", "max_tokens": 4}), accept=text_ok),
                       judge_reply(_complete(t, {"prompt": [], "max_tokens": 4})),
                       judge_reply(_generate(t, {"input_ids": [], "sampling_params": SP})),
                       judge_reply(_generate(t, {"text": "", "sampling_params": SP}),
                                   accept=(lambda d: None) if ids else None)])


@case()
def prompt_equals_context(t: Target) -> CaseResult:
    ids = _ids(t, t.context_len)
    return CaseResult([judge_reply(_complete(t, {"prompt": ids, "max_tokens": 1}),
                                   accept=completion_is_truth(t, ids, 1)),
                       judge_reply(_generate(t, {"input_ids": ids, "sampling_params": {**SP, "max_new_tokens": 1}}),
                                   accept=lambda d: None)])


@case()
def prompt_over_context(t: Target) -> CaseResult:
    return _refused([_complete(t, {"prompt": _ids(t, t.context_len + 16), "max_tokens": 4}),
                     _complete(t, {"prompt": "hello " * (t.context_len * 2), "max_tokens": 4}),
                     _generate(t, {"input_ids": _ids(t, t.context_len * 4), "sampling_params": SP})])


@case(budget_s=8.0)
def max_tokens_over_context(t: Target) -> CaseResult:
    """max_tokens 4x the context for a prompt 40 tokens short of it, through completions and /generate: refused, or
    an answer that ends at the context (short: 40 tokens at most)."""
    ids = _ids(t, t.context_len - 40)
    r = _complete(t, {"prompt": ids, "max_tokens": t.context_len * 4}, timeout=60.0)
    g = _generate(t, {"input_ids": ids, "sampling_params": {"max_new_tokens": t.context_len * 4,
                                                            "temperature": 0}}, timeout=60.0)
    return CaseResult([judge_reply(r, accept=completion_is_truth(t, ids, t.context_len * 4)),
                       judge_reply(g, accept=lambda d: _within_context(d, len(ids), t.context_len))])


def _within_context(doc: Any, prompt_len: int, context_len: int) -> str | None:
    try:
        n = doc["meta_info"]["completion_tokens"]
    except (TypeError, KeyError):
        return f"no meta_info.completion_tokens in {str(doc)[:200]}"
    return None if prompt_len + n <= context_len else f"{n} tokens after {prompt_len}: past the context"


@case(budget_s=5.0)
def n_64(t: Target) -> CaseResult:
    ids = _ids(t, 8)
    r = _complete(t, {"prompt": ids, "max_tokens": 8, "n": 64}, timeout=60.0)
    return CaseResult([judge_reply(r, accept=completion_is_truth(t, ids, 8, n=64))])


# ---- logprobs --------------------------------------------------------------------------------------------

def _top_counts(doc: Any, k: int) -> str | None:
    """A completions answer with logprobs=k: 1..k alternatives per token, the chosen token among the best."""
    try:
        lp = doc["choices"][0]["logprobs"]
        tops = lp["top_logprobs"]
    except (TypeError, KeyError, IndexError):
        return f"no logprobs in {str(doc)[:200]}"
    bad = [i for i, top in enumerate(tops) if not 1 <= len(top or {}) <= k]
    return f"tokens {bad[:5]}: not 1..{k} alternatives" if bad else None


def _chat_top_counts(doc: Any, k: int) -> str | None:
    try:
        content = doc["choices"][0]["logprobs"]["content"]
    except (TypeError, KeyError, IndexError):
        return f"no logprobs in {str(doc)[:200]}"
    bad = [i for i, c in enumerate(content) if len(c.get("top_logprobs") or []) != k]
    return f"tokens {bad[:5]}: not {k} alternatives" if bad else None


def _generate_top_count(doc: Any, k: int) -> str | None:
    try:
        tops = doc["meta_info"]["output_top_logprobs"]
    except (TypeError, KeyError):
        return f"no output_top_logprobs in {str(doc)[:200]}"
    bad = [i for i, top in enumerate(tops) if len(top or []) != k]
    return f"tokens {bad[:5]}: not {k} alternatives" if bad else None


CHAT = [{"role": "user", "content": "Say hi."}]


@case(budget_s=5.0)
def logprobs_at_limits(t: Target) -> CaseResult:
    """OpenAI's limits (completions logprobs 5, chat top_logprobs 20) and the model's (top_logprobs_num = the
    vocabulary size: P10's bound)."""
    v = t.vocab_size
    return CaseResult([
        judge_reply(_complete(t, {"prompt": _ids(t, 8), "max_tokens": 4, "logprobs": 5}),
                    accept=lambda d: _top_counts(d, 5)),
        judge_reply(_chat(t, {"messages": CHAT, "max_tokens": 4, "logprobs": True, "top_logprobs": 20}),
                    accept=lambda d: _chat_top_counts(d, 20)),
        judge_reply(_generate(t, {"input_ids": _ids(t, 8), "return_logprob": True, "top_logprobs_num": v,
                                  "sampling_params": {**SP, "max_new_tokens": 1}}, timeout=60.0),
                    accept=lambda d: _generate_top_count(d, v))])


@case(budget_s=4.0)
def logprobs_past_limits(t: Target) -> CaseResult:
    """Past the model's limit (vocabulary + 1, and negative) must be refused; past OpenAI's (21 alternatives in
    chat) may be refused or answered with 21."""
    v = t.vocab_size
    gen = {"input_ids": _ids(t, 8), "return_logprob": True, "sampling_params": SP}
    return CaseResult([
        judge_reply(_complete(t, {"prompt": _ids(t, 8), "max_tokens": 4, "logprobs": v + 1})),
        judge_reply(_chat(t, {"messages": CHAT, "max_tokens": 4, "logprobs": True, "top_logprobs": v + 1})),
        judge_reply(_generate(t, {**gen, "top_logprobs_num": v + 1})),
        judge_reply(_generate(t, {**gen, "top_logprobs_num": -1})),
        judge_reply(_chat(t, {"messages": CHAT, "max_tokens": 4, "logprobs": True, "top_logprobs": 21}),
                    accept=lambda d: _chat_top_counts(d, 21))])


# ---- sampling parameters ---------------------------------------------------------------------------------

@case(budget_s=6.0)
def stop_strings_10k(t: Target) -> CaseResult:
    ids = _ids(t, 8)
    stops = [f"zq{i}qz" for i in range(10_000)]  # none occurs in the greedy answer
    r = _complete(t, {"prompt": ids, "max_tokens": 16, "stop": stops}, timeout=60.0)
    return CaseResult([judge_reply(r, accept=completion_is_truth(t, ids, 16))])


@case()
def logit_bias_bad_keys(t: Target) -> CaseResult:
    v = t.vocab_size
    return _refused([_complete(t, {"prompt": _ids(t, 4), "max_tokens": 4, "logit_bias": bias})
                     for bias in ({"-1": 5}, {str(v + 10): 5}, {"abc": 5}, {str(2**70): 1})])


@case(budget_s=4.0)
def json_schema_invalid(t: Target) -> CaseResult:
    fmt = {"type": "json_schema", "json_schema": {"name": "bad", "schema": {"type": 12, "properties": []}}}
    return _refused([_chat(t, {"messages": CHAT, "max_tokens": 8, "response_format": fmt}),
                     _generate(t, {"text": "x", "sampling_params": {**SP, "json_schema": "{not json"}})])


@case(budget_s=4.0)
def regex_invalid(t: Target) -> CaseResult:
    return _refused([_generate(t, {"text": "x", "sampling_params": {**SP, "regex": rx}}) for rx in ("([a-", "a)")])


@case(budget_s=4.0)
def ebnf_invalid(t: Target) -> CaseResult:
    return _refused([_generate(t, {"text": "x", "sampling_params": {**SP, "ebnf": g}})
                     for g in ("root ::= (", "root ::= undefined_rule")])


# ---- bodies ----------------------------------------------------------------------------------------------

DEPTH = 100_000


@case(budget_s=5.0)
def json_100k_deep(t: Target) -> CaseResult:
    deep = b"[" * DEPTH + b"]" * DEPTH
    model = json.dumps(t.model).encode()
    return _refused([
        http.request(t.url, "POST", "/v1/completions", b'{"model": ' + model + b', "prompt": ' + deep + b"}",
                     key=t.key, timeout=30.0),
        http.request(t.url, "POST", "/generate", b'{"text": "x", "sampling_params": ' + deep + b"}", key=t.key,
                     timeout=30.0)])


BIG = 64 << 20


@case(budget_s=10.0)
def body_64mib(t: Target) -> CaseResult:
    """64 MiB in a field the server carries but does not tokenize (OpenAI's `user`): a 413 or another 4xx, or the
    right answer."""
    ids = _ids(t, 4)
    body = json.dumps({"model": t.model, "prompt": ids, "max_tokens": 4, "temperature": 0,
                       "user": "x" * BIG}).encode()
    r = http.request(t.url, "POST", "/v1/completions", body, key=t.key, timeout=60.0)
    return CaseResult([judge_reply(r, accept=completion_is_truth(t, ids, 4))], {"body_bytes": len(body)})


@case()
def body_invalid_utf8(t: Target) -> CaseResult:
    model = json.dumps(t.model).encode()
    bad = b"\xff\xfe\xc3\x28 \xed\xa0\x80"
    return _refused([
        http.request(t.url, "POST", "/v1/completions",
                     b'{"model": ' + model + b', "prompt": "' + bad + b'", "max_tokens": 4}', key=t.key),
        http.request(t.url, "POST", "/v1/chat/completions", b'{"model": ' + model
                     + b', "messages": [{"role": "user", "content": "' + bad + b'"}], "max_tokens": 4}', key=t.key),
        http.request(t.url, "POST", "/generate", b'{"text": "' + bad + b'", "sampling_params": {}}', key=t.key)])


# ---- many clients ----------------------------------------------------------------------------------------

def _grouped(replies: list[http.Reply], judge: Callable[[http.Reply], Finding]) -> tuple[list[Finding], dict]:
    """One Finding per kind of outcome (the first of its kind), and how many of each: 200 clients need not be
    200 findings."""
    findings: dict[str, Finding] = {}
    counts: Counter[str] = Counter()
    for r in replies:
        f = judge(r)
        kind = f"{f.ok}:{f.status}:{f.what[:40]}"
        counts[f"{f.status if f.status is not None else 'none'} {'ok' if f.ok else 'wrong'}"] += 1
        if kind not in findings:
            findings[kind] = f
    return list(findings.values()), dict(counts)


def _cut_judge(r: http.Reply) -> Finding:
    """A request its client cut: no answer before the cut, or any answer below 500 (its body is not read: a 4xx
    says no more than its status here), or a busy one, is as due; a 5xx other than busy is not."""
    st = r.status
    if st is None or st < 500 or st in BUSY:
        return Finding(True, f"{st}: cut by the client", st, r.message() if st is not None else "")
    return Finding(False, f"{st}: {r.message() or 'no message'}", st, r.message())


@case(budget_s=15.0)
def stream_disconnect_200(t: Target) -> CaseResult:
    """200 clients stream a long answer each (up to the context: it would not end within the KV pool check's wait,
    so a request the server failed to abort shows as a leak) and hang up after a few events."""
    def one(i: int) -> http.Reply:
        return http.open_and_cut(t.url, "/v1/completions", {"model": t.model, "prompt": _ids(t, 16, 100 + i),
                                                           "max_tokens": t.context_len - 64, "temperature": 0,
                                                           "stream": True},
                                 key=t.key, read_bytes=400, cut_after_s=10.0)
    with ThreadPoolExecutor(200) as pool:
        replies = list(pool.map(one, range(200)))
    findings, counts = _grouped(replies, _cut_judge)
    return CaseResult(findings, {"outcomes": counts})


@case(budget_s=12.0)
def abort_storm(t: Target) -> CaseResult:
    """256 requests (long and short prompts, streamed and not, /generate and completions) cut by their clients at
    random moments in their first 300 ms: before their prefill, during it, during decode."""
    rng = random.Random(31)
    plan = [(rng.choice((8, 512, t.context_len - 64)), rng.uniform(0.01, 0.3)) for _ in range(256)]

    def one(i: int) -> http.Reply:
        n, cut = plan[i]
        out = t.context_len - n - 8  # to the context's end: a request not aborted is still running at the check
        if i % 2:
            path, body = "/generate", {"input_ids": _ids(t, n, 100 + i), "stream": bool(i % 4 == 1),
                                       "sampling_params": {"max_new_tokens": out, "temperature": 0}}
        else:
            path, body = "/v1/completions", {"model": t.model, "prompt": _ids(t, n, 100 + i), "max_tokens": out,
                                             "temperature": 0, "stream": bool(i % 4 == 0)}
        return http.open_and_cut(t.url, path, body, key=t.key, read_bytes=0, cut_after_s=cut)
    with ThreadPoolExecutor(256) as pool:
        replies = list(pool.map(one, range(256)))
    findings, counts = _grouped(replies, _cut_judge)
    return CaseResult(findings, {"outcomes": counts})


@case(budget_s=15.0)
def overload_c256(t: Target) -> CaseResult:
    """256 concurrent requests, past --max-running-requests + --max-queued-requests: each the right answer or a
    busy answer with a message (429/503: "The request queue is full.")."""
    def one(i: int) -> tuple[http.Reply, list[int]]:
        ids = _ids(t, 12, 100 + i)
        return _complete(t, {"prompt": ids, "max_tokens": 32}, timeout=90.0), ids
    with ThreadPoolExecutor(256) as pool:
        done = list(pool.map(one, range(256)))
    replies = [r for r, _ in done]
    accepts = {id(r): completion_is_truth(t, ids, 32) for r, ids in done}
    findings, counts = _grouped(replies, lambda r: judge_reply(r, accept=accepts[id(r)], busy_ok=True))
    busy = sum(1 for r in replies if r.status in (429, 503))
    return CaseResult(findings, {"outcomes": counts, "busy": busy,
                                 "limit_reached": busy > 0})


assert tuple(REGISTRY) == CASES, f"hostile_cases.py and hostile_receipt.CASES disagree: {tuple(REGISTRY)}"
