"""The soak's verdict (test/gpu/soak, issue 31 item 4), a pure function of what the soak recorded per arm: its minute
buckets, the server's state after the soak and the reference outputs before and after. No clock, no I/O: the suite
(to fail its test) and the receipt (qualify/soak_receipt.py, from the facts) both call `judge`.

A bucket is one minute of the soak (SGLB_SOAK_BUCKET_S; the CPU tests use 1 s): requests that ended in it (ok,
aborted as intended, errors), the inter-token gaps that arrived in it (itl_n, itl_p50/p90/p99_ms), and the largest
sample of the arm's GPU memory (gpu_mib_max: its processes as nvidia-smi lists them; gpu_total_mib_max: the whole
device, both arms), host RSS (rss_mib_max: the server's process tree, /proc) and KV pool use. `full` is false for a
minute the soak's end cut short, `drain` marks what ended after the soak stopped sending (errors there count all
the same). The schedule repeats every minute (soak_schedule.py: the same phases of concurrency, the same length
draws), so any two full minutes carry the same load; minute 0 does not (it starts from an empty server: the first
prefills, the first captures of the allocator, no requests in flight yet), so the FIRST minute compared is minute
1, the LAST the last full minute. At least 3 full minutes are needed (0, 1 and a later one): fewer, and the checks
that compare minutes fail as not judged.

Checks, per arm; the soak passes when every one does:
- minutes: first and last can be compared.
- errors: 0 over the whole soak, drain included: any 5xx, 4xx (every request the soak sends is valid), connection
  error, error event, stream ended before [DONE], timeout. An abort the client made on purpose is no error.
- aborts: at least one intended abort completed (else the soak did not exercise aborts at all).
- itl_p99: last.p99 <= first.p99 x (1 + ITL_TOL) + ITL_SLACK_MS, both minutes with >= MIN_GAPS gaps (fewer: not
  judged, a fail). The two minutes run the same draws, so what differs between them is sampling noise and the
  phase of arrivals; what the check is there for is a steady rise (per-step work growing with the requests served:
  a radix tree walked every step, an allocator fragmenting, a list kept per request), which at 2.5 % a minute passes
  ITL_TOL = 25 % between minute 1 and minute 10. The noise: a minute's p99 of n gaps is an order statistic whose
  distribution-free 95 % interval spans the ranks 0.99 n +- 1.96 sqrt(0.0099 n): for n = MIN_GAPS = 1000 the
  sample's p98.4 to p99.6, for the ~50k gaps a lab minute should hold (c = 12 on the mean, ~15 ms a step) p98.9 to
  p99.1. The tail of a mixed-length workload is the decode steps that carry another request's prefill chunk; 25 %
  holds the noise as long as that tail's p98.4 and p99.6 lie within 25 % of each other. That spread is an
  assumption until a lab receipt shows it: each bucket records p90 and p99, and the minutes between the first and
  the last give the minute-to-minute spread of p99 at the same load, the number to set ITL_TOL from.
  ITL_SLACK_MS 2 ms: the chunk times are taken by Python threads (64 for two arms at c = 32) on a shared host; a
  2 ms scheduling delay of the client is no server regression.
- gpu_memory: last - first <= GPU_GROWTH_MIB (256 MiB) of the arm's processes, or, where nvidia-smi lists no process
  (a container's PID namespace), of the device total <= 256 MiB per arm. The KV pool and the CUDA graphs are
  allocated at start; what may still grow is PyTorch's caching allocator taking a segment for a shape first met
  later. Every shape of the cycle is met in every minute, so by minute 1 those are taken; 256 MiB is two activation
  buffers of an 8k-token prefill chunk at the lab pair's hidden size (8192 x 7168 x 2 B = 112 MiB each): one more
  allocator segment of that size is tolerated, a growth that continues is not.
- host_rss: last - first <= RSS_GROWTH_MIB (256 MiB) of the server's process tree. glibc's and pymalloc's arenas
  reach their high water with the cycle's peak (32 requests of up to 32k-token prompts), met in minute 0 already.
  At the lab pair's ~270 requests a minute per arm (mean concurrency 12, ~200 output tokens of ~15 ms, the mean
  log-uniform prompt 6.7k tokens) the 8 minutes compared serve ~2000 requests: keeping one mean prompt as Python
  ints (6.7k x 36 B = 240 KB) per request would grow 470 MiB, nearly twice the bound.
- references: every reference greedy output (taken before the soak) the same after it.
- kv_idle: the KV pool back to its idle use after the soak (server_checks.check_after polls it).
- server_alive: the same server process and scheduler, /health 200, after the soak.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

CHECKS = ("minutes", "errors", "aborts", "itl_p99", "gpu_memory", "host_rss", "references", "kv_idle", "server_alive")
FIRST_MINUTE = 1  # minute 0 starts from an empty server


@dataclass(frozen=True)
class Bounds:
    itl_tol: float = 0.25
    itl_slack_ms: float = 2.0
    min_gaps: int = 1000
    gpu_growth_mib: float = 256.0
    rss_growth_mib: float = 256.0

    def as_facts(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_facts(cls, d: Mapping[str, Any] | None) -> Bounds:
        known = {k: v for k, v in (d or {}).items() if k in cls.__dataclass_fields__}
        return cls(**known)


DEFAULT = Bounds()


@dataclass(frozen=True)
class Check:
    arm: str
    check: str
    ok: bool
    value: Any
    bound: Any
    why: str

    def as_row(self) -> dict[str, Any]:
        return asdict(self)


def compared(buckets: Sequence[Mapping[str, Any]]) -> tuple[Mapping[str, Any], Mapping[str, Any]] | None:
    """(first, last) full minutes to compare: minute 1 and the last full minute after it; None with fewer."""
    full = sorted((b for b in buckets if b.get("full") and not b.get("drain") and b["minute"] >= FIRST_MINUTE),
                  key=lambda b: b["minute"])
    if len(full) < 2 or full[0]["minute"] != FIRST_MINUTE:
        return None
    return full[0], full[-1]


def _growth(first: Mapping[str, Any], last: Mapping[str, Any], key: str) -> float | None:
    a, b = first.get(key), last.get(key)
    return None if a is None or b is None else float(b) - float(a)


def _itl(arm: str, pair: tuple[Mapping[str, Any], Mapping[str, Any]] | None, bounds: Bounds) -> Check:
    if pair is None:
        return Check(arm, "itl_p99", False, None, None, "not judged: fewer than 3 full minutes")
    first, last = pair
    few = [f"minute {b['minute']}: {b.get('itl_n', 0)} gaps" for b in pair if (b.get("itl_n") or 0) < bounds.min_gaps
           or b.get("itl_p99_ms") is None]
    if few:
        return Check(arm, "itl_p99", False, None, None,
                     f"not judged: fewer than {bounds.min_gaps} gaps ({'; '.join(few)})")
    bound = first["itl_p99_ms"] * (1 + bounds.itl_tol) + bounds.itl_slack_ms
    v = last["itl_p99_ms"]
    return Check(arm, "itl_p99", v <= bound, round(v, 3), round(bound, 3),
                 f"minute {last['minute']} p99 {v:.2f} ms against minute {first['minute']} "
                 f"{first['itl_p99_ms']:.2f} ms x {1 + bounds.itl_tol:g} + {bounds.itl_slack_ms:g} ms")


def _memory(arm: str, pair: tuple[Mapping[str, Any], Mapping[str, Any]] | None, check: str, keys: Sequence[str],
            bounds: Sequence[float], what: Sequence[str]) -> Check:
    """Growth first -> last of the first key both minutes hold, against its bound."""
    if pair is None:
        return Check(arm, check, False, None, None, "not judged: fewer than 3 full minutes")
    for key, bound, name in zip(keys, bounds, what, strict=True):
        g = _growth(*pair, key)
        if g is not None:
            return Check(arm, check, g <= bound, g, bound,
                         f"{name}: {pair[0][key]} -> {pair[1][key]} MiB, minute {pair[0]['minute']} to "
                         f"{pair[1]['minute']}")
    return Check(arm, check, False, None, None, f"not measured ({', '.join(keys)} missing)")


def judge_arm(arm: str, facts: Mapping[str, Any], bounds: Bounds = DEFAULT, *, arms: int = 1) -> list[Check]:
    """Every check of CHECKS for one arm's facts: buckets, after (server_checks.After.as_facts), references
    ([{before, after, same}]). `arms`: how many arms shared the device (the device-total memory bound)."""
    buckets = facts.get("buckets") or []
    pair = compared(buckets)
    out = [Check(arm, "minutes", pair is not None, len([b for b in buckets if b.get("full")]), 3,
                 f"first {pair[0]['minute']}, last {pair[1]['minute']}" if pair else
                 "fewer than 3 full minutes: nothing to compare")]
    errors = sum(int(b.get("errors") or 0) for b in buckets)
    samples = [s for b in buckets for s in b.get("error_samples") or []][:3]
    out.append(Check(arm, "errors", errors == 0 and bool(buckets), errors, 0,
                     "no buckets recorded" if not buckets else "; ".join(samples) or "none"))
    aborted = sum(int(b.get("aborted") or 0) for b in buckets)
    out.append(Check(arm, "aborts", aborted > 0, aborted, 1, f"{aborted} requests cut by the client as intended"))
    out.append(_itl(arm, pair, bounds))
    out.append(_memory(arm, pair, "gpu_memory", ("gpu_mib_max", "gpu_total_mib_max"),
                       (bounds.gpu_growth_mib, bounds.gpu_growth_mib * arms),
                       ("the arm's GPU processes", f"the device total ({arms} arms)")))
    out.append(_memory(arm, pair, "host_rss", ("rss_mib_max",), (bounds.rss_growth_mib,),
                       ("the server's process tree",)))
    refs = facts.get("references") or []
    changed = [r for r in refs if not r.get("same")]
    out.append(Check(arm, "references", bool(refs) and not changed, len(refs) - len(changed), len(refs),
                     "no reference taken" if not refs else
                     "; ".join(f"{str(r.get('prompt'))[:40]!r}: {r.get('before')!r} -> {r.get('after')!r}"[:200]
                               for r in changed) or "all unchanged"))
    after = facts.get("after") or {}
    out.append(Check(arm, "kv_idle", bool(after) and bool(after.get("kv_idle")), after.get("kv_used"),
                     facts.get("kv_used_idle"), "not checked" if not after else
                     f"{after.get('kv_used')} tokens used, {after.get('kv_requests')} requests running or waiting"))
    alive = bool(after) and after.get("alive") and after.get("scheduler_same") and after.get("health") == 200
    out.append(Check(arm, "server_alive", bool(alive), after.get("health"), 200, "not checked" if not after else
                     f"process alive {after.get('alive')}, same scheduler {after.get('scheduler_same')}, "
                     f"/health {after.get('health')}"))
    return out


def judge(arms: Mapping[str, Mapping[str, Any]], names: Sequence[str], bounds: Bounds = DEFAULT) -> list[Check]:
    """judge_arm for each arm of `names`, in that order; an arm the facts lack fails every check."""
    out: list[Check] = []
    for name in names:
        facts = arms.get(name)
        if not facts:
            out += [Check(name, c, False, None, None, "the arm did not run") for c in CHECKS]
        else:
            out += judge_arm(name, facts, bounds, arms=len(names))
    return out


def passed(checks: Sequence[Check]) -> bool:
    return bool(checks) and all(c.ok for c in checks)
