"""A real HTTP client for SGLang's native API (POST /generate), run as a closed loop at a given concurrency.

Every request: temperature 0, ignore_eos, max_new_tokens = the workload's output length, `text` or
`input_ids`. Non-streamed requests give output tok/s and end-to-end latency; streamed ones (server-sent
events, "data: {...}" lines, "data: [DONE]" last) also give the time to the first output token.
`ttft_probe` measures TTFT with one streamed request on an idle server when the measured window itself is
not streamed.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .config import Prompt

REQUEST_TIMEOUT_S = 600.0


class RequestError(RuntimeError):
    pass


@dataclass
class RequestResult:
    e2e_s: float
    ttft_s: float | None  # streamed requests only
    output_tokens: int
    verify_ct: int | None  # spec_verify_ct from meta_info (speculative servers)
    output_ids: list[int] | None = None


def payload(prompt: Prompt, output_len: int, stream: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "sampling_params": {"max_new_tokens": output_len, "temperature": 0.0, "ignore_eos": True},
        "stream": stream,
    }
    if prompt.input_ids is not None:
        body["input_ids"] = list(prompt.input_ids)
    else:
        body["text"] = prompt.text
    return body


def _result(final: dict[str, Any], e2e: float, ttft: float | None) -> RequestResult:
    if "error" in final:
        raise RequestError(f"server error: {json.dumps(final['error'])[:300]}")
    meta = final.get("meta_info") or {}
    ids = final.get("output_ids")
    n = meta.get("completion_tokens")
    if n is None:
        n = len(ids) if isinstance(ids, list) else 0
    vct = meta.get("spec_verify_ct")
    return RequestResult(e2e_s=e2e, ttft_s=ttft, output_tokens=int(n),
                         verify_ct=int(vct) if isinstance(vct, (int, float)) else None,
                         output_ids=list(ids) if isinstance(ids, list) else None)


def generate(url: str, prompt: Prompt, output_len: int, *, stream: bool,
             timeout: float = REQUEST_TIMEOUT_S) -> RequestResult:
    body = json.dumps(payload(prompt, output_len, stream)).encode()
    req = urllib.request.Request(url + "/generate", data=body, headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            if not stream:
                final = json.loads(r.read())
                return _result(final, time.perf_counter() - t0, None)
            ttft, final = None, None
            for raw in r:
                line = raw.strip()
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    break
                obj = json.loads(data)
                if "error" in obj:
                    return _result(obj, 0.0, None)
                if ttft is None and (obj.get("output_ids") or obj.get("text")):
                    ttft = time.perf_counter() - t0
                final = obj
            if final is None:
                raise RequestError("stream ended without a result")
            return _result(final, time.perf_counter() - t0, ttft)
    except urllib.error.HTTPError as e:
        detail = e.read()[:300].decode(errors="replace")
        raise RequestError(f"POST {url}/generate: HTTP {e.code}: {detail}") from None
    except (OSError, ValueError) as e:
        raise RequestError(f"POST {url}/generate: {type(e).__name__}: {e}") from None


@dataclass
class LevelRun:
    concurrency: int
    wall_s: float
    results: list[RequestResult]


def run_level(url: str, prompts: Sequence[Prompt], *, concurrency: int, rounds: int, output_len: int,
              stream: bool, prompt_offset: int = 0) -> LevelRun:
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
                results[k] = generate(url, prompt, output_len, stream=stream)
            except RequestError as e:
                errors.append(str(e))
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
    short = [r.output_tokens for r in done if r.output_tokens != output_len]
    if short:
        raise RequestError(f"asked for {output_len} tokens with ignore_eos, got {short[0]} "
                           "(is ignore_eos honoured? is the context too short?)")
    return LevelRun(concurrency=concurrency, wall_s=wall, results=done)


def ttft_probe(url: str, prompt: Prompt, n: int = 1, output_len: int = 8) -> float:
    """Median TTFT (s) of `n` streamed requests, one at a time."""
    vals = []
    for _ in range(n):
        r = generate(url, prompt, output_len, stream=True)
        if r.ttft_s is None:
            raise RequestError("streamed probe returned no token")
        vals.append(r.ttft_s)
    return statistics.median(vals)


def level_metrics(run: LevelRun, ttft_fallback_s: float | None) -> dict[str, Any]:
    """Output tok/s over the window, median TTFT/TPOT/e2e (ms), accept length from per-request meta_info."""
    rs = run.results
    total = sum(r.output_tokens for r in rs)
    e2e = [r.e2e_s for r in rs]
    ttfts = [r.ttft_s for r in rs if r.ttft_s is not None]
    streamed = len(ttfts) == len(rs)
    ttft = statistics.median(ttfts) if streamed else ttft_fallback_s
    tpot = None
    if ttft is not None:
        per = [((r.e2e_s - (r.ttft_s if streamed else ttft)) / (r.output_tokens - 1))
               for r in rs if r.output_tokens > 1]
        tpot = statistics.median(per) if per else None
    vct = [r.verify_ct for r in rs]
    accept = (total / sum(vct)) if all(v for v in vct) else None
    return {
        "concurrency": run.concurrency,
        "requests": len(rs),
        "output_tokens": total,
        "wall_s": round(run.wall_s, 4),
        "tok_s": round(total / run.wall_s, 3) if run.wall_s > 0 else None,
        "e2e_ms": round(1e3 * statistics.median(e2e), 3),
        "ttft_ms": round(1e3 * ttft, 3) if ttft is not None else None,
        "ttft_source": "stream" if streamed else ("idle streamed probe" if ttft is not None else None),
        "tpot_ms": round(1e3 * tpot, 4) if tpot is not None else None,
        "accept_len": round(accept, 4) if accept is not None else None,
        "verify_ct": sum(v for v in vct if v) if accept is not None else None,
    }
