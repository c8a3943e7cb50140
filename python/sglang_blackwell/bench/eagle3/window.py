"""One measured window: c clients x `rounds` requests on a server, with what the server lets us read around it
(SGLang: the radix-cache flush, the spec-counter reset, the step-time snapshots; vLLM: the spec-decode counters),
as one level record (client.level_metrics plus step_ms, accept_len_server, ...). Used per concurrency by the
harness and twice per cell (first burst, warm window) by the grid."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from . import client, sglang_api, vllm_api
from .config_workload import Prompt
from .stats import median


@dataclass(frozen=True)
class Server:
    """What the window can ask of the server: SGLang's extras (/server_info answered) or vLLM's /metrics."""
    ep: client.Endpoint
    sglang: bool
    speculative: bool
    peer_metrics: bool = False  # vLLM: accept length from /metrics around the window

    @property
    def url(self) -> str:
        return self.ep.url


def flush_cache(url: str) -> None:
    with contextlib.suppress(OSError, ValueError):  # radix cache disabled or busy: nothing to flush
        sglang_api.http_json(url + "/flush_cache", {}, timeout=30)


def measure(s: Server, prompts: Sequence[Prompt], *, concurrency: int, rounds: int, output_len: int,
            prompt_offset: int = 0, ttft_probe: float | None = None, flush: bool = True) -> dict[str, Any]:
    """Flush (when `flush`), reset the spec counters, snapshot the step times, run the window, read them again."""
    url, c = s.url, concurrency
    reset, before, peer_before = False, None, None
    if s.sglang:
        if flush:
            flush_cache(url)
        reset = sglang_api.reset_spec_stats(url) if s.speculative else False
        before = sglang_api.step_times(sglang_api.server_info(url))
    elif s.peer_metrics and s.speculative:
        peer_before = vllm_api.metrics(url)
    lv = client.run_level(s.ep, prompts, concurrency=c, rounds=rounds, output_len=output_len,
                          prompt_offset=prompt_offset)
    after_info = sglang_api.server_info(url) if s.sglang else None
    m = client.level_metrics(lv, ttft_probe)
    steps = sglang_api.new_step_times(before, sglang_api.step_times(after_info), c) if after_info else []
    m["step_ms"] = round(1e3 * sglang_api.low_quantile(steps), 4) if steps else None
    m["step_ms_median"] = round(1e3 * median(steps), 4) if steps else None
    m["step_samples"] = len(steps)
    m["accept_len_server"] = sglang_api.avg_accept_length(after_info) if reset and after_info else None
    if m["accept_len"] is None and m["accept_len_server"] is not None:  # the OpenAI API carries no counts
        m.update(accept_len=m["accept_len_server"], accept_len_source="server_info")
    if peer_before is not None:
        acc = vllm_api.accept_length(peer_before, vllm_api.metrics(url))
        if acc is not None:
            m.update(accept_len=round(acc, 4), accept_len_source="metrics")
    return m


def fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def line(m: dict[str, Any]) -> str:
    """The progress line of one window."""
    return (f"{m['tok_s']:.1f} tok/s, TTFT {fmt(m['ttft_ms'])} ms, TPOT {fmt(m['tpot_ms'])} ms, "
            f"ITL p99 {fmt(m['itl_ms_p99'])} ms"
            + (f", accept {m['accept_len']:.2f}" if m["accept_len"] is not None else "")
            + (f", step {m['step_ms']:.2f} ms ({m['step_samples']} samples)" if m["step_samples"]
               else ", no step times"))
