"""SGLang's server-side statistics, as 0.5.9 and 0.5.14 expose them (read from their code, not guessed):

- GET /server_info (/get_server_info is the deprecated alias) -> {**server_args, "internal_states": [one
  dict per DP rank], "version": ...}. internal_states[i]:
  - "avg_spec_accept_length" = spec_total_num_accept_tokens / spec_total_num_forward_ct (accepted drafts + the
    bonus token, per verify); present only on speculative servers once a decode log interval has passed.
    Cumulative since start, and only rolled up every `--decode-log-interval` (40) decode steps.
  - "step_time_dict" (only with env SGLANG_RECORD_STEP_TIME=1): {batch size: [seconds per decode iteration,
    one entry per decode log interval]}; for a speculative server one iteration is one draft+verify round.
    Cumulative lists: we difference them around the measured window. sglang's own
    scripts/playground/bench_speculative.py reads the 20th percentile of a batch size's entries.
- POST /set_internal_state {"server_args": {}} resets the spec accept totals (an empty update is accepted and
  the reset runs); answers a list of booleans.
- POST /start_profile {"output_dir", "num_steps", "activities", "with_stack", "record_shapes",
  "profile_prefix"} -> torch profiler over the next num_steps forward batches, written to
  <output_dir>/<prefix>-<profile_id>-TP-<rank>.trace.json.gz. 0.5.14 names spans step[DECODE bs=N],
  step[TARGET_VERIFY bs=N], draft, draft_extend; 0.5.9 has no such spans.
- /generate meta_info (speculative servers, when a request finishes): completion_tokens, spec_verify_ct,
  spec_accept_length (= completion_tokens / spec_verify_ct). The OpenAI endpoints (/v1/completions,
  /v1/chat/completions) carry no spec counts (0.5.9 and 0.5.14 protocol.py: usage has prompt/completion/total
  tokens, `sglext` only routed experts and cached-token details), so over the OpenAI API the accept length comes
  from /server_info after a reset.
"""

from __future__ import annotations

import contextlib
import math
import urllib.error
from http.client import HTTPException
from typing import Any

from .stats import percentile
from .transport import Redirected, http_json


def server_info(url: str) -> dict[str, Any]:
    """/server_info (or the deprecated /get_server_info), which must be a JSON object."""
    try:
        info = http_json(url + "/server_info")
    except urllib.error.HTTPError as e:
        if e.code != 404 or isinstance(e, Redirected):
            raise
        info = http_json(url + "/get_server_info")
    if not isinstance(info, dict):
        raise ValueError(f"{url}/server_info: the answer is {type(info).__name__}, expected a JSON object: "
                         f"{str(info)[:200]!r}")
    return info


def server_info_or_none(url: str) -> dict[str, Any] | None:
    """/server_info of an SGLang server; None when the server has neither path (an OpenAI-only server such as
    vLLM answers 404) or answers something that is not SGLang's JSON object."""
    try:
        info = server_info(url)
    except (urllib.error.HTTPError, ValueError):
        return None
    return info if "tp_size" in info or "internal_states" in info else None


def internal_state(info: Any) -> dict[str, Any]:
    states = info.get("internal_states") if isinstance(info, dict) else None
    first = states[0] if isinstance(states, list) and states else {}
    return first if isinstance(first, dict) else {}


def step_times_problem(info: Any) -> str | None:
    """What is wrong with internal_states[0].step_time_dict ({batch size: [seconds, ...]}); None: nothing (or
    absent)."""
    d = internal_state(info).get("step_time_dict")
    if d is None:
        return None
    if not isinstance(d, dict):
        return f"internal_states[0].step_time_dict is {type(d).__name__}, expected an object"
    for k, v in d.items():
        if not str(k).isdigit():
            return f"internal_states[0].step_time_dict key {str(k)[:40]!r} is not a batch size"
        if not isinstance(v, list) or not all(_finite(x) for x in v):
            return f"internal_states[0].step_time_dict[{k}] is not a list of seconds: {str(v)[:60]}"
    return None


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def step_times(info: Any) -> dict[int, list[float]] | None:
    """step_time_dict of DP rank 0 with int keys; None when the server does not record step times, or records
    them in a shape this reader does not know (step_times_problem says which; an optional source)."""
    d = internal_state(info).get("step_time_dict")
    if d is None or step_times_problem(info):
        return None
    return {int(k): [float(x) for x in v] for k, v in d.items()}


def new_step_times(before: dict[int, list[float]] | None, after: dict[int, list[float]] | None,
                   batch_size: int) -> list[float]:
    """Entries recorded between two snapshots for one batch size (the lists only grow)."""
    if after is None:
        return []
    old = len((before or {}).get(batch_size, []))
    return after.get(batch_size, [])[old:]


def low_quantile(values: list[float], q: float = 0.2) -> float:
    """The q-quantile (stats.percentile: linear interpolation). Step-time entries are the mean of one decode log
    interval; an interval that spans the idle gap between two requests (prefill, HTTP) reads high, never low, so
    a low quantile estimates the steady step better than the median when requests are short."""
    return percentile(values, 100.0 * q)


def avg_accept_length(info: dict[str, Any]) -> float | None:
    v = internal_state(info).get("avg_spec_accept_length")
    return float(v) if _finite(v) else None


def reset_spec_stats(url: str) -> bool:
    try:
        r = http_json(url + "/set_internal_state", {"server_args": {}})
    except (urllib.error.URLError, OSError, ValueError, HTTPException):
        return False
    return bool(r) and all(r) if isinstance(r, list) else bool(r)


def start_profile(url: str, output_dir: str, num_steps: int, prefix: str, *, by_stage: bool = False) -> None:
    """Torch profiler over the next num_steps forward batches; `by_stage`: over the next num_steps prefill
    batches and, in a trace of its own, the next num_steps decode batches (SGLang's profile_by_stage, 0.5.9+:
    <prefix>-<id>-TP-<r>-EXTEND.trace.json.gz and ...-DECODE.trace.json.gz), so that a long prompt's prefill
    chunks do not fill the decode window."""
    http_json(url + "/start_profile", {"output_dir": output_dir, "num_steps": num_steps,
                                       "activities": ["CPU", "GPU"], "with_stack": False,
                                       "record_shapes": False, "profile_prefix": prefix,
                                       "profile_by_stage": by_stage}, timeout=120)


def stop_profile(url: str) -> None:
    # already stopped after num_steps: the server answers an error, which is fine here
    with contextlib.suppress(urllib.error.URLError, OSError, ValueError, HTTPException):
        http_json(url + "/stop_profile", {}, timeout=300)
