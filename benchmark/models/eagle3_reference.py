"""A small reference forward of sglang 0.5.14's EAGLE-3 drafts (LlamaForCausalLMEagle3, one decoder layer, GQA,
written from reading sglang/srt/models/llama_eagle3.py; Eagle3DeepseekV2ForCausalLM, the same layer with DeepSeek-V2
multi-latent attention, from srt/models/kimi_k25_eagle3.py and deepseek_v2.py), and a simulation of the draft side
of EAGLE-3 decoding with topk=1 (speculative/eagle_worker_v2.py). Torch only; used by the CPU tests of the lab pair.

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
    inv = theta ** (-torch.arange(0, hd, 2, dtype=torch.float32, device=x.device) / hd)
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
                 dtype: torch.dtype = torch.bfloat16, device: str = "cpu"):
        self.c, self.dt = config, dtype
        self.w = {k: v.to(device, dtype) for k, v in tensors.items() if k not in ("d2t", "t2d")}
        self.hot = tensors["d2t"] + torch.arange(tensors["d2t"].shape[0])  # draft id -> target id
        self.embed = target_embed.to(device, dtype)  # sglang shares the target's embedding (set_embed)
        self.H = config["hidden_size"]
        self.hd = config.get("head_dim", self.H // config["num_attention_heads"])
        self.nq, self.nkv = config["num_attention_heads"], config["num_key_value_heads"]
        self.eps = config["rms_norm_eps"]

    def lin(self, name: str, x: torch.Tensor) -> torch.Tensor:
        return (x.float() @ self.w[name].float().T).to(self.dt)

    def attend(self, x: torch.Tensor, pos: torch.Tensor, cache: KV | None, mask: torch.Tensor | None):
        """(q, k, v, softmax scale) of this call's positions: GQA, neox RoPE."""
        T = x.shape[0]
        q = self.lin("midlayer.self_attn.q_proj.weight", x).view(T, self.nq, self.hd)
        k = self.lin("midlayer.self_attn.k_proj.weight", x).view(T, self.nkv, self.hd)
        v = self.lin("midlayer.self_attn.v_proj.weight", x).view(T, self.nkv, self.hd)
        theta = self.c.get("rope_theta", 10000.0)
        pos = pos.to(x.device)
        return rope_neox(q, pos, theta), rope_neox(k, pos, theta), v, self.hd**-0.5

    def output(self, att: torch.Tensor) -> torch.Tensor:
        return self.lin("midlayer.self_attn.o_proj.weight", att)

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
        q, k, v, scale = self.attend(x, pos, cache, mask)
        new = KV(k, v, pos)
        ks = k if cache is None else torch.cat([cache.k, k])
        vs = v if cache is None else torch.cat([cache.v, v])
        kpos = pos if cache is None else torch.cat([cache.pos, pos])
        if mask is None:
            mask = kpos[None, :] <= pos[:, None]
        rep = self.nq // self.nkv
        kf = ks.float().repeat_interleave(rep, dim=1)  # (S, nq, head dim)
        vf = vs.float().repeat_interleave(rep, dim=1)
        scores = torch.einsum("thd,shd->hts", q.float(), kf) * scale
        scores = scores.masked_fill(~mask[None], float("-inf"))
        self.last_scores = scores
        att = torch.einsum("hts,shd->thd", scores.softmax(-1), vf).to(self.dt).reshape(T, -1)
        residual = (residual.float() + self.output(att).float()).to(self.dt)
        h = rms_norm(residual, self.w["midlayer.post_attention_layernorm.weight"], self.eps)
        m = self.lin("midlayer.mlp.down_proj.weight",
                     (F.silu(self.lin("midlayer.mlp.gate_proj.weight", h).float())
                      * self.lin("midlayer.mlp.up_proj.weight", h).float()).to(self.dt))
        residual = (residual.float() + m.float()).to(self.dt)
        logits = self.lin("lm_head.weight", rms_norm(residual, self.w["norm.weight"], self.eps)).float()
        return logits, residual, new


def rope_interleaved(x: torch.Tensor, pos: torch.Tensor, theta: float) -> torch.Tensor:
    """x: (T, heads, d); DeepSeek's interleaved layout (pairs 2i, 2i+1), as sglang's RotaryEmbedding with
    is_neox_style=False (deepseek_v2.py: not rope_interleave)."""
    d = x.shape[-1]
    inv = theta ** (-torch.arange(0, d, 2, dtype=torch.float32, device=x.device) / d)
    ang = pos.float()[:, None] * inv[None, :]
    cos, sin = ang.cos()[:, None, :], ang.sin()[:, None, :]
    x1, x2 = x[..., 0::2].float(), x[..., 1::2].float()
    return torch.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).flatten(-2).to(x.dtype)


class Eagle3MLADraft(Eagle3Draft):
    """Eagle3DeepseekV2ForCausalLM's one layer (kimi_k25_eagle3.py Eagle3MLADecoderLayer), written out in the
    non-absorbed form (the absorbed kernels sglang runs compute the same products in another order):
        x = cat(input_layernorm(embed(ids)), hidden_norm(hidden))              2 x hidden
        q = q_b(q_a_layernorm(q_a(x))) -> per head [q_nope, q_pe]
        [c, k_pe] = kv_a(x);  [k_nope, v] per head = kv_b(kv_a_layernorm(c))
        score = (q_nope . k_nope + rope(q_pe) . rope(k_pe)) * scaling             (k_pe shared by the heads)
        attn = o_proj(softmax(score) v); then the MLP, norms and lm_head as LlamaForCausalLMEagle3's
    Checkpoint names `layers.0.*` (the published drafts'), q_a_proj and kv_a_proj_with_mqa unfused."""

    def __init__(self, tensors: dict[str, torch.Tensor], config: dict, target_embed: torch.Tensor,
                 dtype: torch.dtype = torch.bfloat16, device: str = "cpu"):
        tensors = {k.replace("layers.0.", "midlayer.", 1) if k.startswith("layers.0.") else k: v
                   for k, v in tensors.items()}
        super().__init__(tensors, config, target_embed, dtype, device)
        c = config
        self.nq = self.nkv = c["num_attention_heads"]
        self.nope, self.rope, self.hv = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
        self.kv_lora = c["kv_lora_rank"]
        self.scaling = (self.nope + self.rope) ** -0.5
        if c.get("rope_scaling"):
            raise ValueError("this reference models plain RoPE only (rope_scaling = null)")

    def attend(self, x: torch.Tensor, pos: torch.Tensor, cache: KV | None, mask: torch.Tensor | None):
        T, a = x.shape[0], "midlayer.self_attn."
        q_a = rms_norm(self.lin(a + "q_a_proj.weight", x), self.w[a + "q_a_layernorm.weight"], self.eps)
        q = self.lin(a + "q_b_proj.weight", q_a).view(T, self.nq, self.nope + self.rope)
        kv_a = self.lin(a + "kv_a_proj_with_mqa.weight", x)
        c = rms_norm(kv_a[:, : self.kv_lora], self.w[a + "kv_a_layernorm.weight"], self.eps)
        kv = self.lin(a + "kv_b_proj.weight", c).view(T, self.nq, self.nope + self.hv)
        theta = self.c.get("rope_theta", 10000.0)
        pos = pos.to(x.device)
        q_pe = rope_interleaved(q[..., self.nope :], pos, theta)
        k_pe = rope_interleaved(kv_a[:, None, self.kv_lora :], pos, theta).expand(T, self.nq, self.rope)
        k = torch.cat([kv[..., : self.nope], k_pe], dim=-1)
        v = kv[..., self.nope :]
        qf = torch.cat([q[..., : self.nope], q_pe], dim=-1)
        return qf, k, v, self.scaling

    def output(self, att: torch.Tensor) -> torch.Tensor:
        return self.lin("midlayer.self_attn.o_proj.weight", att)


@torch.no_grad()
def self_attention_weight(draft: Eagle3Draft, ids: torch.Tensor, last: int = 32) -> torch.Tensor:
    """(heads, last): the attention weight each of the last `last` draft-extend positions of a prompt `ids` puts
    on itself, every query head. The draft-extend of a prompt sees at position j the token ids[j + 1] and
    hidden = fc(aux_j); aux_j is taken as the target's embedding of ids[j] in each capture (the lab target keeps
    its residual stream on the embedding: README "Construction: the target"), so no target forward is needed and
    the check runs at any context length (on the draft's device)."""
    dev = draft.embed.device
    ids = ids.to(dev)
    tok, prev = ids[1:], ids[:-1]
    n_aux = draft.w["fc.weight"].shape[1] // draft.H
    hidden = draft.lin("fc.weight", draft.embed[prev].repeat(1, n_aux))
    x = torch.cat([rms_norm(draft.embed[tok], draft.w["midlayer.input_layernorm.weight"], draft.eps),
                   rms_norm(hidden, draft.w["midlayer.hidden_norm.weight"], draft.eps)], dim=-1)
    T = x.shape[0]
    pos = torch.arange(T, device=dev)
    q, k, _, scale = draft.attend(x, pos, None, None)
    k = k.float().repeat_interleave(draft.nq // draft.nkv, dim=1)
    scores = torch.einsum("thd,shd->hts", q[-last:].float(), k) * scale
    qpos = pos[-last:]
    scores = scores.masked_fill(~(pos[None, :] <= qpos[:, None])[None], float("-inf"))
    w = scores.softmax(-1)
    return w[:, torch.arange(last, device=dev), qpos]


def top2_margin(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(argmax, top1 - top2) per row."""
    top = logits.topk(2, dim=-1)
    return top.indices[:, 0], top.values[:, 0] - top.values[:, 1]


def draft_chain(draft: Eagle3Draft, aux: torch.Tensor, tokens: torch.Tensor, steps: int = 2):
    """For every position j of a sequence whose target aux states are known, the chain EAGLE-3 drafts
    (topk=1, `steps` draft tokens) after the target has produced tokens[j+1]:
      step 1 (draft extend): hidden = aux[j], input token tokens[j+1], KV of positions 0..j -> d1
      step s > 1 (draft decode): hidden = the previous step's pre-norm output, input token d_{s-1},
             position j+s-1, attending to the extend KV of positions 0..j, the earlier decode steps of the
             same chain, and itself -> d_s
    Returns (drafts, margins): lists of `steps` tensors of target ids / top1-top2 margins, each (T-1,)."""
    T = tokens.shape[0]
    pos = torch.arange(T - 1)
    logits, hid, kv = draft.forward(aux[:-1], tokens[1:], pos)
    d, m = top2_margin(logits)
    drafts, margins = [draft.hot[d]], [m]
    causal = pos[None, :] <= pos[:, None]
    chain_kv: list[KV] = []
    for s in range(1, steps):
        own = [torch.eye(T - 1, dtype=torch.bool)] * (len(chain_kv) + 1)  # row j sees only its own chain
        cache = KV(torch.cat([kv.k] + [c.k for c in chain_kv]), torch.cat([kv.v] + [c.v for c in chain_kv]),
                   torch.cat([kv.pos] + [c.pos for c in chain_kv]))
        logits, hid, new = draft.forward(hid, drafts[-1], pos + s, cache=cache,
                                         mask=torch.cat([causal, *own], dim=1))
        chain_kv.append(new)
        d, m = top2_margin(logits)
        drafts.append(draft.hot[d])
        margins.append(m)
    return drafts, margins


def draft_two_steps(draft: Eagle3Draft, aux: torch.Tensor, tokens: torch.Tensor):
    """steps=2 (the lab configuration): (d1, d2, margin1, margin2)."""
    (d1, d2), (m1, m2) = draft_chain(draft, aux, tokens, 2)
    return d1, d2, m1, m2


def accept_chain(drafts: list[torch.Tensor], tokens: torch.Tensor) -> torch.Tensor:
    """Accept length (accepted drafts + the target's bonus token) of the verify round at each position j:
    drafts[s][j] must equal tokens[j+2+s], and acceptance stops at the first miss."""
    n = tokens.shape[0] - 1 - len(drafts)
    ok = torch.ones(n, dtype=torch.bool)
    total = torch.ones(n, dtype=torch.long)
    for s, d in enumerate(drafts):
        ok = ok & (d[:n] == tokens[2 + s : 2 + s + n])
        total += ok.long()
    return total


def accept_lengths(d1: torch.Tensor, d2: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """accept_chain for steps=2."""
    return accept_chain([d1, d2], tokens)
