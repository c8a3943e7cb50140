"""A small reference forward of sglang 0.5.14's EAGLE-3 draft (LlamaForCausalLMEagle3, one decoder layer),
written from reading sglang/srt/models/llama_eagle3.py, and a simulation of the draft side of EAGLE-3
decoding with topk=1 (speculative/eagle_worker_v2.py). Torch only; used by the CPU tests of the lab pair.

The math mirrored (bf16 weights, activations rounded to `dtype` after each op as the kernels do):
    hidden = fc(aux)                       if hidden has 3 x target_hidden features (target's aux states)
    residual = hidden
    x = cat(input_layernorm(embed(ids)), hidden_norm(hidden))           # 2 x hidden
    attn = o_proj(attention(rope(q_proj x), rope(k_proj x), v_proj x))   # causal, GQA, neox rope
    residual = residual + attn;  m = mlp(post_attention_layernorm(residual))
    residual = residual + m;     logits = lm_head(norm(residual))        # draft vocab; d2t maps to target ids
    returned hidden (fed to the next draft step) = residual (pre-norm; config norm_output=False)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


def rope_neox(x: torch.Tensor, pos: torch.Tensor, theta: float) -> torch.Tensor:
    """x: (T, heads, hd); neox style (rotate halves), as sglang's RotaryEmbedding(is_neox_style=True)."""
    hd = x.shape[-1]
    inv = theta ** (-torch.arange(0, hd, 2, dtype=torch.float32) / hd)
    ang = pos.float()[:, None] * inv[None, :]
    cos, sin = ang.cos()[:, None, :], ang.sin()[:, None, :]
    x1, x2 = x[..., : hd // 2].float(), x[..., hd // 2 :].float()
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(x.dtype)


@dataclass
class KV:
    k: torch.Tensor  # (T, kv_heads, hd), after rope
    v: torch.Tensor
    pos: torch.Tensor  # (T,)


class Eagle3Draft:
    def __init__(self, tensors: dict[str, torch.Tensor], config: dict, target_embed: torch.Tensor,
                 dtype: torch.dtype = torch.bfloat16):
        self.c, self.dt = config, dtype
        self.w = {k: v.to(dtype) for k, v in tensors.items() if k not in ("d2t", "t2d")}
        self.hot = tensors["d2t"] + torch.arange(tensors["d2t"].shape[0])  # draft id -> target id
        self.embed = target_embed.to(dtype)  # sglang shares the target's embedding (set_embed)
        self.H = config["hidden_size"]
        self.hd = config.get("head_dim", self.H // config["num_attention_heads"])
        self.nq, self.nkv = config["num_attention_heads"], config["num_key_value_heads"]
        self.eps = config["rms_norm_eps"]

    def lin(self, name: str, x: torch.Tensor) -> torch.Tensor:
        return (x.float() @ self.w[name].float().T).to(self.dt)

    def forward(self, hidden: torch.Tensor, ids: torch.Tensor, pos: torch.Tensor, cache: KV | None = None,
                mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, KV]:
        """hidden: (T, 3H) target aux states or (T, H) the draft's own previous output. Attends causally
        to `cache` (earlier positions) and to itself; `mask` (T, len(cache)+T) overrides. Returns
        (logits over the draft vocab (float32), pre-norm hidden, this call's K/V)."""
        hidden = hidden.to(self.dt)
        if hidden.shape[-1] != self.H:
            hidden = self.lin("fc.weight", hidden)
        residual = hidden
        x = torch.cat([rms_norm(self.embed[ids], self.w["midlayer.input_layernorm.weight"], self.eps),
                       rms_norm(hidden, self.w["midlayer.hidden_norm.weight"], self.eps)], dim=-1)
        T = x.shape[0]
        q = self.lin("midlayer.self_attn.q_proj.weight", x).view(T, self.nq, self.hd)
        k = self.lin("midlayer.self_attn.k_proj.weight", x).view(T, self.nkv, self.hd)
        v = self.lin("midlayer.self_attn.v_proj.weight", x).view(T, self.nkv, self.hd)
        theta = self.c.get("rope_theta", 10000.0)
        q, k = rope_neox(q, pos, theta), rope_neox(k, pos, theta)
        new = KV(k, v, pos)
        ks = k if cache is None else torch.cat([cache.k, k])
        vs = v if cache is None else torch.cat([cache.v, v])
        kpos = pos if cache is None else torch.cat([cache.pos, pos])
        if mask is None:
            mask = kpos[None, :] <= pos[:, None]
        rep = self.nq // self.nkv
        kf = ks.float().repeat_interleave(rep, dim=1)  # (S, nq, hd)
        vf = vs.float().repeat_interleave(rep, dim=1)
        scores = torch.einsum("thd,shd->hts", q.float(), kf) * self.hd**-0.5
        scores = scores.masked_fill(~mask[None], float("-inf"))
        att = torch.einsum("hts,shd->thd", scores.softmax(-1), vf).to(self.dt).reshape(T, self.nq * self.hd)
        residual = (residual.float() + self.lin("midlayer.self_attn.o_proj.weight", att).float()).to(self.dt)
        h = rms_norm(residual, self.w["midlayer.post_attention_layernorm.weight"], self.eps)
        m = self.lin("midlayer.mlp.down_proj.weight",
                     (F.silu(self.lin("midlayer.mlp.gate_proj.weight", h).float())
                      * self.lin("midlayer.mlp.up_proj.weight", h).float()).to(self.dt))
        residual = (residual.float() + m.float()).to(self.dt)
        logits = self.lin("lm_head.weight", rms_norm(residual, self.w["norm.weight"], self.eps)).float()
        return logits, residual, new


def top2_margin(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(argmax, top1 - top2) per row."""
    top = logits.topk(2, dim=-1)
    return top.indices[:, 0], top.values[:, 0] - top.values[:, 1]


def draft_two_steps(draft: Eagle3Draft, aux: torch.Tensor, tokens: torch.Tensor):
    """For every position j of a sequence whose target aux states are known, what EAGLE-3 (steps=2, topk=1)
    drafts after the target has produced tokens[j+1]:
      step A (draft extend): hidden = aux[j], input token tokens[j+1], KV of positions 0..j -> d1
      step B (draft decode): hidden = step A's pre-norm output, input token d1, position j+1, attending to
             the extend KV of positions 0..j and to itself -> d2
    Returns target ids (d1, d2) and margins (each (T-1,)). aux: (T, 3H); tokens: (T,)."""
    T = tokens.shape[0]
    pos = torch.arange(T - 1)
    logits_a, hid_a, kv = draft.forward(aux[:-1], tokens[1:], pos)
    d1_local, m1 = top2_margin(logits_a)
    d1 = draft.hot[d1_local]
    # step B for all j at once: query j (position j+1) sees extend KV 0..j and its own new KV
    mask = torch.cat([pos[None, :] <= pos[:, None], torch.eye(T - 1, dtype=torch.bool)], dim=1)
    logits_b, _, _ = draft.forward(hid_a, d1, pos + 1, cache=kv, mask=mask)
    d2_local, m2 = top2_margin(logits_b)
    return d1, draft.hot[d2_local], m1, m2


def accept_lengths(d1: torch.Tensor, d2: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Accept length (accepted drafts + the target's bonus token) of a verify round at each position j,
    given the true continuation tokens[j+2], tokens[j+3]. Positions without both are dropped."""
    n = tokens.shape[0] - 3
    ok1 = d1[:n] == tokens[2 : 2 + n]
    ok2 = ok1 & (d2[:n] == tokens[3 : 3 + n])
    return 1 + ok1.long() + ok2.long()
