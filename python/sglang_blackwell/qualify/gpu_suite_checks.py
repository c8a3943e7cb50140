"""The checks of the lab-line GPU suite (test/gpu/labline), as pure functions over what the suite measured, so
the suite and the receipt builder judge the same way and the CPU tests can show each check failing.

Facts they rely on (read from the pinned code):
- The lab target (benchmark/models/gen_lab_pair.py) is a bigram map over token ids [100, 2148) with a logit
  margin of about 20: greedy outputs must not depend on numerics, so they are compared exactly.
- sglang 0.5.14 DeepseekV2: with FlashInfer fusion on, each layer's attention all-reduce is fused into the
  post-attention RMSNorm and each MLP/MoE all-reduce into the next layer's input RMSNorm, except the last
  layer's (`should_fuse_mlp_allreduce_with_next_layer`: `not self.is_last_layer`); the embedding all-reduce is
  never fused. So a forward launches the fused kernel 2 * num_layers - 1 times.
- FlashInfer 0.6.12 `trtllm_create_ipc_workspace_for_all_reduce_fusion`: three symmetric buffers per
  workspace: tp * tokens * hidden * 2 bytes, tp * 256 * 4 bytes of flags, and 3 * tp * tokens * hidden * 2
  bytes of Lamport buffers (capped at MAX_COMM_SIZE each third); SGLang makes two (attention TP and MoE TP).
- sglang 0.5.14 logs once per workspace manager: "FlashInfer AllReduce Fusion enabled and workspace
  initialized: backend=..., rank=..., world_size=..., max_token_num=..., hidden_dim=...".
"""

from __future__ import annotations

import os
import random
import re
from typing import Any

TOKEN_RANGE = (100, 2148)  # the lab target's closed token set S = [100, 2148)

# bf16 tolerance for logprobs. SGLang 0.5.14 computes logits in bf16 (no --enable-fp32-lm-head); the lab
# target's top logit is about 32, where one bf16 ulp is 0.125-0.25, and a logprob is logit - logsumexp (two
# such values). Allowed: |a - b| <= LOGPROB_ATOL + LOGPROB_RTOL * max(|a|, |b|): two ulps at logit ~32 plus
# four bf16 epsilons (2^-8 each) of the value.
LOGPROB_ATOL = 0.5
LOGPROB_RTOL = 4 * 2.0**-8
TOP_OVERLAP_MIN = 3  # of the top-5 ids per position: runner-ups 5 and 6 may swap under bf16 noise

MIN_ACCEPT_LEN = 1.5  # below this an acceptance comparison means nothing (issue 3)
ACCEPT_LEN_ATOL = 0.05  # fusion on vs off: the same drafts are accepted (exactly equal expected)

# FlashInfer 0.6.12 trtllm_ar.py
BARRIER_FLAG_COUNT = 256
MAX_COMM_SIZE = 2147483647 & ~((1 << 21) - 1)
TP_ENV = "SGLB_TP"


def lab_tp(environ: dict[str, str] | None = None) -> int:
    """The suite's tensor-parallel size: $SGLB_TP (default 2; the lab has 2 GPUs, issue 9 runs 4 and 8)."""
    raw = (os.environ if environ is None else environ).get(TP_ENV, "2")
    if not raw.isdigit() or int(raw) < 2:
        raise ValueError(f"{TP_ENV}={raw!r}: expected a whole number >= 2")
    return int(raw)


UPSTREAM_FUSION_MAX_TOKEN_NUM = 2048  # sglang 0.5.14 FUSE_ALLREDUCE_MAX_BATCH_SIZE

WORKSPACE_LINE = re.compile(
    r"FlashInfer AllReduce Fusion enabled and workspace initialized: backend=(?P<backend>\S+), "
    r"rank=(?P<rank>\d+), world_size=(?P<world_size>\d+), max_token_num=(?P<max_token_num>\d+), "
    r"hidden_dim=(?P<hidden_dim>\d+)")
# our P6/P7 patches (rank 0, once): "TorchSymmMemCommunicator: %s; one-shot all-reduce up to %d bytes, two-shot
# below %d bytes (world size %d); NCCL above." with %s = "no multicast" (P6 alone logged an older wording)
SYMM_MEM_LINE = re.compile(r"TorchSymmMemCommunicator: no multicast; one-shot all-reduce up to (?P<oneshot>\d+) "
                           r"bytes, two-shot below (?P<max>\d+) bytes \(world size (?P<world>\d+)\)")


def lab_prompts(n: int = 8, seed: int = 20261130, min_len: int = 8, max_len: int = 40) -> list[list[int]]:
    """Seeded prompts of token ids from the target's closed set (some shorter than the fused path's 48-token
    cap, so prefill takes both paths)."""
    rng = random.Random(seed)
    lo, hi = TOKEN_RANGE
    return [[rng.randrange(lo, hi) for _ in range(rng.randint(min_len, max_len))] for _ in range(n)]


def compare_greedy(a: list[list[int]], b: list[list[int]]) -> dict[str, Any]:
    """Exact token-id comparison of two arms' outputs for the same prompts, in order."""
    out: dict[str, Any] = {"prompts": len(a), "tokens": sum(len(x) for x in a), "first_diff": None}
    if len(a) != len(b):
        return {**out, "equal": False, "why": f"{len(a)} vs {len(b)} outputs"}
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        for j in range(max(len(x), len(y))):
            tx = x[j] if j < len(x) else None
            ty = y[j] if j < len(y) else None
            if tx != ty:
                out["first_diff"] = {"prompt": i, "position": j, "a": tx, "b": ty}
                return {**out, "equal": False,
                        "why": f"prompt {i} differs at output position {j}: {tx} vs {ty}"}
    if not out["tokens"]:
        return {**out, "equal": False, "why": "no output tokens to compare"}
    return {**out, "equal": True, "why": f"{out['tokens']} tokens over {len(a)} prompts identical"}


def bigram_consistency(prompts: list[list[int]], outputs: list[list[int]]) -> dict[str, Any]:
    """The target acts as a bigram map: every output token lies in the closed set, and a token is always
    followed by the same token (last prompt token -> first output, then along each output)."""
    lo, hi = TOKEN_RANGE
    succ: dict[int, int] = {}
    pairs = 0
    for i, (p, o) in enumerate(zip(prompts, outputs, strict=True)):
        out_of_range = [t for t in o if not lo <= t < hi]
        if out_of_range:
            return {"consistent": False, "pairs": pairs,
                    "why": f"prompt {i}: output token {out_of_range[0]} outside [{lo}, {hi})"}
        seq = ([p[-1]] if p else []) + list(o)
        for x, y in zip(seq, seq[1:], strict=False):
            pairs += 1
            if succ.setdefault(x, y) != y:
                return {"consistent": False, "pairs": pairs,
                        "why": f"prompt {i}: token {x} is followed by {y} here and by {succ[x]} elsewhere"}
    if not pairs:
        return {"consistent": False, "pairs": 0, "why": "no outputs"}
    return {"consistent": True, "pairs": pairs, "why": f"{pairs} transitions, one successor per token"}


def accept_length(metas: list[dict[str, Any]]) -> dict[str, Any]:
    """sum(completion_tokens) / sum(spec_verify_ct) over requests (accepted drafts + the bonus token per
    verify, SGLang's definition); None where a request carries no spec_verify_ct."""
    vct = [m.get("spec_verify_ct") for m in metas]
    comp = [m.get("completion_tokens") for m in metas]
    out: dict[str, Any] = {"requests": len(metas), "verify_ct": vct, "completion_tokens": comp}
    if not metas or not all(isinstance(v, (int, float)) and v > 0 for v in vct) \
            or not all(isinstance(c, (int, float)) for c in comp):
        return {**out, "accept_len": None}
    return {**out, "accept_len": round(sum(comp) / sum(vct), 4)}


def compare_accept(on: float | None, off: float | None) -> dict[str, Any]:
    """Accept length with fusion on vs off: both >= MIN_ACCEPT_LEN and within ACCEPT_LEN_ATOL."""
    out = {"on": on, "off": off, "min": MIN_ACCEPT_LEN, "atol": ACCEPT_LEN_ATOL}
    if on is None or off is None:
        return {**out, "ok": False, "why": f"accept length missing (on={on}, off={off})"}
    low = [f"{k}={v}" for k, v in (("on", on), ("off", off)) if v < MIN_ACCEPT_LEN]
    if low:
        return {**out, "ok": False, "why": f"accept length below {MIN_ACCEPT_LEN}: {', '.join(low)} (the "
                                           "comparison would mean nothing)"}
    if abs(on - off) > ACCEPT_LEN_ATOL:
        return {**out, "ok": False, "why": f"accept length {on} with fusion vs {off} without "
                                           f"(|diff| > {ACCEPT_LEN_ATOL})"}
    return {**out, "ok": True, "why": f"accept length {on} vs {off}"}


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= LOGPROB_ATOL + LOGPROB_RTOL * max(abs(a), abs(b))


def compare_logprobs(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> dict[str, Any]:
    """Per request {"token": [[logprob, id], ...], "top": [[[logprob, id], ...] | None, ...]}: the chosen
    token's logprob and every id in both top-k lists must be within the bf16 tolerance; the top-k lists must
    share at least TOP_OVERLAP_MIN ids per position."""
    rule = (f"|a-b| <= {LOGPROB_ATOL} + {LOGPROB_RTOL:.4f}*max(|a|,|b|); top-k overlap >= {TOP_OVERLAP_MIN}")
    worst = 0.0
    compared = 0
    if len(a) != len(b) or not a:
        return {"ok": False, "rule": rule, "why": f"{len(a)} vs {len(b)} requests with logprobs"}
    for r, (ra, rb) in enumerate(zip(a, b, strict=True)):
        ta, tb = ra.get("token") or [], rb.get("token") or []
        if len(ta) != len(tb) or not ta:
            return {"ok": False, "rule": rule, "why": f"request {r}: {len(ta)} vs {len(tb)} token logprobs"}
        for j, (x, y) in enumerate(zip(ta, tb, strict=True)):
            if x[1] != y[1]:
                return {"ok": False, "rule": rule, "why": f"request {r} position {j}: token {x[1]} vs {y[1]}"}
            worst = max(worst, abs(x[0] - y[0]))
            compared += 1
            if not _close(x[0], y[0]):
                return {"ok": False, "rule": rule, "worst_abs_diff": worst,
                        "why": f"request {r} position {j}: token logprob {x[0]} vs {y[0]}"}
        for j, (xa, xb) in enumerate(zip(ra.get("top") or [], rb.get("top") or [], strict=False)):
            if not xa or not xb:
                continue
            da = {int(t): lp for lp, t in xa}
            db = {int(t): lp for lp, t in xb}
            common = set(da) & set(db)
            if len(common) < min(TOP_OVERLAP_MIN, len(da), len(db)):
                return {"ok": False, "rule": rule,
                        "why": f"request {r} position {j}: top-k share {len(common)} ids ({sorted(da)} vs "
                               f"{sorted(db)})"}
            for t in common:
                worst = max(worst, abs(da[t] - db[t]))
                compared += 1
                if not _close(da[t], db[t]):
                    return {"ok": False, "rule": rule, "worst_abs_diff": worst,
                            "why": f"request {r} position {j}: top logprob of id {t}: {da[t]} vs {db[t]}"}
    return {"ok": True, "rule": rule, "compared": compared, "worst_abs_diff": round(worst, 6),
            "why": f"{compared} logprobs within tolerance (worst |diff| {worst:.4g})"}


def logprobs_from_meta(meta: dict[str, Any]) -> dict[str, Any]:
    """SGLang's meta_info (skip_tokenizer_init: text is null) -> {"token": [[lp, id]], "top": [[[lp, id]]]}."""
    tok = [[float(x[0]), int(x[1])] for x in meta.get("output_token_logprobs") or [] if x and x[0] is not None]
    top = [[[float(y[0]), int(y[1])] for y in pos if y and y[0] is not None] if pos else None
           for pos in meta.get("output_top_logprobs") or []]
    return {"token": tok, "top": top}


def fused_kernels_per_forward(num_layers: int) -> int:
    """Fused AR+residual+RMSNorm launches per DeepSeek-V3 forward at TP > 1 with fusion on (see module doc)."""
    return 2 * num_layers - 1


def workspace_lines(log_text: str) -> list[dict[str, Any]]:
    out = []
    for m in WORKSPACE_LINE.finditer(log_text):
        d: dict[str, Any] = m.groupdict()
        for k in ("rank", "world_size", "max_token_num", "hidden_dim"):
            d[k] = int(d[k])
        out.append(d)
    return out


def check_workspace_lines(lines: list[dict[str, Any]], *, max_token_num: int, hidden: int,
                          world_size: int) -> dict[str, Any]:
    """Every rank logged its workspace, all sized for `max_token_num` tokens of `hidden`, backend trtllm."""
    out: dict[str, Any] = {"lines": lines, "expected_max_token_num": max_token_num}
    if not lines:
        return {**out, "ok": False, "why": "no 'workspace initialized' line in the server log (fusion never "
                                           "initialized)"}
    ranks = sorted({ln["rank"] for ln in lines})
    if ranks != list(range(world_size)):
        return {**out, "ok": False, "why": f"workspace lines from ranks {ranks}, expected 0..{world_size - 1}"}
    for ln in lines:
        if (ln["max_token_num"], ln["hidden_dim"], ln["backend"], ln["world_size"]) != \
                (max_token_num, hidden, "trtllm", world_size):
            return {**out, "ok": False,
                    "why": f"rank {ln['rank']}: backend={ln['backend']}, world_size={ln['world_size']}, "
                           f"max_token_num={ln['max_token_num']}, hidden_dim={ln['hidden_dim']}; expected "
                           f"trtllm, {world_size}, {max_token_num}, {hidden}"}
    return {**out, "ok": True, "why": f"{len(lines)} workspace(s), all max_token_num={max_token_num}"}


def workspace_logical_bytes(tp: int, tokens: int, hidden: int, elem_size: int = 2) -> int:
    """Bytes FlashInfer 0.6.12 asks for one trtllm fusion workspace (each buffer 16-byte aligned)."""
    def r16(x: int) -> int:
        return (x + 15) // 16 * 16

    buffer = tp * tokens * hidden * 2
    flags = tp * BARRIER_FLAG_COUNT * 4
    lamport = 3 * min(tp * tokens * hidden * elem_size, MAX_COMM_SIZE)
    return r16(buffer) + r16(flags) + r16(lamport)


def check_workspace_bytes(measured: dict[int, int], tp: int, hidden: int, *, slack: int = 32 << 20) -> dict:
    """Measured device bytes per workspace (by max_token_num) against FlashInfer's own sizes: each within
    [logical, logical + slack] (allocation granularity, signal pads), and the P5 size much smaller."""
    rows = {n: {"measured": b, "logical": workspace_logical_bytes(tp, n, hidden)} for n, b in measured.items()}
    out: dict[str, Any] = {"workspaces": rows, "slack": slack}
    for n, r in rows.items():
        if not r["logical"] <= r["measured"] <= r["logical"] + slack:
            return {**out, "ok": False, "why": f"max_token_num={n}: measured {r['measured']} B, FlashInfer asks "
                                               f"{r['logical']} B (allowed up to +{slack} B)"}
    return {**out, "ok": True, "why": "measured sizes match FlashInfer's workspace sizes"}
