"""A real HTTP client for `bench eagle3`, run as a closed loop at a given concurrency, over one of three APIs
([workload] api):

- "completions": streamed POST /v1/completions {model, prompt, max_tokens, temperature 0, ignore_eos, stream,
  stream_options.include_usage}; the prompt is the text (or the token ids).
- "chat": streamed POST /v1/chat/completions, the same with messages = [{"role": "user", "content": text}]
  (the server applies the model's chat template).
- "generate": SGLang's native POST /generate {text | input_ids, sampling_params {max_new_tokens,
  temperature 0, ignore_eos}, stream}, streamed or not (the tokenizer-less lab configs).

Every request is greedy with ignore_eos (SGLang and vLLM take it as an extra body field) and asks for exactly
the workload's output length; a request that produced fewer tokens fails its level. Token counts come from the
server (usage.completion_tokens, requested with stream_options.include_usage; meta_info.completion_tokens for
/generate), never from counting chunks. Every request keeps to the transport's bounds (transport.LIMITS: first
byte, idle, total; the size caps; the run's --deadline-s) and a reply that is not what the API says fails with
the URL and the field at fault.

Timing, time.perf_counter() per chunk as it arrives:
- TTFT: from sending the request to the first chunk that carries output (completions: a non-empty
  choices[].text; chat: a non-empty delta content, reasoning_content, reasoning or tool_calls, so the role-only
  first chunk does not count; /generate: more output tokens than the chunk before).
- ITL (inter-token latency): the gaps between consecutive output-carrying chunks of a request. A chunk may
  carry several tokens (a speculative server streams the tokens one verify step accepted together), so ITL is
  per chunk gap, not per token: on a speculative server it is about one draft+verify round.
- TPOT (time per output token): (e2e - TTFT) / (completion_tokens - 1) per request.
- e2e: from sending the request to the end of the stream.
Percentiles (p50, p99) are stats.percentile (linear interpolation); ITL percentiles pool the gaps of all
requests of a level, TTFT/TPOT/e2e percentiles are over the requests. Non-streamed /generate windows take TTFT
from `ttft_probe` (streamed requests on the idle server).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
import urllib.error
from collections.abc import Sequence
from dataclasses import dataclass
from http.client import HTTPException
from typing import Any

from ...patchset.plural import counted
from . import transport
from .config_workload import Prompt
from .stats import median, percentile
from .transport import http_json, post_request, sse_events

OPENAI_APIS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
CHAT_OUTPUT_FIELDS = ("content", "reasoning_content", "reasoning", "tool_calls")


class RequestError(RuntimeError):
    pass


@dataclass(frozen=True)
class Endpoint:
    url: str
    api: str  # "completions" | "chat" | "generate"
    model: str | None = None  # the id GET /v1/models lists (the OpenAI APIs need it)
    stream: bool = True  # /generate only: the OpenAI APIs always stream

    @property
    def path(self) -> str:
        return OPENAI_APIS.get(self.api, "/generate")


@dataclass
class RequestResult:
    e2e_s: float
    ttft_s: float | None  # streamed requests only
    output_tokens: int
    verify_ct: int | None  # spec_verify_ct from /generate meta_info (speculative SGLang servers)
    output_ids: list[int] | None = None
    chunk_s: list[float] | None = None  # arrival of each output-carrying chunk, seconds after sending
    output_digest: str | None = None  # output_digest() of what the request produced (the arms' outputs compared)


def output_digest(output: str | Sequence[int]) -> str:
    """The first 16 hex digits of the sha256 of a request's output: its text (the OpenAI APIs, the text pieces
    of the stream joined), or its token ids as a JSON list (/generate's output_ids). Two greedy requests with
    the same prompt on servers of the same model produced the same output exactly when their digests agree
    (64 bits: a collision among a receipt's few thousand requests has odds below 1e-12)."""
    data = output if isinstance(output, str) else json.dumps([int(i) for i in output])
    return hashlib.sha256(data.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def model_id(url: str, preferred: str | None = None, timeout: float = 30.0) -> str:
    """The model id GET /v1/models lists: the only one, or `preferred` among several."""
    try:
        listed = http_json(url + "/v1/models", timeout=timeout)
    except transport.Redirected as e:
        raise RequestError(f"GET {url}/v1/models: {e}") from None
    except urllib.error.HTTPError as e:
        raise RequestError(f"GET {url}/v1/models: HTTP {e.code}") from None
    except (transport.Timeout, transport.TooLarge) as e:  # they name the request
        raise RequestError(str(e)) from None
    except (OSError, ValueError, HTTPException) as e:
        raise RequestError(f"GET {url}/v1/models: {type(e).__name__}: {e}") from None
    if not isinstance(listed, dict):
        raise RequestError(f"GET {url}/v1/models: the answer is {_kind(listed)}, expected a JSON object with a "
                           f"data list: {json.dumps(listed)[:200]}")
    data = listed.get("data", [])
    if not isinstance(data, list):
        raise RequestError(f"GET {url}/v1/models: field data is {_kind(data)}, expected a list of models: "
                           f"{json.dumps(listed)[:200]}")
    ids = [m.get("id") for m in data if isinstance(m, dict)]
    ids = [i for i in ids if isinstance(i, str) and i]
    if len(ids) == 1:
        return ids[0]
    if preferred in ids:
        return str(preferred)
    if not ids:
        raise RequestError(f"GET {url}/v1/models lists no model: {json.dumps(listed)[:200]}")
    raise RequestError(f"GET {url}/v1/models lists {counted(len(ids), 'model')} ({', '.join(ids[:5])}) and none is "
                       f"[model] target {preferred!r}")


def generate_payload(prompt: Prompt, output_len: int, stream: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "sampling_params": {"max_new_tokens": output_len, "temperature": 0.0, "ignore_eos": True},
        "stream": stream,
    }
    if prompt.input_ids is not None:
        body["input_ids"] = list(prompt.input_ids)
    else:
        body["text"] = prompt.text
    return body


def openai_payload(ep: Endpoint, prompt: Prompt, output_len: int) -> dict[str, Any]:
    body: dict[str, Any] = {"model": ep.model, "max_tokens": output_len, "temperature": 0.0,
                            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    if ep.api == "chat":
        if prompt.text is None:
            raise RequestError("api \"chat\" needs text prompts")
        body["messages"] = [{"role": "user", "content": prompt.text}]
    else:
        body["prompt"] = prompt.text if prompt.text is not None else list(prompt.input_ids or ())
    return body


def send(ep: Endpoint, prompt: Prompt, output_len: int, *, limits: transport.Limits | None = None) -> RequestResult:
    """One request over the endpoint's API, within the transport's deadlines and size caps (`limits`, default
    transport.LIMITS: first byte, idle, total; and the run's --deadline-s)."""
    lim = limits or transport.LIMITS
    if ep.api == "generate":
        body = generate_payload(prompt, output_len, ep.stream)
    else:
        body = openai_payload(ep, prompt, output_len)
    where = f"POST {ep.url}{ep.path}"
    req = post_request(ep.url + ep.path, body)
    streamed = ep.api != "generate" or ep.stream
    t0 = time.perf_counter()
    try:
        # a non-streamed answer comes whole at the end: its headers are bounded by the total deadline only
        with transport.request(req, first_byte_s=lim.first_byte_s if streamed else lim.total_s,
                               total_s=lim.total_s, idle_s=lim.idle_s) as r:
            if ep.api != "generate":
                return _openai_stream(r, t0, chat=ep.api == "chat", where=where, first_byte_s=lim.first_byte_s)
            if not ep.stream:
                raw = r.body()
                try:
                    final = json.loads(raw)
                except ValueError:
                    raise RequestError(f"{where}: the answer is not JSON: {raw[:200]!r}") from None
                return _generate_result(final, time.perf_counter() - t0, None, None, where=where)
            return _generate_stream(r, t0, where=where, first_byte_s=lim.first_byte_s)
    except transport.Redirected as e:
        raise RequestError(f"{where}: {e}") from None
    except urllib.error.HTTPError as e:
        detail = e.read()[:300].decode(errors="replace")
        raise RequestError(f"{where}: HTTP {e.code}: {detail}") from None
    except (transport.Timeout, transport.TooLarge) as e:  # they name the request
        raise RequestError(str(e)) from None
    except (OSError, ValueError, HTTPException) as e:  # HTTPException: e.g. IncompleteRead, a stream cut off
        raise RequestError(f"{where}: {type(e).__name__}: {e}") from None


def generate(url: str, prompt: Prompt, output_len: int, *, stream: bool) -> RequestResult:
    """SGLang's native /generate (the lab configs, the profiler window)."""
    return send(Endpoint(url=url, api="generate", stream=stream), prompt, output_len)


def _json_event(data: bytes, where: str) -> dict[str, Any]:
    try:
        obj = json.loads(data)
    except ValueError:
        raise RequestError(f"{where}: stream event is not JSON: {data[:200]!r}") from None
    if not isinstance(obj, dict):
        raise RequestError(f"{where}: stream event is not a JSON object: {data[:200]!r}")
    return obj


def _kind(v: Any) -> str:
    return "null" if v is None else type(v).__name__


def _error_text(obj: dict[str, Any]) -> str | None:
    if "error" in obj:
        return json.dumps(obj["error"])[:300]
    if obj.get("object") == "error":  # older vLLM: an ErrorResponse object as the event
        return json.dumps(obj)[:300]
    return None


def _output_text(obj: dict[str, Any], chat: bool, where: str) -> str:
    """The output a stream event carries: choices[].text (completions), or the delta's content, reasoning and tool
    calls (chat; tool calls as their JSON), joined; "" when it carries none."""
    choices = obj.get("choices")
    if choices is None:
        return ""
    if not isinstance(choices, list):
        raise RequestError(f"{where}: stream event field choices is {_kind(choices)}, expected a list: "
                           f"{json.dumps(obj)[:200]}")
    out = []
    for i, ch in enumerate(choices):
        if not isinstance(ch, dict):
            continue
        if chat:
            delta = ch.get("delta") or {}
            if not isinstance(delta, dict):
                raise RequestError(f"{where}: stream event field choices[{i}].delta is {_kind(delta)}, expected "
                                   f"an object: {json.dumps(obj)[:200]}")
            out += [v if isinstance(v, str) else json.dumps(v, sort_keys=True)
                    for k in CHAT_OUTPUT_FIELDS if (v := delta.get(k))]
        elif ch.get("text"):
            out.append(str(ch["text"]))
    return "".join(out)


def _openai_stream(r: transport.Reply, t0: float, *, chat: bool, where: str,
                   first_byte_s: float | None = None) -> RequestResult:
    chunks: list[float] = []
    pieces: list[str] = []
    usage: dict[str, Any] | None = None
    for t, data in sse_events(r, first_byte_s):
        obj = _json_event(data, where)
        err = _error_text(obj)
        if err is not None:
            raise RequestError(f"{where}: server error in the stream: {err}")
        if isinstance(obj.get("usage"), dict):
            usage = obj["usage"]  # the final usage chunk (continuous usage stats: every chunk; the last wins)
        if text := _output_text(obj, chat, where):
            chunks.append(t - t0)
            pieces.append(text)
    e2e = time.perf_counter() - t0
    n = usage.get("completion_tokens") if usage is not None else None
    if usage is None or n is None:
        raise RequestError(f"{where}: the stream reported no usage.completion_tokens (asked with "
                           "stream_options.include_usage): cannot check the output length")
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise RequestError(f"{where}: usage.completion_tokens is {n!r:.60}, expected a count")
    if not chunks:
        raise RequestError(f"{where}: the stream carried no output")
    return RequestResult(e2e_s=e2e, ttft_s=chunks[0], output_tokens=n, verify_ct=None, chunk_s=chunks,
                         output_digest=output_digest("".join(pieces)))


def _count(v: Any, field: str, where: str) -> int | None:
    """A non-negative whole number the server reported (an int, or a float that is one), None when absent."""
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v in (float("inf"), float("-inf")) \
            or v < 0 or int(v) != v:
        raise RequestError(f"{where}: {field} is {v!r:.60}, expected a count")
    return int(v)


def _generate_result(final: Any, e2e: float, ttft: float | None, chunks: list[float] | None,
                     where: str = "POST /generate") -> RequestResult:
    if not isinstance(final, dict):
        raise RequestError(f"{where}: the answer is {_kind(final)}, expected a JSON object: "
                           f"{json.dumps(final)[:200]}")
    if "error" in final:
        raise RequestError(f"{where}: server error: {json.dumps(final['error'])[:300]}")
    meta = final.get("meta_info") or {}
    if not isinstance(meta, dict):
        raise RequestError(f"{where}: meta_info is {_kind(meta)}, expected an object")
    ids = final.get("output_ids")
    n = _count(meta.get("completion_tokens"), "meta_info.completion_tokens", where)
    if n is None:
        n = len(ids) if isinstance(ids, list) else 0
    vct = meta.get("spec_verify_ct")
    vct = _count(vct, "meta_info.spec_verify_ct", where) if isinstance(vct, (int, float)) else None
    text = final.get("text")
    digest = (output_digest(ids) if isinstance(ids, list) and all(isinstance(i, int) for i in ids)
              else output_digest(text) if isinstance(text, str) else None)
    return RequestResult(e2e_s=e2e, ttft_s=ttft, output_tokens=n, verify_ct=vct,
                         output_ids=list(ids) if isinstance(ids, list) else None, chunk_s=chunks,
                         output_digest=digest)


def _generate_progress(obj: dict[str, Any]) -> int:
    """How much output a /generate stream event holds (tokens, else characters of text)."""
    meta = obj.get("meta_info")
    n = meta.get("completion_tokens") if isinstance(meta, dict) else None
    if isinstance(n, int):
        return n
    ids, text = obj.get("output_ids"), obj.get("text")
    return len(ids) if isinstance(ids, list) else len(text) if isinstance(text, str) else 0


def _generate_stream(r: transport.Reply, t0: float, *, where: str = "POST /generate",
                     first_byte_s: float | None = None) -> RequestResult:
    final, chunks, seen = None, [], 0
    for t, data in sse_events(r, first_byte_s):
        obj = _json_event(data, where)
        if "error" in obj:
            return _generate_result(obj, 0.0, None, None, where=where)
        n = _generate_progress(obj)
        if n > seen:  # the final event repeats the last output: not a chunk of its own
            chunks.append(t - t0)
            seen = n
        final = obj
    if final is None:
        raise RequestError(f"{where}: stream ended without a result")
    return _generate_result(final, time.perf_counter() - t0, chunks[0] if chunks else None, chunks, where=where)


@dataclass
class LevelRun:
    concurrency: int
    wall_s: float
    results: list[RequestResult]


def run_level(ep: Endpoint, prompts: Sequence[Prompt], *, concurrency: int, rounds: int, output_len: int,
              prompt_offset: int = 0) -> LevelRun:
    """`concurrency` clients, each sending `rounds` requests back to back; all start together."""
    results: list[RequestResult | None] = [None] * (concurrency * rounds)
    errors: list[str] = []
    start = threading.Barrier(concurrency + 1)

    def client(i: int) -> None:
        start.wait()
        for j in range(rounds):
            k = i * rounds + j
            if errors:
                return
            try:
                prompt = prompts[(prompt_offset + k) % len(prompts)]
                results[k] = send(ep, prompt, output_len)
            except Exception as e:  # a thread must not die silently: every request counts or fails the level
                errors.append(str(e) if isinstance(e, RequestError) else f"{type(e).__name__}: {e}")
                return

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(concurrency)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        raise RequestError(f"{len(errors)} request(s) failed at concurrency {concurrency}; "
                           f"first: {errors[0]}")
    done = [r for r in results if r is not None]
    if len(done) != len(results):
        raise RequestError(f"{len(results) - len(done)} of {len(results)} request(s) at concurrency "
                           f"{concurrency} returned nothing")
    short = [r.output_tokens for r in done if r.output_tokens != output_len]
    if short:
        source = "meta_info.completion_tokens" if ep.api == "generate" else "usage.completion_tokens"
        raise RequestError(f"asked for {output_len} tokens with ignore_eos, but {len(short)} of {len(done)} "
                           f"request(s) at concurrency {concurrency} produced {short[0]} ({source}; is "
                           "ignore_eos honoured? is the context too short?)")
    return LevelRun(concurrency=concurrency, wall_s=wall, results=done)


def ttft_probe(ep: Endpoint, prompt: Prompt, n: int = 1, output_len: int = 8) -> float:
    """Median TTFT (s) of `n` streamed requests, one at a time."""
    streamed = Endpoint(url=ep.url, api=ep.api, model=ep.model, stream=True)
    vals = []
    for _ in range(n):
        r = send(streamed, prompt, output_len)
        if r.ttft_s is None:
            raise RequestError("streamed probe returned no token")
        vals.append(r.ttft_s)
    return median(vals)


def _ms(v: float | None, nd: int = 3) -> float | None:
    return round(1e3 * v, nd) if v is not None else None


def _p(values: list[float], q: float) -> float | None:
    return percentile(values, q) if values else None


def level_metrics(run: LevelRun, ttft_fallback_s: float | None) -> dict[str, Any]:
    """Output tok/s over the window; TTFT, TPOT, ITL and e2e at p50 (the bare names) and p99 (ms); accept
    length from per-request meta_info (/generate on speculative SGLang servers)."""
    rs = run.results
    total = sum(r.output_tokens for r in rs)
    e2e = [r.e2e_s for r in rs]
    streamed = all(r.ttft_s is not None for r in rs)
    ttfts = [r.ttft_s for r in rs if r.ttft_s is not None] if streamed else []
    ttft = _p(ttfts, 50) if streamed else ttft_fallback_s
    tpots: list[float] = []
    if ttft is not None:
        tpots = [(r.e2e_s - (r.ttft_s if streamed and r.ttft_s is not None else ttft)) / (r.output_tokens - 1)
                 for r in rs if r.output_tokens > 1]
    itls = [r.chunk_s[i] - r.chunk_s[i - 1] for r in rs if r.chunk_s for i in range(1, len(r.chunk_s))]
    chunks = sum(len(r.chunk_s) for r in rs if r.chunk_s)
    vct = [r.verify_ct for r in rs]
    accept = (total / sum(v for v in vct if v)) if all(v for v in vct) else None
    return {
        "concurrency": run.concurrency,
        "requests": len(rs),
        "output_tokens": total,
        "wall_s": round(run.wall_s, 4),
        "tok_s": round(total / run.wall_s, 3) if run.wall_s > 0 else None,
        "e2e_ms": _ms(_p(e2e, 50)),
        "e2e_ms_p99": _ms(_p(e2e, 99)),
        "ttft_ms": _ms(ttft),
        "ttft_ms_p99": _ms(_p(ttfts, 99)),
        "ttft_source": "stream" if streamed else ("idle streamed probe" if ttft is not None else None),
        "tpot_ms": _ms(_p(tpots, 50), 4),
        "tpot_ms_p99": _ms(_p(tpots, 99), 4),
        "itl_ms": _ms(_p(itls, 50), 4),
        "itl_ms_p99": _ms(_p(itls, 99), 4),
        "itl_samples": len(itls),
        "tokens_per_chunk": round(total / chunks, 4) if streamed and chunks else None,
        "accept_len": round(accept, 4) if accept is not None else None,
        "accept_len_source": "meta_info" if accept is not None else None,
        "verify_ct": sum(v for v in vct if v) if accept is not None else None,
        # per request, in the order of the prompts sent (client i's round j is prompt i x rounds + j)
        "output_digests": [r.output_digest for r in rs],
    }
