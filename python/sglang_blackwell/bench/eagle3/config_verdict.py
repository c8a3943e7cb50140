"""A benchmark config's `[verdict]` -> VerdictSpec: the baseline and speculative arms, the bars (min_ratio per
concurrency, or per grid cell in grid mode), the fusion comparison, the accept-length and first-burst checks."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from ...limits import CANONICAL_INT
from .config_arms import ArmSpec, check_arm
from .config_section import Section
from .config_workload import WorkloadSpec


@dataclass(frozen=True)
class VerdictSpec:
    baseline: str
    speculative: tuple[str, ...]
    min_ratio: dict[int, float]  # concurrency -> min EAGLE-3/baseline tok/s (worst spec vs best baseline)
    fusion_on: str | None
    fusion_off: str | None
    min_fusion_gain: float | None  # 0.15: fusion-on verify (or round) >= 15% faster; None: report only
    expect_accept_len: float | None
    expect_break_even: float | None
    accept_len_tolerance: float | None = None  # set: |measured - expect_accept_len| <= it is a verdict check
    # grid mode: context -> concurrency -> min ratio (min_ratio is then empty)
    grid_min_ratio: dict[int, dict[int, float]] = field(default_factory=dict)
    first_burst_min_ratio: float | None = None  # grid mode: first-burst tok/s >= it x the same arm's warm tok/s
    metric: str = "tok_s"  # what min_ratio compares: verdict.RATE_METRICS
    # the speculative arms whose accept length is checked (None: the verdict's `speculative`, as judged); an arm
    # whose draft length changes at run time (--speculative-adaptive) has no accept length known before the run,
    # so it is left out and its accept length only reported
    accept_len_arms: tuple[str, ...] | None = None
    # grid mode: every speculative arm's greedy output equal to the baseline's, request by request (outputs.py)
    outputs_match: bool = False


def parse_verdict(top: Section, arms: dict[str, ArmSpec], workload: WorkloadSpec) -> VerdictSpec:
    """The top level's (required) `verdict` table, its arms checked against `arms`, its cells against the
    workload's."""
    v = Section(top.path, "verdict", top.get("verdict", None, True),
                {"baseline", "speculative", "min_ratio", "fusion", "min_fusion_gain", "expect_accept_len",
                 "accept_len_tolerance", "expect_break_even", "first_burst_min_ratio", "metric",
                 "accept_len_arms", "outputs_match"})
    baseline = v.str_("baseline", required=True)
    check_arm(v, "baseline", baseline, arms, speculative=False)
    spec_arms = v.str_list("speculative", [a.name for a in arms.values() if a.speculative])
    if not spec_arms:
        raise v.error("speculative", "needs at least one speculative arm to compare against the baseline")
    for a in spec_arms:
        check_arm(v, "speculative", a, arms, speculative=True)
    grid_min_ratio = _parse_grid_min_ratio(v, workload) if workload.grid else {}
    min_ratio = {} if workload.grid else _parse_min_ratio(v, workload.concurrency)
    fusion = v.str_list("fusion")
    if fusion and len(fusion) != 2:
        raise v.error("fusion", f"expected [\"<fusion-on arm>\", \"<fusion-off arm>\"], got {list(fusion)}")
    for a in fusion:
        check_arm(v, "fusion", a, arms, speculative=True)
    min_fusion_gain = v.num("min_fusion_gain", None, min_=-1.0)
    if min_fusion_gain is not None and not fusion:
        raise v.error("min_fusion_gain", "set without verdict.fusion = [on_arm, off_arm]")
    verdict = VerdictSpec(
        baseline=baseline, speculative=spec_arms, min_ratio=min_ratio,
        fusion_on=fusion[0] if fusion else None, fusion_off=fusion[1] if fusion else None,
        min_fusion_gain=min_fusion_gain,
        expect_accept_len=v.num("expect_accept_len", None, min_=1.0),
        expect_break_even=v.num("expect_break_even", None, min_=0.0),
        accept_len_tolerance=v.num("accept_len_tolerance", None, min_=0.0),
        grid_min_ratio=grid_min_ratio, first_burst_min_ratio=_first_burst_min_ratio(v, workload.grid),
        metric=_metric(v), accept_len_arms=_accept_len_arms(v, arms),
        outputs_match=_outputs_match(v, workload.grid))
    if verdict.accept_len_tolerance is not None and verdict.expect_accept_len is None:
        raise v.error("accept_len_tolerance", "needs expect_accept_len (the value it is a tolerance of)")
    return verdict


def _accept_len_arms(v: Section, arms: dict[str, ArmSpec]) -> tuple[str, ...] | None:
    """`accept_len_arms`: speculative arms (judged by min_ratio or not), each once; needs accept_len_tolerance."""
    if not v.has("accept_len_arms"):
        return None
    names = v.str_list("accept_len_arms")
    if v.num("accept_len_tolerance", None, min_=0.0) is None:
        raise v.error("accept_len_arms", "needs accept_len_tolerance and expect_accept_len (the check it picks "
                                         "arms for)")
    for a in names:
        check_arm(v, "accept_len_arms", a, arms, speculative=True)
    if not names:
        raise v.error("accept_len_arms", "lists no arm (leave the key out to check every speculative arm)")
    if len(set(names)) != len(names):
        raise v.error("accept_len_arms", f"lists an arm twice: {list(names)}")
    return tuple(names)


def _outputs_match(v: Section, grid: bool) -> bool:
    """`outputs_match` (default false): the arms' greedy outputs compared request by request; grid mode only (the
    harness's levels send prompts from a file in an order the arms need not share)."""
    on = v.bool_("outputs_match", False)
    if on and not grid:
        raise v.error("outputs_match", "grid mode only (needs workload.contexts)")
    return on


# what [verdict] metric may name (verdict.rate_vals computes each)
METRICS = {"tok_s": "output tok/s over the window, prefill included",
           "decode_tok_s": "the decode rate c users see: concurrency x 1000 / TPOT p50 (prefill excluded)"}


def _metric(v: Section) -> str:
    m = v.str_("metric", "tok_s")
    if m not in METRICS:
        raise v.error("metric", f"expected one of {', '.join(repr(k) for k in METRICS)}, got {m!r}")
    return m


def _parse_min_ratio(v: Section, concurrency: tuple[int, ...]) -> dict[int, float]:
    raw = v.get("min_ratio", None, True)
    if not isinstance(raw, dict) or not raw:
        raise v.error("min_ratio", "expected a table of <concurrency> = <ratio>, "
                                   "e.g. min_ratio = { 1 = 1.3 }")
    out: dict[int, float] = {}
    _distinct_int_keys(v, "min_ratio", raw, "concurrency")
    for k, r in raw.items():
        c = _int_key(v, f"min_ratio.{k}", k, "concurrency levels")
        if c not in concurrency:
            raise v.error(f"min_ratio.{k}",
                          f"concurrency {c} is not in workload.concurrency {list(concurrency)}")
        out[c] = _ratio(v, f"min_ratio.{k}", r)
    return out


def _ratio(v: Section, key: str, r: Any) -> float:
    if isinstance(r, bool) or not isinstance(r, (int, float)) or not math.isfinite(r) or r <= 0:
        raise v.error(key, f"expected a positive number, got {r!r}")
    return float(r)


def _int_key(sec: Section, key: str, k: str, what: str) -> int:
    """A table key that is an integer, written the one way (`16`, not `016`, `+16`, `1_6` or ` 16`)."""
    if not CANONICAL_INT.fullmatch(k):
        raise sec.error(key, f"keys are {what}, integers written in decimal without sign, leading zeros or '_' "
                             f"(got {k!r})")
    return int(k)


def _distinct_int_keys(sec: Section, table: str, raw: dict[str, Any], what: str) -> None:
    """Two keys of one table that are the same integer (`1` and `"01"`): refused naming both, whichever is
    canonical (TOML keeps both, and a reader taking int(key) would let the later bar win unseen)."""
    seen: dict[int, str] = {}
    for k in raw:
        t = k.strip().replace("_", "")
        if not re.fullmatch(r"\+?[0-9]{1,20}", t):
            continue
        n = int(t)
        if n in seen:
            raise sec.error(table, f"keys {seen[n]!r} and {k!r} are the same {what} {n}: keep one")
        seen[n] = k


def _parse_grid_min_ratio(v: Section, w: WorkloadSpec) -> dict[int, dict[int, float]]:
    """min_ratio = { <context> = { <concurrency> = <ratio> } }: every key one of the grid's."""
    raw = v.get("min_ratio", None, True)
    if not isinstance(raw, dict) or not raw:
        raise v.error("min_ratio", "grid mode (workload.contexts): expected a table of <context> = { <concurrency> "
                                   "= <ratio> }, e.g. min_ratio = { 256 = { 1 = 1.35 } }")
    out: dict[int, dict[int, float]] = {}
    _distinct_int_keys(v, "min_ratio", raw, "context")
    for k, per_c in raw.items():
        ctx = _int_key(v, f"min_ratio.{k}", k, "context lengths")
        if ctx not in w.contexts:
            raise v.error(f"min_ratio.{k}", f"context {ctx} is not in workload.contexts {list(w.contexts)}")
        if not isinstance(per_c, dict) or not per_c:
            raise v.error(f"min_ratio.{k}", f"expected a table of <concurrency> = <ratio> (grid mode), "
                                            f"e.g. {k} = {{ 1 = 1.35 }}, got {per_c!r}")
        out[ctx] = {}
        _distinct_int_keys(v, f"min_ratio.{k}", per_c, "concurrency")
        for ck, r in per_c.items():
            key = f"min_ratio.{k}.{ck}"
            c = _int_key(v, key, ck, "concurrency levels")
            if c not in w.concurrency:
                raise v.error(key, f"concurrency {c} is not in workload.concurrency {list(w.concurrency)}")
            out[ctx][c] = _ratio(v, key, r)
    return out


def _first_burst_min_ratio(v: Section, grid: bool) -> float | None:
    r = v.num("first_burst_min_ratio", None, min_=0.0)
    if r is None:
        return None
    if not grid:
        raise v.error("first_burst_min_ratio", "grid mode only (needs workload.contexts)")
    if not 0 < r <= 1:
        raise v.error("first_burst_min_ratio", f"expected a number in (0, 1], got {r!r}")
    return r
