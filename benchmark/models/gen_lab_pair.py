#!/usr/bin/env python3
"""Generate the lab model pair: a DeepSeek-V3-architecture target that acts as a bigram map with large
logit margins, and EAGLE-3 drafts (sglang's LlamaForCausalLMEagle3, GQA, and Eagle3DeepseekV2ForCausalLM, MLA,
the architecture of the published Kimi-K2.x drafts) built from the same map, so that
speculative acceptance is real and explainable. No training, no downloads. The target comes with a byte-level
BPE tokenizer (lab_tokenizer.py: tokenizer.json, tokenizer_config.json with a chat template), so servers start
as users start them and prompts can be text.

    python3 gen_lab_pair.py --out DIR [--device cuda|cpu] [--seed 0] [--preset lab|kimi61|tiny]
                            [--draft constructed,random,miss,mla,mla-miss | both]

writes DIR/target/{config.json, generation_config.json, model.safetensors, tokenizer.json,
tokenizer_config.json, special_tokens_map.json, lab_pair.json (preset and seed)} and DIR/draft/ (the first
draft kind: constructed = exact, random, miss = misses by design, mla / mla-miss = the exact / missing draft with MLA
attention), DIR/draft-<kind>/ for the others (`--draft both`: DIR/draft-random/), then prints a JSON summary.
Needs only torch and safetensors (the tokenizer files are written as JSON by the standard library). The
construction is explained in README.md next to this file.

Determinism: the structure (bigram map, embedding basis, draft directions) comes from the CPU RNG and is
computed in float64 without BLAS (Hadamard butterflies, element-wise ops), so the map B is the same for a
given seed whatever --device is. The bulk random weights are drawn per tensor from a generator on --device
seeded from (seed, tensor name): the same seed gives byte-identical files on the same device type and
torch version.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
import zlib
from dataclasses import asdict, dataclass

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # lab_tokenizer.py lives next to this script
import lab_tokenizer  # noqa: E402

# ----------------------------------------------------------------------------------------------------------
# Model-shape presets: the only place sizes live.


@dataclass(frozen=True)
class MlaDraftShape:
    """The MLA EAGLE-3 draft's attention (sglang Eagle3DeepseekV2ForCausalLM, srt/models/kimi_k25_eagle3.py):
    DeepSeek-V2 multi-latent attention. The published Kimi-K2.x drafts share the target's MLA dimensions (their
    KV cache has the target's 576-wide latent rows); `None` in a preset means exactly that."""

    heads: int
    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int


@dataclass(frozen=True)
class Preset:
    # target: DeepSeek-V3 architecture
    hidden: int
    layers: int
    heads: int
    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    dense_intermediate: int  # the first (dense) layer's MLP
    moe_intermediate: int  # each routed expert and the shared expert
    routed_experts: int
    experts_per_token: int
    vocab: int
    # the closed token set S = [s_start, s_start + s_size), a power of two
    s_start: int
    s_size: int
    embed_support: int  # coordinates the (Hadamard) embedding basis spreads over, power of two, >= s_size
    witness_dims: int  # coordinates reserved for the TP-mirrored shared expert (see README: "witness")
    # draft: sglang LlamaForCausalLMEagle3, one decoder layer, hidden = target hidden
    draft_heads: int
    draft_kv_heads: int
    draft_head_dim: int
    draft_intermediate: int
    # the MLA draft (README "The MLA draft"); None: the target's heads and MLA dimensions
    mla_draft: MlaDraftShape | None = None


PRESETS: dict[str, Preset] = {
    # 2x H200 lab: hidden and MLA dims of DeepSeek-V3 (a 3-token verify all-reduce is 3 x 7168 x 2 B = 42 KB,
    # as on the Kimi-K2.5 target box), 10 layers, 8 routed experts top-2 + 1 shared. ~6.3 B params, 12.6 GB.
    "lab": Preset(
        hidden=7168, layers=10, heads=128, q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128,
        qk_rope_head_dim=64, v_head_dim=128, dense_intermediate=18432, moe_intermediate=2048,
        routed_experts=8, experts_per_token=2, vocab=32000, s_start=100, s_size=2048, embed_support=4096,
        witness_dims=1024, draft_heads=32, draft_kv_heads=8, draft_head_dim=128, draft_intermediate=4096,
    ),
    # Kimi-K2.5 / DeepSeek-V3's all-reduce shape on one GPU: 61 layers (the first dense), hidden 7168 and the MLA
    # ranks, so a 3-token verify at TP >= 2 does 122 all-reduces of 3 x 7168 bf16 (42 KB). Heads, experts,
    # intermediate sizes and vocabulary are small (8 heads = Kimi-K2.5's 64 per rank at TP=8): 3.15 B params,
    # 6.3 GB. README "The target-shaped pair (kimi61)".
    "kimi61": Preset(
        hidden=7168, layers=61, heads=8, q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128,
        qk_rope_head_dim=64, v_head_dim=128, dense_intermediate=1024, moe_intermediate=128,
        routed_experts=8, experts_per_token=2, vocab=4096, s_start=100, s_size=2048, embed_support=4096,
        witness_dims=1024, draft_heads=32, draft_kv_heads=8, draft_head_dim=128, draft_intermediate=4096,
    ),
    # CPU tests: same construction, small enough for transformers on one CPU core (14.5 M params).
    "tiny": Preset(
        hidden=512, layers=7, heads=8, q_lora_rank=128, kv_lora_rank=64, qk_nope_head_dim=32,
        qk_rope_head_dim=16, v_head_dim=32, dense_intermediate=384, moe_intermediate=128,
        routed_experts=8, experts_per_token=2, vocab=1024, s_start=100, s_size=256, embed_support=256,
        witness_dims=128, draft_heads=8, draft_kv_heads=4, draft_head_dim=64, draft_intermediate=256,
        # the target's MLA ranks are too small for the draft's token directions (kv_lora_rank / 2 = 32 dimensions
        # for 256 tokens): the CPU tests' MLA draft gets larger ones, the same construction
        mla_draft=MlaDraftShape(heads=4, q_lora_rank=128, kv_lora_rank=128, qk_nope_head_dim=64,
                                qk_rope_head_dim=32, v_head_dim=32),
    ),
}

# Construction constants (same for every preset; the README derives them).
EMBED_RMS = 1.0  # rms of every token embedding
SUBLAYER_GAIN = 0.05  # o_proj / down_proj scale: each attention/MLP output is ~3% of the residual stream
WITNESS_GAIN = 4.0  # rms of one TP rank's partial shared-expert output on the witness coordinates
TARGET_LOGIT_GAP = 32.0  # logit of B(t) given a hidden state on embed(t)
TARGET_LOGIT_NOISE = 1.5  # std of the random part of every logit (so non-top logprobs carry numerics)
# whitespace-only tokens (single bytes outside S) score this much below the noise, whatever the context: a JSON
# grammar allows unbounded whitespace between tokens, and a greedy bigram model could otherwise loop on it
WHITESPACE_LOGIT_PENALTY = 30.0
BIAS_EMBED = 1.0  # the embeddings' value on the bias coordinate (a constant input, like a bias, for the lm_head)
# kappa: fc writes kappa * a(B(t)); attention adds kappa * a(token) and subtracts kappa * hidden_norm(hidden).
# The subtraction removes exactly a hidden of rms kappa, so every draft step's output is again kappa * a(its
# prediction): a fixed point, whatever the number of draft steps.
DRAFT_SIGNAL = 10.0
DRAFT_ATTN_SCORE = 60.0  # pre-softmax score of a position with itself (others: ~N(0, 5))
DRAFT_LOGIT_GAP = 30.0  # draft logit of the predicted token at a clean draft-extend step
WITNESS_READ_RATIO = 100.0  # fc reads the witness coords: one wrong aux capture -> garbage 100x the signal
DRAFT_NOISE_GAIN = 0.01  # small random part of every draft weight, relative to its role's scale
# the draft that misses by design (README "A draft that misses by design"): the acceptance of draft positions
# 1, 2 of a round, as published for Kimi-K2.6's EAGLE-3 draft on 8x RTX PRO 6000 (num-steps 2, 3 draft tokens)
MISS_RATES = (0.65, 0.39)
DRAFT_MLP_GAIN = 0.02
# the MLA draft's attention scores (after sglang's softmax scale): a position with itself scores
# MLA_SCORE_NOPE * |M a|^2 + MLA_SCORE_ROPE * |P a|^2 (~80); the position-free part (nope) separates tokens, the
# rotary part (rope) separates a token from its own repeats (README "The MLA draft")
MLA_SCORE_NOPE = 40.0
MLA_SCORE_ROPE = 40.0
RMS_EPS = 1e-6
ROPE_THETA_DRAFT = 10000.0
BOS_ID, EOS_ID = 0, 1
PAIR_FILE = "lab_pair.json"  # in the target directory: generator, preset, seed


def capture_layers(layers: int) -> list[int]:
    """sglang's default EAGLE-3 aux layers for DeepSeek (deepseek_v2.py set_eagle3_layers_to_capture):
    capturing at layer i means the residual stream entering layer i (= output of layer i - 1)."""
    ids = [2, layers // 2, layers - 3]
    if len(set(ids)) != 3 or min(ids) < 1:
        raise ValueError(f"preset needs >= 7 layers for 3 distinct EAGLE-3 capture layers, got {layers}")
    return ids


# ----------------------------------------------------------------------------------------------------------
# Structure: everything the target and the draft share, drawn from the CPU RNG, computed exactly.


def _hadamard_entries(rows: torch.Tensor, n: int) -> torch.Tensor:
    """Sylvester Hadamard matrix entries H[r, c] = (-1)^popcount(r & c) for the given rows, as float64."""
    cols = torch.arange(n, dtype=torch.int64)
    x = rows[:, None] & cols[None, :]
    parity = torch.zeros_like(x)
    while bool(x.any()):
        parity ^= x & 1
        x = x >> 1
    return 1.0 - 2.0 * parity.double()


def _fwht_rows(m: torch.Tensor) -> torch.Tensor:
    """m @ H for a Sylvester Hadamard matrix H (symmetric), by butterflies: exact order, no BLAS."""
    out, n = m.clone(), m.shape[-1]
    h = 1
    while h < n:
        v = out.view(*out.shape[:-1], n // (2 * h), 2, h)
        a, b = v[..., 0, :].clone(), v[..., 1, :].clone()
        v[..., 0, :], v[..., 1, :] = a + b, a - b
        h *= 2
    return out


@dataclass
class Structure:
    preset: Preset
    cycle: torch.Tensor  # order of S in the single cycle of B (indices into S)
    succ: torch.Tensor  # succ[i] = index of B(S_i) in S
    pred: torch.Tensor  # pred[i] = index of B^-1(S_i)
    had_rows: torch.Tensor  # Hadamard row used for S_i
    support: torch.Tensor  # target coordinates of the embedding basis
    support_sign: torch.Tensor
    witness: torch.Tensor  # target coordinates only the mirrored shared experts write (sum exactly 0)
    bias: int  # one target coordinate every embedding holds BIAS_EMBED on and nothing ever writes
    basis: torch.Tensor  # E: (s_size, hidden) float64, orthonormal rows; embed(S_i) = EMBED_RMS*sqrt(H)*E[i]
    draft_dirs: torch.Tensor  # (d_A, s_size) float64: unit column a(S_i) on draft coordinates [0, d_A)

    @property
    def d_a(self) -> int:
        return self.draft_dirs.shape[0]

    def from_basis(self, m: torch.Tensor) -> torch.Tensor:
        """The (out, hidden) matrix L with L @ E[i] = m[:, i] that is zero on the orthogonal complement of E,
        i.e. m @ E, computed with a Hadamard transform instead of a matmul."""
        p = self.preset
        padded = torch.zeros(m.shape[0], p.embed_support, dtype=torch.float64)
        padded[:, self.had_rows] = m
        dense = _fwht_rows(padded) * self.support_sign / math.sqrt(p.embed_support)
        out = torch.zeros(m.shape[0], p.hidden, dtype=torch.float64)
        out[:, self.support] = dense
        return out


def build_structure(p: Preset, seed: int) -> Structure:
    if p.s_size & (p.s_size - 1) or p.embed_support & (p.embed_support - 1) or p.embed_support < p.s_size:
        raise ValueError("s_size and embed_support must be powers of two with embed_support >= s_size")
    if p.embed_support + p.witness_dims + 1 > p.hidden:
        raise ValueError("embed_support + witness_dims + 1 (the bias coordinate) must fit in hidden")
    d_a = min(p.draft_kv_heads * p.draft_head_dim, p.hidden)
    g = torch.Generator().manual_seed(seed)
    cycle = torch.randperm(p.s_size, generator=g)
    succ = torch.empty_like(cycle)
    succ[cycle] = cycle.roll(-1)  # B: one cycle through all of S (no fixed points, no short loops)
    pred = torch.empty_like(succ)
    pred[succ] = torch.arange(p.s_size)
    had_rows = torch.randperm(p.embed_support, generator=g)[: p.s_size]
    coords = torch.randperm(p.hidden, generator=g)
    support = coords[: p.embed_support]
    witness = coords[p.embed_support : p.embed_support + p.witness_dims]
    bias = int(coords[p.embed_support + p.witness_dims])
    support_sign = torch.randint(0, 2, (p.embed_support,), generator=g).double() * 2 - 1
    basis = torch.zeros(p.s_size, p.hidden, dtype=torch.float64)
    had = _hadamard_entries(had_rows, p.embed_support)
    basis[:, support] = had * support_sign / math.sqrt(p.embed_support)
    dirs = torch.randn(d_a, p.s_size, generator=g, dtype=torch.float64)
    dirs = dirs / dirs.pow(2).sum(0, keepdim=True).sqrt()
    return Structure(p, cycle, succ, pred, had_rows, support, support_sign, witness, bias, basis, dirs)


# ----------------------------------------------------------------------------------------------------------
# Weights


class Weights:
    """Random tensors drawn per name (seeded by seed and name) on the chosen device, combined there in
    float32 with the (CPU, float64) structure, and kept as CPU tensors of the checkpoint dtype."""

    def __init__(self, seed: int, device: str):
        self.seed, self.device, self.tensors = seed, device, {}

    def randn(self, name: str, *shape: int, std: float) -> torch.Tensor:
        if self.device == "meta":  # names and shapes only (tests of a preset too big to build on CPU)
            return torch.empty(*shape, device="meta")
        g = torch.Generator(device=self.device).manual_seed(self.seed * 1_000_003 + zlib.crc32(name.encode()))
        return torch.randn(*shape, generator=g, device=self.device, dtype=torch.float32).mul_(std)

    def dev(self, t: torch.Tensor) -> torch.Tensor:
        return t.to(self.device, torch.float32)

    def zeros(self, *shape: int) -> torch.Tensor:
        return torch.zeros(*shape, device=self.device)

    def put(self, name: str, t: torch.Tensor, dtype: torch.dtype = torch.bfloat16) -> None:
        t = t.to(dtype).contiguous()
        self.tensors[name] = t if t.is_meta else t.cpu()


def token_index(p: Preset) -> torch.Tensor:
    """Index into S of the token every vocabulary id behaves like (ids outside S wrap into S)."""
    return (torch.arange(p.vocab) - p.s_start) % p.s_size


def target_config(p: Preset) -> dict:
    return {
        "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
        "vocab_size": p.vocab, "hidden_size": p.hidden, "intermediate_size": p.dense_intermediate,
        "moe_intermediate_size": p.moe_intermediate, "num_hidden_layers": p.layers,
        "num_attention_heads": p.heads, "num_key_value_heads": p.heads,
        "q_lora_rank": p.q_lora_rank, "kv_lora_rank": p.kv_lora_rank, "qk_rope_head_dim": p.qk_rope_head_dim,
        "qk_nope_head_dim": p.qk_nope_head_dim, "v_head_dim": p.v_head_dim,
        "n_routed_experts": p.routed_experts, "n_shared_experts": 1,
        "num_experts_per_tok": p.experts_per_token,
        "first_k_dense_replace": 1, "moe_layer_freq": 1, "n_group": 1, "topk_group": 1,
        "topk_method": "noaux_tc", "scoring_func": "sigmoid", "norm_topk_prob": True,
        "routed_scaling_factor": 2.5, "num_nextn_predict_layers": 0, "ep_size": 1,
        "hidden_act": "silu", "rms_norm_eps": RMS_EPS, "initializer_range": 0.02,
        "tie_word_embeddings": False,
        "max_position_embeddings": 163840, "rope_theta": 10000,
        "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096,
                         "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0},
        "attention_bias": False, "attention_dropout": 0.0, "use_cache": True,
        "bos_token_id": BOS_ID, "eos_token_id": EOS_ID, "torch_dtype": "bfloat16",
    }


def build_target(st: Structure, w: Weights) -> None:
    p, H = st.preset, st.preset.hidden
    keep = torch.ones(H, 1, device=w.device)  # rows a sublayer may write: all but the witness and bias coords
    keep[st.witness.to(w.device)] = 0.0
    keep[st.bias] = 0.0
    emb = w.dev(st.basis)[token_index(p).to(w.device)].mul_(EMBED_RMS * math.sqrt(H))
    emb[:, st.bias] = BIAS_EMBED
    w.put("model.embed_tokens.weight", emb)
    del emb

    def lin(name: str, out_f: int, in_f: int, gain: float = 1.0, rows: torch.Tensor | None = None) -> None:
        t = w.randn(name, out_f, in_f, std=gain / math.sqrt(in_f))
        w.put(name, t if rows is None else t.mul_(rows))

    def ones(name: str, n: int) -> None:
        w.put(name, torch.ones(n))

    nh, qk = p.heads, p.qk_nope_head_dim + p.qk_rope_head_dim
    for i in range(p.layers):
        pre = f"model.layers.{i}."
        ones(pre + "input_layernorm.weight", H)
        ones(pre + "post_attention_layernorm.weight", H)
        lin(pre + "self_attn.q_a_proj.weight", p.q_lora_rank, H)
        ones(pre + "self_attn.q_a_layernorm.weight", p.q_lora_rank)
        lin(pre + "self_attn.q_b_proj.weight", nh * qk, p.q_lora_rank)
        lin(pre + "self_attn.kv_a_proj_with_mqa.weight", p.kv_lora_rank + p.qk_rope_head_dim, H)
        ones(pre + "self_attn.kv_a_layernorm.weight", p.kv_lora_rank)
        lin(pre + "self_attn.kv_b_proj.weight", nh * (p.qk_nope_head_dim + p.v_head_dim), p.kv_lora_rank)
        lin(pre + "self_attn.o_proj.weight", H, nh * p.v_head_dim, SUBLAYER_GAIN, keep)
        if i == 0:  # first_k_dense_replace = 1
            lin(pre + "mlp.gate_proj.weight", p.dense_intermediate, H)
            lin(pre + "mlp.up_proj.weight", p.dense_intermediate, H)
            lin(pre + "mlp.down_proj.weight", H, p.dense_intermediate, SUBLAYER_GAIN, keep)
            continue
        lin(pre + "mlp.gate.weight", p.routed_experts, H)
        w.put(pre + "mlp.gate.e_score_correction_bias", torch.zeros(p.routed_experts), torch.float32)
        for e in range(p.routed_experts):
            q = pre + f"mlp.experts.{e}."
            lin(q + "gate_proj.weight", p.moe_intermediate, H)
            lin(q + "up_proj.weight", p.moe_intermediate, H)
            lin(q + "down_proj.weight", H, p.moe_intermediate, SUBLAYER_GAIN, keep)
        build_witness_expert(st, w, pre + "mlp.shared_experts.")
    ones("model.norm.weight", H)
    head = w.randn("lm_head.weight", p.vocab, H, std=TARGET_LOGIT_NOISE / math.sqrt(H))
    head[p.s_start : p.s_start + p.s_size] += w.dev(TARGET_LOGIT_GAP / math.sqrt(H) * st.basis[st.pred])
    # the residual's bias coordinate is BIAS_EMBED in every context (nothing writes it), so after the final norm
    # it is BIAS_EMBED / rms(h): a row entry -c / BIAS_EMBED there scores -c / rms(h) ~ -c whatever the context
    ws = torch.tensor(lab_tokenizer.whitespace_ids(p.vocab, p.s_start, p.s_size), device=w.device)
    head[ws, st.bias] -= WHITESPACE_LOGIT_PENALTY / BIAS_EMBED
    w.put("lm_head.weight", head)


def build_witness_expert(st: Structure, w: Weights, pre: str) -> None:
    """The shared expert as two mirrored halves: identical gate/up rows, negated down columns, writing only
    the witness coordinates. Tensor parallelism splits the intermediate dim in contiguous halves, so each
    TP=2 rank's partial sum is large (WITNESS_GAIN) and their all-reduced sum is exactly zero: the target
    is unchanged, but an aux hidden state captured before the all-reduce is full of it (see README)."""
    p, H, half = st.preset, st.preset.hidden, st.preset.moe_intermediate // 2
    gate = w.randn(pre + "gate_proj.weight", half, H, std=1 / math.sqrt(H))
    up = w.randn(pre + "up_proj.weight", half, H, std=1 / math.sqrt(H))
    d = w.randn(pre + "down_proj.weight", p.witness_dims, half, std=WITNESS_GAIN / (0.6 * math.sqrt(half)))
    down = w.zeros(H, 2 * half)
    wit = st.witness.to(w.device)
    down[wit, :half], down[wit, half:] = d, -d
    w.put(pre + "gate_proj.weight", torch.cat([gate, gate]))
    w.put(pre + "up_proj.weight", torch.cat([up, up]))
    w.put(pre + "down_proj.weight", down)


def draft_config(p: Preset) -> dict:
    caps = capture_layers(p.layers)
    return {
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama",
        "hidden_size": p.hidden, "intermediate_size": p.draft_intermediate, "num_hidden_layers": 1,
        "num_attention_heads": p.draft_heads, "num_key_value_heads": p.draft_kv_heads,
        "head_dim": p.draft_head_dim, "hidden_act": "silu", "rms_norm_eps": RMS_EPS,
        "max_position_embeddings": 163840, "rope_theta": ROPE_THETA_DRAFT, "rope_scaling": None,
        "vocab_size": p.vocab, "draft_vocab_size": p.s_size, "target_hidden_size": p.hidden,
        "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False,
        # layer ids before sglang's "+1" (sglang captures the input of layer id+1 when the first id is 1)
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [c - 1 for c in caps],
                         "use_aux_hidden_state": True},
        "bos_token_id": BOS_ID, "eos_token_id": EOS_ID, "torch_dtype": "bfloat16", "use_cache": True,
    }


def _token_maps(w: Weights, p: Preset) -> None:
    # d2t[j] = target id - draft id (sglang: hot_token_id = d2t + arange); t2d marks target ids in S
    w.put("d2t", torch.full((p.s_size,), p.s_start, dtype=torch.int64), torch.int64)
    t2d = torch.zeros(p.vocab, dtype=torch.bool)
    t2d[p.s_start : p.s_start + p.s_size] = True
    w.put("t2d", t2d, torch.bool)


def build_draft_constructed(st: Structure, w: Weights, dmap: torch.Tensor | None = None) -> None:
    """See README "Construction: the draft". Draft residual coordinates [0, d_A) carry a(x), the unit
    direction of token x. fc(aux of t) = kappa * sqrt(H) * a(B(t)); attention (each head attends to its own
    position) adds kappa * sqrt(H) * a(input token) and subtracts kappa * hidden_norm(hidden) on [0, d_A);
    lm_head row u reads the directions of the tokens the draft maps to u: a(B^-1(u)) for the exact draft
    (dmap = B), the sum of a(x) over dmap(x) = u for a draft map dmap (indices into S)."""
    p, H, d_a = st.preset, st.preset.hidden, st.d_a
    hd, nkv, nq = p.draft_head_dim, p.draft_kv_heads, p.draft_heads
    rep = nq // nkv
    eps = DRAFT_NOISE_GAIN

    def noise(name: str, *shape: int, scale: float) -> torch.Tensor:
        return w.randn(name, *shape, std=eps * scale / math.sqrt(shape[-1]))

    for n in ("midlayer.input_layernorm.weight", "midlayer.hidden_norm.weight",
              "midlayer.post_attention_layernorm.weight", "norm.weight"):
        w.put(n, torch.ones(H))

    # fc: 3 x hidden -> hidden, the mean of the three captured states through F = F_E + F_W
    f = w.zeros(H, H)
    f[:d_a] = w.dev(st.from_basis(DRAFT_SIGNAL / EMBED_RMS * st.draft_dirs[:, st.succ]))
    # a witness of rms WITNESS_GAIN in one of the three captures gives garbage of norm
    # read * WITNESS_GAIN * sqrt(d_A) / 3 = WITNESS_READ_RATIO * (signal norm DRAFT_SIGNAL * sqrt(H))
    read = 3 * WITNESS_READ_RATIO * DRAFT_SIGNAL * math.sqrt(H) / (WITNESS_GAIN * math.sqrt(d_a))
    wit_read = w.randn("fc.witness", d_a, p.witness_dims, std=read / math.sqrt(p.witness_dims))
    f[:d_a, st.witness.to(w.device)] = wit_read
    fc = torch.cat([f, f, f], dim=1) / 3 + noise("fc.weight", H, 3 * H, scale=DRAFT_SIGNAL)
    w.put("fc.weight", fc)

    # attention: q = k = K_g(norm(embed)) per kv group (self-match score DRAFT_ATTN_SCORE); v on [0, d_A)
    k_std = math.sqrt(DRAFT_ATTN_SCORE / (H * math.sqrt(hd)))
    kg = w.randn("midlayer.self_attn.k_proj.groups", nkv, hd, H, std=k_std)
    kg[:, :, st.bias] = 0.0  # every embedding holds the same value there: q and k ignore it
    k = torch.cat([kg.reshape(nkv * hd, H), w.zeros(nkv * hd, H)], dim=1)
    q = torch.cat([kg.repeat_interleave(rep, dim=0).reshape(nq * hd, H), w.zeros(nq * hd, H)], dim=1)
    v = w.zeros(nkv * hd, 2 * H)
    v[:d_a, :H] = w.dev(st.from_basis(DRAFT_SIGNAL * st.draft_dirs))
    v[:d_a, H : H + d_a] = -DRAFT_SIGNAL * torch.eye(d_a, device=w.device)
    for name, t in (("q_proj", q), ("k_proj", k), ("v_proj", v)):
        full = f"midlayer.self_attn.{name}.weight"
        w.put(full, t + noise(full, *t.shape, scale=1.0))
    o = w.zeros(H, nq * hd)
    c = torch.arange(d_a, device=w.device)
    for r in range(rep):  # o[c] = mean over the query heads of kv group c // hd of their output dim c % hd
        o[c, ((c // hd) * rep + r) * hd + c % hd] = 1.0 / rep
    o_name = "midlayer.self_attn.o_proj.weight"
    w.put(o_name, o + noise(o_name, H, nq * hd, scale=1.0))

    inter = p.draft_intermediate
    for name, shape, std in (("gate_proj", (inter, H), 1 / math.sqrt(H)),
                             ("up_proj", (inter, H), 1 / math.sqrt(H)),
                             ("down_proj", (H, inter), DRAFT_MLP_GAIN / math.sqrt(inter))):
        full = f"midlayer.mlp.{name}.weight"
        w.put(full, w.randn(full, *shape, std=std))

    dmap = st.succ if dmap is None else dmap
    reads = torch.zeros_like(st.draft_dirs).index_add_(1, dmap, st.draft_dirs)  # column u: sum of a(x), D(x) = u
    head = w.zeros(p.s_size, H)
    head[:, :d_a] = w.dev(DRAFT_LOGIT_GAP / math.sqrt(H) * reads.T)
    w.put("lm_head.weight", head + noise("lm_head.weight", p.s_size, H, scale=DRAFT_LOGIT_GAP / math.sqrt(H)))
    _token_maps(w, p)


def build_draft_random(st: Structure, w: Weights) -> None:
    """Same names, shapes and token maps, untrained random weights: must not get drafts accepted."""
    p, H = st.preset, st.preset.hidden
    hd, nkv, nq, inter = p.draft_head_dim, p.draft_kv_heads, p.draft_heads, p.draft_intermediate

    def lin(name: str, out_f: int, in_f: int) -> None:
        w.put(name, w.randn("random." + name, out_f, in_f, std=1 / math.sqrt(in_f)))

    for n in ("midlayer.input_layernorm.weight", "midlayer.hidden_norm.weight",
              "midlayer.post_attention_layernorm.weight", "norm.weight"):
        w.put(n, torch.ones(H))
    lin("fc.weight", H, 3 * H)
    lin("midlayer.self_attn.q_proj.weight", nq * hd, 2 * H)
    lin("midlayer.self_attn.k_proj.weight", nkv * hd, 2 * H)
    lin("midlayer.self_attn.v_proj.weight", nkv * hd, 2 * H)
    lin("midlayer.self_attn.o_proj.weight", H, nq * hd)
    lin("midlayer.mlp.gate_proj.weight", inter, H)
    lin("midlayer.mlp.up_proj.weight", inter, H)
    lin("midlayer.mlp.down_proj.weight", H, inter)
    lin("lm_head.weight", p.s_size, H)
    _token_maps(w, p)


# ----------------------------------------------------------------------------------------------------------
# The draft that misses by design


def miss_blocks(s_size: int, rates: tuple[float, ...] = MISS_RATES) -> list[int]:
    """The rounds one pass around the cycle of B makes, in cycle order: each entry j is a block of j agreeing
    tokens followed by one disagreeing token (j + 1 tokens; a round starting there accepts j drafts). With k =
    len(rates) draft steps, a block of j <= k is one round of accept length j + 1, wherever a request enters it
    a round re-aligns to the blocks after one round, and the fraction of rounds accepting >= s drafts is
    rates[s - 1]. Counts c_j = R (r_j - r_{j+1}) with R = |S| / (1 + sum(rates)) rounds, rounded, the j = 0
    count closing the cycle exactly; the types are interleaved as evenly as possible (smooth round robin), so
    every stretch of the cycle has nearly the same mix."""
    r = [1.0, *rates, 0.0]
    if any(not 0 <= b <= a <= 1 for a, b in zip(r, r[1:], strict=False)):
        raise ValueError(f"miss rates {rates}: expected 1 >= r1 >= r2 >= ... >= 0")
    rounds = round(s_size / (1 + sum(rates)))
    counts = [round(rounds * (r[j] - r[j + 1])) for j in range(len(rates) + 1)]
    counts[0] = s_size - sum(c * (j + 1) for j, c in enumerate(counts) if j)
    if counts[0] < 0:
        raise ValueError(f"miss rates {rates}: no block sequence of {s_size} tokens has them")
    total = sum(counts)
    out: list[int] = []
    used = [0] * len(counts)
    for i in range(total):  # smooth round robin: the type furthest behind its share goes next
        j = max(range(len(counts)), key=lambda j: (counts[j] * (i + 1) / total - used[j], -j))
        used[j] += 1
        out.append(j)
    return out


def miss_agree(st: Structure, rates: tuple[float, ...] = MISS_RATES) -> torch.Tensor:
    """agree[i]: whether the miss draft predicts B correctly after token S_i (laid out along B's cycle by
    miss_blocks, starting at cycle[0])."""
    labels = [lab for j in miss_blocks(st.preset.s_size, rates) for lab in [True] * j + [False]]
    agree = torch.zeros(st.preset.s_size, dtype=torch.bool)
    agree[st.cycle] = torch.tensor(labels)
    return agree


def miss_map(st: Structure, rates: tuple[float, ...] = MISS_RATES) -> torch.Tensor:
    """The miss draft's map D (indices into S): D(x) = B(x) where it agrees, else B(B(x)) (never B(x): B is one
    cycle longer than 2)."""
    return torch.where(miss_agree(st, rates), st.succ, st.succ[st.succ])


def build_draft_miss(st: Structure, w: Weights) -> None:
    build_draft_constructed(st, w, miss_map(st))


# ----------------------------------------------------------------------------------------------------------
# The MLA draft: sglang's Eagle3DeepseekV2ForCausalLM (README "The MLA draft")


def mla_shape(p: Preset) -> MlaDraftShape:
    """The MLA draft's attention shape: the preset's own, else the target's heads and MLA dimensions."""
    return p.mla_draft or MlaDraftShape(heads=p.heads, q_lora_rank=p.q_lora_rank, kv_lora_rank=p.kv_lora_rank,
                                        qk_nope_head_dim=p.qk_nope_head_dim, qk_rope_head_dim=p.qk_rope_head_dim,
                                        v_head_dim=p.v_head_dim)


def mla_softmax_scale(m: MlaDraftShape) -> float:
    """sglang DeepseekV2AttentionMLA.scaling without rope scaling (the draft's config has none)."""
    return (m.qk_nope_head_dim + m.qk_rope_head_dim) ** -0.5


def mla_dims(st: Structure) -> int:
    """d_M: the draft coordinates (and the latent's halves) the MLA draft's token directions live in. The latent
    (kv_lora_rank) holds a(input token) in its first d_M entries and a(hidden) in the next d_M, so that its RMS
    norm (kv_a_layernorm) is the same for every token; the values are then read back out of it per head."""
    m = mla_shape(st.preset)
    d = m.kv_lora_rank // 2
    if d % m.v_head_dim or m.heads % (d // m.v_head_dim) or d > st.d_a:
        raise ValueError(f"MLA draft shape {m}: kv_lora_rank / 2 = {d} must be a multiple of v_head_dim, the heads "
                         f"a multiple of (kv_lora_rank / 2) / v_head_dim, and at most {st.d_a}")
    return d


def mla_dirs(st: Structure) -> torch.Tensor:
    """(d_M, s_size) float64: the MLA draft's unit token directions a(S_i): the first d_M rows of the GQA draft's
    directions, renormalized (no new random draw: B and every other structure stay as they are)."""
    d = st.draft_dirs[: mla_dims(st)]
    return d / d.pow(2).sum(0, keepdim=True).sqrt()


def mla_draft_config(p: Preset) -> dict:
    """The MLA draft's config: the EAGLE-3 keys of draft_config and DeepSeek-V3's attention keys, with the
    field names of the published Kimi-K2.x MLA drafts (architectures Eagle3DeepseekV2ForCausalLM, the target's
    MLA ranks, eagle_config), as sglang 0.5.14's kimi_k25_eagle3.py and model_config.py read them."""
    m, caps = mla_shape(p), capture_layers(p.layers)
    return {
        "architectures": ["Eagle3DeepseekV2ForCausalLM"], "model_type": "deepseek_v3",
        "hidden_size": p.hidden, "intermediate_size": p.draft_intermediate, "num_hidden_layers": 1,
        "num_attention_heads": m.heads, "num_key_value_heads": m.heads,
        "q_lora_rank": m.q_lora_rank, "kv_lora_rank": m.kv_lora_rank, "qk_nope_head_dim": m.qk_nope_head_dim,
        "qk_rope_head_dim": m.qk_rope_head_dim, "v_head_dim": m.v_head_dim,
        "hidden_act": "silu", "rms_norm_eps": RMS_EPS, "max_position_embeddings": 163840,
        # plain RoPE (no YaRN): the softmax scale is then 1/sqrt(qk_head_dim) and the repeat separation is the
        # README's; DeepSeek's interleaved rotary layout (sglang's default rope_interleave)
        "rope_theta": ROPE_THETA_DRAFT, "rope_scaling": None, "rope_interleave": True,
        "vocab_size": p.vocab, "draft_vocab_size": p.s_size, "target_hidden_size": p.hidden,
        "tie_word_embeddings": False, "attention_bias": False,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [c - 1 for c in caps], "use_aux_hidden_state": True},
        "bos_token_id": BOS_ID, "eos_token_id": EOS_ID, "torch_dtype": "bfloat16", "use_cache": True,
    }


def build_draft_mla(st: Structure, w: Weights, dmap: torch.Tensor | None = None) -> None:
    """The constructed draft of build_draft_constructed in Eagle3DeepseekV2ForCausalLM's layer (MLA attention,
    checkpoint names `layers.0.*` as the published drafts have them): the same fc, MLP, norms, lm_head and token
    maps on the draft coordinates [0, d_M), and an attention that computes what the GQA draft's does:
      x = cat(norm(embed(token)), hidden_norm(hidden));  a = a(token), b = hidden_norm(hidden)[:d_M] / sqrt(H)
      q_a = [a, 0...] -> q_a_layernorm -> sqrt(q_lora) a;  q_b: per head q_nope = s_n M a, q_pe = s_r P a
      kv_a = [a, b, 0..., k_pe = s_r P a];  kv_a_layernorm(latent) = sqrt(kv_lora / 2) [a, b] (|a| = |b| = 1)
      kv_b: per head k_nope = s_n M a;  v = g (a - b) on its block of v_head_dim draft coordinates
      o_proj: the mean over the heads of a block, back onto those coordinates
    so a position attends to itself (score MLA_SCORE_NOPE |M a|^2 + MLA_SCORE_ROPE |P a|^2 after the softmax
    scale; other tokens ~N(0, 7), a repeat of the same token MLA_SCORE_NOPE |M a|^2 plus a rotary part that decays
    with the distance) and adds kappa sqrt(H) (a(token) - hidden's direction): the GQA draft's erase-and-replace.
    dmap: the draft's map (indices into S), as in build_draft_constructed."""
    p, H = st.preset, st.preset.hidden
    m, d = mla_shape(p), mla_dims(st)
    dirs = mla_dirs(st)
    nope, rope, hv = m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim
    qk = nope + rope
    blocks = d // hv
    per_block = m.heads // blocks
    scale = mla_softmax_scale(m)
    s_n, s_r = math.sqrt(MLA_SCORE_NOPE / scale), math.sqrt(MLA_SCORE_ROPE / scale)
    latent = math.sqrt(m.kv_lora_rank / 2)  # kv_a_layernorm's gain on the latent [a, b]
    eps = DRAFT_NOISE_GAIN

    def noise(name: str, *shape: int, scale: float) -> torch.Tensor:
        return w.randn(name, *shape, std=eps * scale / math.sqrt(shape[-1]))

    pre = "layers.0."
    for n in (pre + "input_layernorm.weight", pre + "hidden_norm.weight", pre + "post_attention_layernorm.weight",
              "norm.weight"):
        w.put(n, torch.ones(H))
    w.put(pre + "self_attn.q_a_layernorm.weight", torch.ones(m.q_lora_rank))
    w.put(pre + "self_attn.kv_a_layernorm.weight", torch.ones(m.kv_lora_rank))

    # fc as build_draft_constructed's, on the MLA draft's directions
    f = w.zeros(H, H)
    f[:d] = w.dev(st.from_basis(DRAFT_SIGNAL / EMBED_RMS * dirs[:, st.succ]))
    read = 3 * WITNESS_READ_RATIO * DRAFT_SIGNAL * math.sqrt(H) / (WITNESS_GAIN * math.sqrt(d))
    f[:d, st.witness.to(w.device)] = w.randn("mla.fc.witness", d, p.witness_dims, std=read / math.sqrt(p.witness_dims))
    w.put("fc.weight", torch.cat([f, f, f], dim=1) / 3 + noise("mla.fc.weight", H, 3 * H, scale=DRAFT_SIGNAL))

    # the token projections: a(t) from the embedding half of x (norm(embed(t)) = sqrt(H) E[t]), M and P
    to_a = w.dev(st.from_basis(dirs)) / math.sqrt(H)  # (d, H): norm(embed(t)) -> a(t)
    to_a[:, st.bias] = 0.0
    mm = w.randn("mla.nope_projection", nope, d, std=1 / math.sqrt(nope))
    pp = w.randn("mla.rope_projection", rope, d, std=1 / math.sqrt(rope))

    q_a = w.zeros(m.q_lora_rank, 2 * H)
    q_a[:d, :H] = to_a
    name = pre + "self_attn.q_a_proj.weight"
    w.put(name, q_a + noise(name, m.q_lora_rank, 2 * H, scale=1.0))
    q_b = w.zeros(m.heads, qk, m.q_lora_rank)  # q_a_layernorm(q_a) = sqrt(q_lora) a
    q_b[:, :nope, :d] = s_n / math.sqrt(m.q_lora_rank) * mm
    q_b[:, nope:, :d] = s_r / math.sqrt(m.q_lora_rank) * pp
    name = pre + "self_attn.q_b_proj.weight"
    q_b = q_b.reshape(m.heads * qk, m.q_lora_rank)
    w.put(name, q_b + noise(name, *q_b.shape, scale=s_n))

    kv_a = w.zeros(m.kv_lora_rank + rope, 2 * H)
    kv_a[:d, :H] = to_a
    kv_a[d : 2 * d, H : H + d] = torch.eye(d, device=w.device) / math.sqrt(H)  # hidden_norm(hidden)[:d] / sqrt(H)
    kv_a[m.kv_lora_rank :, :H] = s_r * pp @ to_a
    name = pre + "self_attn.kv_a_proj_with_mqa.weight"
    w.put(name, kv_a + noise(name, *kv_a.shape, scale=1.0))

    kv_b = w.zeros(m.heads, nope + hv, m.kv_lora_rank)
    kv_b[:, :nope, :d] = s_n / latent * mm
    g = DRAFT_SIGNAL * math.sqrt(H) / latent
    r = torch.arange(hv, device=w.device)
    o = w.zeros(H, m.heads * hv)
    for h in range(m.heads):
        blk = (h // per_block) * hv
        kv_b[h, nope + r, blk + r] = g
        kv_b[h, nope + r, d + blk + r] = -g
        o[blk + r, h * hv + r] = 1.0 / per_block
    name = pre + "self_attn.kv_b_proj.weight"
    kv_b = kv_b.reshape(m.heads * (nope + hv), m.kv_lora_rank)
    w.put(name, kv_b + noise(name, *kv_b.shape, scale=s_n))
    name = pre + "self_attn.o_proj.weight"
    w.put(name, o + noise(name, *o.shape, scale=1.0))

    inter = p.draft_intermediate
    for n, shape, std in (("gate_proj", (inter, H), 1 / math.sqrt(H)), ("up_proj", (inter, H), 1 / math.sqrt(H)),
                          ("down_proj", (H, inter), DRAFT_MLP_GAIN / math.sqrt(inter))):
        full = pre + f"mlp.{n}.weight"
        w.put(full, w.randn("mla." + full, *shape, std=std))

    dmap = st.succ if dmap is None else dmap
    reads = torch.zeros_like(dirs).index_add_(1, dmap, dirs)
    head = w.zeros(p.s_size, H)
    head[:, :d] = w.dev(DRAFT_LOGIT_GAP / math.sqrt(H) * reads.T)
    w.put("lm_head.weight", head + noise("mla.lm_head.weight", p.s_size, H, scale=DRAFT_LOGIT_GAP / math.sqrt(H)))
    _token_maps(w, p)


def build_draft_mla_miss(st: Structure, w: Weights) -> None:
    build_draft_mla(st, w, miss_map(st))


def simulate_rounds(st: Structure, dmap: torch.Tensor, last_prompt_id: int, output_len: int,
                    steps: int) -> dict:
    """SGLang's greedy EAGLE-3 decoding (topk 1) of one request, from the construction alone: the prefill emits
    t = B(last prompt token); each round drafts d1 = D(t), d2 = D(d1), ... (steps drafts), accepts the longest
    prefix that matches B's chain from t, emits it plus the target's bonus token, and continues from the last
    emitted token, until output_len tokens. Returns the rounds, the accepted-per-round sum (SGLang's server
    statistic: accepted drafts + 1 per verify, the last round not cut at output_len) and the per-position
    accept counts."""
    t = int(token_index(st.preset)[last_prompt_id])
    t = int(st.succ[t])  # the prefill's token
    emitted, rounds, accepted, per_pos, each = 1, 0, 0, [0] * steps, []
    while emitted < output_len:
        d, truth, a = t, t, 0
        for s in range(steps):
            d, truth = int(dmap[d]), int(st.succ[truth])
            if d != truth:
                break
            a += 1
            per_pos[s] += 1
        for _ in range(a + 1):
            t = int(st.succ[t])
        emitted += a + 1
        rounds += 1
        accepted += a + 1
        each.append(a + 1)
    return {"rounds": rounds, "accept_tokens": accepted, "per_position": per_pos, "completion_tokens": output_len,
            "accept_per_round": each}


# ----------------------------------------------------------------------------------------------------------
# Output


def _write_atomic(path: str, write) -> None:
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-" + os.path.basename(path))
    os.close(fd)
    try:
        write(tmp)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o644 & ~umask)  # mkstemp creates 0600
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def write_checkpoint(out_dir: str, config: dict, tensors: dict[str, torch.Tensor], generation: bool,
                     extra_files: dict[str, str] | None = None) -> int:
    from safetensors.torch import save_file

    os.makedirs(out_dir, exist_ok=True)

    def text(content: str):
        def write(tmp: str) -> None:
            with open(tmp, "w") as f:
                f.write(content)
        return write

    def dump(obj: dict):
        return text(json.dumps(obj, indent=1) + "\n")

    # weights first, config last: a directory with a config.json is complete
    path = os.path.join(out_dir, "model.safetensors")
    _write_atomic(path, lambda tmp: save_file(tensors, tmp, metadata={"format": "pt"}))
    if generation:
        gen = {"bos_token_id": BOS_ID, "eos_token_id": EOS_ID, "do_sample": False}
        _write_atomic(os.path.join(out_dir, "generation_config.json"), dump(gen))
    for name, content in (extra_files or {}).items():
        _write_atomic(os.path.join(out_dir, name), text(content))
    _write_atomic(os.path.join(out_dir, "config.json"), dump(config))
    return os.path.getsize(path)


def sizing(p: Preset, tp: int = 2, tokens: int = 1, bytes_per_param: int = 2) -> dict:
    """Weight bytes one TP rank reads per forward of `tokens` tokens at batch size 1 (KV cache excluded):
    replicated: q_a_proj, kv_a_proj (sglang's fused_qkv_a_proj_with_mqa), router; split: the rest.
    Routed experts: expected distinct experts hit by `tokens` tokens routed independently."""
    H, nh = p.hidden, p.heads
    repl = p.q_lora_rank * H + (p.kv_lora_rank + p.qk_rope_head_dim) * H
    split = (nh * (p.qk_nope_head_dim + p.qk_rope_head_dim) * p.q_lora_rank
             + nh * (p.qk_nope_head_dim + p.v_head_dim) * p.kv_lora_rank + H * nh * p.v_head_dim)
    expert = 3 * H * p.moe_intermediate
    hit = p.routed_experts * (1 - (1 - p.experts_per_token / p.routed_experts) ** tokens)
    per_rank = p.layers * (repl + split / tp) + 3 * H * p.dense_intermediate / tp
    per_rank += (p.layers - 1) * ((1 + hit) * expert / tp + p.routed_experts * H) + p.vocab * H / tp
    total = (p.layers * (repl + split) + 3 * H * p.dense_intermediate
             + (p.layers - 1) * ((p.routed_experts + 1) * expert + p.routed_experts * H) + 2 * p.vocab * H)
    return {"tp": tp, "tokens": tokens, "routed_experts_hit_per_layer": round(hit, 2),
            "bytes_per_rank": int(per_rank * bytes_per_param), "total_bytes": int(total * bytes_per_param)}


def generate(out: str, preset: str, seed: int, device: str, draft: str) -> dict:
    if preset not in PRESETS:
        raise SystemExit(f"--preset: unknown preset {preset!r} (known: {', '.join(PRESETS)})")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit(f"--device {device}: CUDA is not available here (use --device cpu)")
    if os.path.exists(out) and not os.path.isdir(out):
        raise SystemExit(f"--out {out}: exists and is not a directory")
    p = PRESETS[preset]
    t0 = time.time()
    st = build_structure(p, seed)
    summary: dict = {"preset": preset, "seed": seed, "device": device, "torch": torch.__version__}

    tw = Weights(seed, device)
    build_target(st, tw)
    n_params = sum(t.numel() for t in tw.tensors.values())
    t_build = time.time() - t0
    t1 = time.time()
    files = lab_tokenizer.tokenizer_files(p.vocab, p.s_start, p.s_size)
    # how to recompute the ground truth (bigram_map(preset, seed)) from the model directory alone
    files[PAIR_FILE] = json.dumps({"generator": "benchmark/models/gen_lab_pair.py", "preset": preset, "seed": seed,
                                   "S": [p.s_start, p.s_start + p.s_size]}, indent=1) + "\n"
    nbytes = write_checkpoint(os.path.join(out, "target"), target_config(p), tw.tensors, generation=True,
                              extra_files=files)
    del tw
    summary["target"] = {"path": os.path.join(out, "target"), "params": n_params, "bytes": nbytes,
                         "build_s": round(t_build, 2), "write_s": round(time.time() - t1, 2)}

    kinds = draft_kinds(draft)
    for kind in kinds:
        dw = Weights(seed, device)
        DRAFTS[kind](st, dw)
        sub = "draft" if kind == kinds[0] else f"draft-{kind}"
        config = DRAFT_CONFIGS.get(kind, draft_config)(p)
        nb = write_checkpoint(os.path.join(out, sub), config, dw.tensors, generation=False)
        summary[sub] = {"path": os.path.join(out, sub), "kind": kind, "bytes": nb,
                        "params": sum(t.numel() for k, t in dw.tensors.items() if k not in ("d2t", "t2d"))}

    s = torch.arange(p.s_start, p.s_start + p.s_size)
    summary.update({
        "seconds": round(time.time() - t0, 2),
        "S": [p.s_start, p.s_start + p.s_size],
        "B_sample": {str(int(s[i])): int(s[st.succ[i]]) for i in range(8)},
        "B_chain_from_S0": [int(s[i]) for i in _chain(st.succ, 0, 8)],
        "capture_layers": capture_layers(p.layers),
        **({"miss_blocks": _block_counts(p)} if {"miss", "mla-miss"} & set(kinds) else {}),
        "decode_step": sizing(p, tokens=1),
        "verify_step_3_tokens": sizing(p, tokens=3),
        "preset_shapes": asdict(p),
    })
    return summary


def _block_counts(p: Preset) -> dict:
    blocks = miss_blocks(p.s_size)
    counts = [blocks.count(j) for j in range(len(MISS_RATES) + 1)]
    return {"rates": list(MISS_RATES), "rounds_per_cycle": len(blocks), "blocks_by_accepted_drafts": counts,
            "per_position": [round(sum(counts[s:]) / len(blocks), 4) for s in range(1, len(counts))],
            "accept_len_per_cycle": round(p.s_size / len(blocks), 4)}


DRAFTS = {"constructed": build_draft_constructed, "random": build_draft_random, "miss": build_draft_miss,
          "mla": build_draft_mla, "mla-miss": build_draft_mla_miss}
# the config each kind is written with: the MLA kinds are Eagle3DeepseekV2ForCausalLM, the others
# LlamaForCausalLMEagle3
DRAFT_CONFIGS = {"mla": mla_draft_config, "mla-miss": mla_draft_config}


def draft_kinds(spec: str) -> list[str]:
    """--draft: a comma list of constructed, random, miss, mla, mla-miss (`both` = constructed,random). The first
    is written to draft/, the others to draft-<kind>/."""
    kinds = ["constructed", "random"] if spec == "both" else [k.strip() for k in spec.split(",") if k.strip()]
    bad = [k for k in kinds if k not in DRAFTS]
    if not kinds or bad or len(set(kinds)) != len(kinds):
        raise SystemExit(f"--draft {spec}: expected a comma list of {', '.join(DRAFTS)} (or both), each once")
    return kinds


def _chain(succ: torch.Tensor, start: int, n: int) -> list[int]:
    out = [start]
    for _ in range(n - 1):
        out.append(int(succ[out[-1]]))
    return out


def bigram_map(preset: str, seed: int) -> dict[int, int]:
    """B over the whole vocabulary (ids outside S act like S[(id - s_start) mod |S|]); for clients, tests."""
    p = PRESETS[preset]
    st = build_structure(p, seed)
    idx = token_index(p)
    return {v: p.s_start + int(st.succ[idx[v]]) for v in range(p.vocab)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="output directory (target/, draft/ are written inside)")
    ap.add_argument("--device", default="cpu", help="where the random weights are drawn: cpu or cuda")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--preset", default="lab", choices=sorted(PRESETS))
    ap.add_argument("--draft", default="constructed",
                    help="comma list of constructed (exact), random, miss (misses by design), mla and mla-miss "
                    "(the same two as MLA drafts, Eagle3DeepseekV2ForCausalLM); both = constructed,random; the "
                    "first goes to draft/, the others to draft-<kind>/")
    a = ap.parse_args(argv)
    draft_kinds(a.draft)  # bad --draft: the error before any work
    torch.set_num_threads(max(1, min(16, os.cpu_count() or 1)))
    print(json.dumps(generate(a.out, a.preset, a.seed, a.device, a.draft), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
