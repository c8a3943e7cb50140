"""What a vLLM server tells a benchmark besides the OpenAI API (read from vLLM's code and docs, not guessed):

- GET /version -> {"version": "0.18.0"}.
- GET /metrics (Prometheus text). With a speculative config, vllm/v1/spec_decode/metrics.py registers the
  counters vllm:spec_decode_num_drafts (one per verify step), vllm:spec_decode_num_draft_tokens and
  vllm:spec_decode_num_accepted_tokens (accepted drafts, bonus token excluded), exposed with the `_total`
  suffix and one sample per engine label set; without one, none of them exists. vLLM's mean acceptance length
  (bonus token included, SGLang's accept length) = 1 + accepted / drafts; cumulative since start, so the
  harness differences two snapshots around the measured window.
"""

from __future__ import annotations

import math
import re
import urllib.error
from dataclasses import dataclass
from http.client import HTTPException

from .transport import get_text, http_json

DRAFTS = "vllm:spec_decode_num_drafts"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens"


@dataclass(frozen=True)
class Metrics:
    vllm: bool  # the exposition has vllm: metrics at all
    drafts: float | None  # None: no spec-decode counters (a non-speculative server)
    accepted: float | None
    junk: int = 0  # lines that are no `name[{labels}] value [timestamp]` sample (ignored)
    first_junk: str = ""


SAMPLE = re.compile(r"([A-Za-z_:][A-Za-z0-9_:]*)(\{.*\})?\s+(\S+)(\s+\S+)?")


def version(url: str) -> str | None:
    try:
        v = http_json(url + "/version", timeout=10)
    except (urllib.error.URLError, OSError, ValueError, HTTPException):
        return None
    return str(v["version"])[:100] if isinstance(v, dict) and v.get("version") else None


def parse_metrics(text: str) -> Metrics:
    """Sum the spec-decode counters over their label sets (`name{labels} value`, `_total` or not). A line that is
    no sample (or a counter whose value is no finite number) is counted in `junk` and skipped: /metrics is an
    optional source, one bad line must not cost the measurement."""
    sums: dict[str, float] = {}
    vllm, junk, first = False, 0, ""
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.fullmatch(line)
        if m is None:
            junk, first = junk + 1, first or line
            continue
        name = m.group(1)
        vllm = vllm or name.startswith("vllm:")
        base = name[:-len("_total")] if name.endswith("_total") else name
        if base not in (DRAFTS, ACCEPTED):
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            value = float("nan")
        if not math.isfinite(value):
            junk, first = junk + 1, first or line
            continue
        sums[base] = sums.get(base, 0.0) + value
    return Metrics(vllm=vllm, drafts=sums.get(DRAFTS), accepted=sums.get(ACCEPTED), junk=junk,
                   first_junk=first[:80])


def junk_warning(url: str, m: Metrics | None) -> str | None:
    """The one line that says a /metrics exposition had malformed lines (None: it had none)."""
    if m is None or not m.junk:
        return None
    return (f"warning: {url}/metrics: {m.junk} malformed line(s) ignored (first: {m.first_junk!r}); the "
            "spec-decode counters are read from the rest")


def metrics(url: str) -> Metrics | None:
    """None when the server has no /metrics."""
    try:
        return parse_metrics(get_text(url + "/metrics"))
    except (urllib.error.URLError, OSError, ValueError, HTTPException):
        return None


def accept_length(before: Metrics | None, after: Metrics | None) -> float | None:
    """1 + accepted / drafts over the window between two snapshots; None without counters or drafts."""
    if before is None or after is None or after.drafts is None or after.accepted is None:
        return None
    drafts = after.drafts - (before.drafts or 0.0)
    accepted = after.accepted - (before.accepted or 0.0)
    return 1.0 + accepted / drafts if drafts > 0 else None
