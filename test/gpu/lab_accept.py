"""The accept length a generated lab pair gives for the requests a GPU suite sent, and the check of a measured one
against it, as `bench eagle3` checks its lab configs (issue 24 item 9): the expectation is
benchmark/models/expect_accept.py's (gen_lab_pair.simulate_rounds: SGLang's greedy EAGLE-3 rounds from the
target's bigram map B and the draft's map D, per request), the judgement bench eagle3's own
(verdict.accept_len_check). It replaces a floor of 1.5, which a draft that always fails at position 2 passes (the
exact draft then gives 2.0, not 3.0).

    SGLB_LAB_DRAFT_KIND   which draft SGLB_LAB_DRAFT is (gen_lab_pair.py --draft): "constructed" (the default
                          there and here: exact, every drafted token right) or "miss" (misses by design: 65% / 39%
                          of positions 1 / 2; the target-shaped pair's /tmp/lab61/draft)

Two forms of the figure (bench/eagle3/sglang_api.py):
- "meta": sum(completion_tokens) / sum(spec_verify_ct) over /generate's meta_info (the lab-line suite): counted
  per request, nothing rolls up;
- "server": /server_info avg_spec_accept_length (accepted drafts + 1 per verify) after a reset (the user-path
  suite, over the OpenAI API): SGLang folds it in every 40 decode iterations, so the window's last 0-39 rounds may
  be left out and up to 39 rounds from before the reset come in with the first fold.
The tolerance is twice what counting can move the figure for these requests (the rule the lab configs state for
their accept_len_tolerance): one verify round more or fewer in all, plus, in the server form, the roll-up's
range over the window's own rounds and the pull of 39 earlier rounds (as far off the mean as the window's own
stretches of 39 rounds). The construction leaves no other variance (the target's greedy token leads by
~20 logits, the draft's by more than 16: every round is the simulated one).

Imports nothing heavy at import time: CPU CI collects the GPU suites.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
EXPECT_ACCEPT = REPO / "benchmark" / "models" / "expect_accept.py"
KIND_ENV = "SGLB_LAB_DRAFT_KIND"
KINDS = ("constructed", "miss")  # the drafts whose map D expect_accept.py knows
FORMS = ("meta", "server")


def draft_kind(environ: dict[str, str] | None = None) -> str:
    kind = (os.environ if environ is None else environ).get(KIND_ENV, "constructed")
    if kind not in KINDS:
        raise ValueError(f"{KIND_ENV}={kind!r}: expected one of {', '.join(KINDS)} (gen_lab_pair.py --draft)")
    return kind


def _expect_accept() -> Any:
    if "expect_accept" not in sys.modules:
        spec = importlib.util.spec_from_file_location("expect_accept", EXPECT_ACCEPT)
        mod = importlib.util.module_from_spec(spec)
        sys.modules["expect_accept"] = mod
        spec.loader.exec_module(mod)
    return sys.modules["expect_accept"]


def expectation(target: Path, kind: str, requests: list[tuple[int, int]], steps: int) -> dict[str, Any]:
    """Per form, the accept length the pair in `target` (its lab_pair.json: preset, seed) with draft `kind` gives
    for `requests` ((last prompt token id, output tokens) each, in the order sent, one at a time) at `steps` draft
    steps, and its tolerance."""
    X = _expect_accept()
    G = X.G
    meta = json.loads((target / G.PAIR_FILE).read_text())
    st, dmap = _pair(meta["preset"], meta["seed"], kind)
    reqs = [G.simulate_rounds(st, dmap, last, n, steps) for last, n in requests]
    s = X._summary(reqs, steps)
    rounds = s["verify_rounds"]
    lo, hi = s["accept_len_last_rounds_dropped"]
    rollup = max(abs(lo - s["accept_len"]), abs(hi - s["accept_len"]))
    # up to ROLLUP - 1 rounds of the same construction from before the reset: as far from the mean as the window's
    # own stretches of that many rounds
    seq, k = [a for r in reqs for a in r["accept_per_round"]], min(X.ROLLUP - 1, rounds)
    before = max(abs(sum(seq[i:i + k]) - k * s["accept_len"]) for i in range(len(seq) - k + 1)) / (rounds + k)
    tol = {"meta": 2 * s["accept_len_meta"] / (rounds - 1),
           "server": 2 * (s["accept_len"] / (rounds - 1) + rollup + before)}
    return {"kind": kind, "preset": meta["preset"], "seed": meta["seed"], "steps": steps, "requests": len(reqs),
            "verify_rounds": rounds, "per_position": s["per_position"],
            "meta": {"expect": s["accept_len_meta"], "tolerance": round(tol["meta"], 4)},
            "server": {"expect": s["accept_len"], "tolerance": round(tol["server"], 4)}}


@functools.lru_cache(maxsize=4)
def _pair(preset: str, seed: int, kind: str) -> tuple[Any, Any]:
    """The pair's structure (B) and the draft's map D (gen_lab_pair.py), built once per suite."""
    G = _expect_accept().G
    st = G.build_structure(G.PRESETS[preset], seed)
    return st, {"constructed": lambda: st.succ, "miss": lambda: G.miss_map(st)}[kind]()


def check(expected: dict[str, Any], form: str, got: float | None) -> dict[str, Any]:
    """bench eagle3's accept-length check of `got` against `expected` (expectation()) in `form`."""
    from sglang_blackwell.bench.eagle3.verdict import accept_len_check

    e = expected[form]
    out = {**accept_len_check(e["expect"], e["tolerance"], got, form=form), "draft": expected["kind"],
           "verify_rounds": expected["verify_rounds"]}
    if not out["passed"] and got is not None:
        out["why"] += f" (the {expected['kind']} draft's construction; {KIND_ENV} names the draft SGLB_LAB_DRAFT is)"
    return out
