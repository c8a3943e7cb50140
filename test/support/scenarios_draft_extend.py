"""P11 (split-KV draft-extend on CUDA): the scenarios its probe runs against a patched sglang tree.

The EAGLE draft model's draft-extend (DRAFT_EXTEND_V2: num_draft_tokens tokens per request, a causal chain at
topk == 1) goes, with P11, through the split-KV kernel target-verify uses on CUDA (0.5.14: our
`verify_shared_kv.py`; 0.5.23: upstream's `verify_mla.py`), for both draft architectures: GQA
(LlamaForCausalLMEagle3: the lab's 32 query / 8 KV heads of 128, separate K and V buffers) and MLA
(Eagle3DeepseekV2ForCausalLM: one 512 + 64 latent KV head, the values inside the keys).

- `gate_cases`: which simulated GPUs (support.cuda_sim) the backend sends draft-extend to it on, for
  SGLANG_ENABLE_SPLITKV_DRAFT_EXTEND and topk;
- `kernel_cases`: that kernel against the line's `extend_attention_fwd` and an fp64 reference at the two
  drafts' shapes, with an empty prefix among the rows (the padded rows of a draft-extend CUDA graph have none:
  their kv_lens are clamped to 0), under Triton's interpreter; bounds as support.scenarios_verify derives them;
- `dispatch_case`: `TritonAttnBackend.forward_extend` in DRAFT_EXTEND_V2 mode on a simulated SM120, for a GQA and
  an MLA layer: which kernels ran, and the output against `extend_attention_fwd`'s.
"""

from __future__ import annotations

import importlib
import math
import os
from types import SimpleNamespace
from typing import Any

from support.scenarios_verify import (
    BACKEND,
    EXTEND_MODULES,
    U_BF16,
    U_FP32,
    _first_module,
    _ratio,
    _simulate_arch,
    error_bound,  # its rule (the drafts' caches are bf16: reference() gives no fp8 terms)
    verify_module,
)

# the two drafts' attention shapes at TP=1: (query heads, KV heads, key width, value width)
SHAPES = {"gqa": (32, 8, 128, 128), "mla": (8, 1, 576, 512)}
CASES = [
    {"arch": "sm90", "shape": "gqa", "bs": 3, "draft": 3, "prefix": [0, 37, 300], "kv": "bf16"},
    {"arch": "sm120", "shape": "gqa", "bs": 1, "draft": 3, "prefix": [700], "kv": "bf16"},
    {"arch": "sm120", "shape": "mla", "bs": 3, "draft": 3, "prefix": [0, 129, 520], "kv": "bf16"},
    {"arch": "sm90", "shape": "mla", "bs": 2, "draft": 3, "prefix": [64, 0], "kv": "bf16"},
]


def make_inputs(case: dict, seed: int = 0) -> dict:
    """One draft-extend call: fresh K/V of the extend tokens, a pool holding the prefixes, and the metadata the
    Triton backend builds for DRAFT_EXTEND_V2 (qo_indptr an arange of num_draft_tokens, no custom mask)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    h_q, h_kv, d, dv = SHAPES[case["shape"]]
    mla = case["shape"] == "mla"
    bs, draft, prefix = case["bs"], case["draft"], case["prefix"]
    tokens = bs * draft
    pool = max(1024, 2 * sum(prefix) + tokens)
    q = torch.randn(tokens, h_q, d, generator=g).bfloat16()
    k_ext = torch.randn(tokens, h_kv, d, generator=g).bfloat16()
    k_buf = torch.randn(pool, h_kv, d, generator=g).bfloat16()
    if mla:  # the latent: the values are the keys' first dv columns
        v_ext, v_buf = k_ext[..., :dv], k_buf[..., :dv]
    else:
        v_ext = torch.randn(tokens, h_kv, dv, generator=g).bfloat16()
        v_buf = torch.randn(pool, h_kv, dv, generator=g).bfloat16()
    lens = torch.tensor(prefix, dtype=torch.int32)
    kv_indptr = torch.zeros(bs + 1, dtype=torch.int32)
    kv_indptr[1:] = torch.cumsum(lens, 0)
    kv_indices = torch.randperm(pool, generator=g)[: sum(prefix)].to(torch.int64)
    return {"q": q, "k_ext": k_ext, "v_ext": v_ext, "k_buf": k_buf, "v_buf": v_buf, "h_kv": h_kv,
            "qo_indptr": torch.arange(0, tokens + 1, draft, dtype=torch.int32), "kv_indptr": kv_indptr,
            "kv_indices": kv_indices, "draft": draft, "d": d,
            "sm_scale": 1.0 / math.sqrt(192 if mla else d), "kv_dtype": torch.bfloat16}


def _args(x: dict, out) -> tuple:
    """extend_attention_fwd's arguments for DRAFT_EXTEND_V2: causal, no custom mask."""
    return (x["q"], x["k_ext"].contiguous(), x["v_ext"].contiguous(), out, x["k_buf"], x["v_buf"], x["qo_indptr"],
            x["kv_indptr"], x["kv_indices"], None, True, None, x["draft"], 1.0, 1.0, x["sm_scale"])


def reference(x: dict) -> tuple[Any, Any]:
    """fp64 causal attention of every extend token over its prefix and the extend tokens up to itself (GQA: each
    query head reads its KV head), and per (token, head) the ingredients of scenarios_verify.error_bound's bound:
    bf16 probabilities (u_bf16 x max|v|), fp32 scores of `d` products (twice), the output's own rounding."""
    import torch

    draft, bs, h_kv = x["draft"], x["qo_indptr"].numel() - 1, x["h_kv"]
    h_q = x["q"].shape[1]
    rep = h_q // h_kv
    q64 = x["q"].double()
    outs, bounds = [], []
    for b in range(bs):
        lo, hi = int(x["kv_indptr"][b]), int(x["kv_indptr"][b + 1])
        idx = x["kv_indices"][lo:hi]
        rows = slice(b * draft, (b + 1) * draft)
        k_all = torch.cat([x["k_buf"][idx], x["k_ext"][rows]]).double().repeat_interleave(rep, dim=1)
        v_all = torch.cat([x["v_buf"][idx], x["v_ext"][rows]]).double().repeat_interleave(rep, dim=1)
        n = k_all.shape[0]
        s = torch.einsum("lhd,nhd->lhn", q64[rows], k_all) * x["sm_scale"]
        visible = torch.ones(draft, n, dtype=torch.bool)
        visible[:, hi - lo:] = torch.tril(torch.ones(draft, draft, dtype=torch.bool))
        s = s.masked_fill(~visible[:, None, :], float("-inf"))
        p = torch.softmax(s, -1)
        outs.append(torch.einsum("lhn,nhd->lhd", p, v_all))
        abs_qk = torch.einsum("lhd,nhd->lhn", q64[rows].abs(), k_all.abs()) * x["sm_scale"]
        vis = visible[:, None, :].expand_as(s)
        vmax = v_all.abs().amax(-1)  # [n, heads]
        vmax_row = torch.where(vis, vmax.T[None], torch.zeros(())).amax(-1)
        e_qk = x["d"] * U_FP32 * torch.where(vis, abs_qk, torch.zeros(())).amax(-1)
        bounds.append(((U_BF16 + 2 * e_qk) * vmax_row, vmax_row))
    return torch.cat(outs), bounds


def kernel_cases(cases: list[dict] | None = None) -> dict:
    """Every case through the line's split-KV entry and extend_attention_fwd (TRITON_INTERPRET=1)."""
    import torch

    from support.triton_interp import fix_bf16_dot

    fix_bf16_dot()
    extend = _first_module(EXTEND_MODULES)
    vmod = verify_module()
    out: dict[str, Any] = {"verify_module": vmod.__name__ if vmod else None, "cases": []}
    for case in cases or CASES:
        x = make_inputs(case)
        h_q, _, _, dv = SHAPES[case["shape"]]
        ref, bounds = reference(x)
        ext = torch.zeros(ref.shape[0], h_q, dv, dtype=torch.bfloat16)
        extend.extend_attention_fwd(*_args(x, ext))
        bound_ext = error_bound(bounds, ref, partials_bf16=False)
        row: dict[str, Any] = {"case": case, "ran": False, "extend_vs_ref": _ratio(ext.double() - ref, bound_ext)}
        if vmod is not None:
            _simulate_arch(vmod, case["arch"])
            mine = torch.zeros(ref.shape[0], h_q, dv, dtype=torch.bfloat16)
            row["ran"] = bool(vmod.verify_shared_kv_fwd(*_args(x, mine), max_bs=case["bs"] + 2))
            bound = error_bound(bounds, ref, vmod.__name__.endswith("verify_mla"))
            row["finite"] = bool(torch.isfinite(mine.double()).all())
            row["verify_vs_ref"] = _ratio(mine.double() - ref, bound)
            row["verify_vs_extend"] = _ratio(mine.double() - ext.double(), bound + bound_ext)
        out["cases"].append(row)
    return out


def gate_cases() -> dict:
    """The line's draft-extend gate on simulated GPUs: (capability, SGLANG_ENABLE_SPLITKV_DRAFT_EXTEND, topk)."""
    from support.cuda_sim import simulate_cuda

    simulate_cuda((9, 0), device_count=1)
    backend = importlib.import_module(BACKEND)
    gate = getattr(backend, "_should_use_cuda_draft_extend_shared_kv", None)
    rows = []
    for cap in ((9, 0), (12, 0), (12, 1), (10, 0), (8, 9)):
        for env, topk in (("1", 1), ("0", 1), ("1", 4)):
            simulate_cuda(cap, device_count=1)
            os.environ["SGLANG_ENABLE_SPLITKV_DRAFT_EXTEND"] = env
            rows.append({"capability": list(cap), "env": env, "topk": topk, "on": bool(gate and gate(topk))})
    os.environ.pop("SGLANG_ENABLE_SPLITKV_DRAFT_EXTEND", None)
    return {"gate": gate is not None, "rows": rows}


class _Pool:
    """What forward_extend asks of the KV pool: MHATokenToKVPool (GQA) or MLATokenToKVPool (values = the keys'
    first columns)."""

    def __init__(self, x: dict, mla: bool):
        self.k_buf = x["k_buf"].clone()
        self.v_buf = None if mla else x["v_buf"].clone()
        self.dv = x["v_ext"].shape[-1]

    def get_key_buffer(self, layer_id):
        return self.k_buf

    def get_value_buffer(self, layer_id):
        return self.k_buf[..., : self.dv] if self.v_buf is None else self.v_buf

    def get_kv_buffer(self, layer_id):
        return self.get_key_buffer(layer_id), self.get_value_buffer(layer_id)

    def set_kv_buffer(self, layer, loc, cache_k, cache_v, *scales):
        loc = loc.loc if hasattr(loc, "loc") else loc
        self.k_buf[loc] = cache_k.to(self.k_buf.dtype)
        if self.v_buf is not None:
            self.v_buf[loc] = cache_v.to(self.v_buf.dtype)


def _backend(tb, extend, vmod, ran: list, mla: bool, pool: _Pool, x: dict, draft_gate: bool):
    """A TritonAttnBackend with only what forward_extend reads (both lines' attribute names), its gates as
    __init__ computes them."""
    def spy(name, fn):
        def call(*a, **k):
            ran.append(name)
            return fn(*a, **k)
        return call

    b = tb.TritonAttnBackend.__new__(tb.TritonAttnBackend)
    b.use_verify_shared_kv = False  # target-verify's gate; the draft model's backend: MLA drafts may set it
    b.use_draft_extend_shared_kv = draft_gate
    b.use_verify_splitkv = False
    b.use_mla = mla
    b.enable_deterministic = False
    b.allow_bidirectional_attention_in_extend = False
    b.dcp_size, b.dcp_rank = 1, 0  # 0.5.23: decode context parallelism off
    b.dllm_attention = None
    b.use_dense_fp8_chunked_prefill = False  # 0.5.23: gfx95 fp8 prefill only
    b.page_size = 1
    b.device = "cpu"
    b.extend_attention_fwd = spy("extend_attention_fwd", extend.extend_attention_fwd)
    if vmod is not None:
        b.verify_shared_kv_fwd = spy("verify_shared_kv_fwd", vmod.verify_shared_kv_fwd)
    b.token_to_kv_pool = pool
    b.req_to_token_pool = SimpleNamespace(size=4)
    fields = dict(attn_logits=None, attn_lse=None, max_extend_len=x["draft"], num_kv_splits=None,
                  kv_indptr=x["kv_indptr"], kv_indices=x["kv_indices"], qo_indptr=x["qo_indptr"], custom_mask=None,
                  mask_indptr=None, window_kv_indptr=None, window_kv_indices=None, window_num_kv_splits=None,
                  window_kv_offsets=None)
    b.forward_metadata = tb.ForwardMetadata(**fields)
    return b


def dispatch_case() -> dict:
    """forward_extend in DRAFT_EXTEND_V2 mode, a GQA and an MLA draft layer, on a simulated SM120: the gate as the
    backend computes it, which kernels ran, the output against extend_attention_fwd on the same pool."""
    import torch

    from support.cuda_sim import simulate_cuda
    from support.triton_interp import fix_bf16_dot

    fix_bf16_dot()
    simulate_cuda((12, 0), device_count=1)
    tb = importlib.import_module(BACKEND)
    from sglang.srt.layers.radix_attention import AttentionType
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    extend = _first_module(EXTEND_MODULES)
    vmod = verify_module()
    gate = getattr(tb, "_should_use_cuda_draft_extend_shared_kv", None)
    out: dict[str, Any] = {"gate": bool(gate and gate(1)), "layers": {}}
    for shape in ("gqa", "mla"):
        mla = shape == "mla"
        case = {"arch": "sm120", "shape": shape, "bs": 2, "draft": 3, "prefix": [37, 300], "kv": "bf16"}
        x = make_inputs(case, seed=1)
        h_q, h_kv, d, dv = SHAPES[shape]
        if vmod is not None:
            _simulate_arch(vmod, "sm120")
        ran: list[str] = []
        pool = _Pool(x, mla)
        backend = _backend(tb, extend, vmod, ran, mla, pool, x, out["gate"])
        layer = SimpleNamespace(tp_q_head_num=h_q, tp_k_head_num=h_kv, tp_v_head_num=h_kv, qk_head_dim=d,
                                v_head_dim=dv, layer_id=0, k_scale=None, v_scale=None, k_scale_float=None,
                                v_scale_float=None, scaling=x["sm_scale"], logit_capping_method="tanh",
                                logit_cap=0.0, is_cross_attention=False, attn_type=AttentionType.DECODER,
                                sliding_window_size=None, xai_temperature_len=-1)
        tokens = x["q"].shape[0]
        batch = SimpleNamespace(forward_mode=ForwardMode.DRAFT_EXTEND_V2, mha_one_shot=False,
                                attn_attend_prefix_cache=False)
        try:
            # save_kv_cache=False: both kernels read the extend tokens' K/V from the arguments, the prefix from the
            # pool; the pool writes are not what is checked here
            o = backend.forward_extend(x["q"].view(tokens, -1), x["k_ext"], x["v_ext"], layer, batch,
                                       save_kv_cache=False)
        except Exception as e:  # noqa: BLE001 - reported, the test names it
            out["layers"][shape] = {"error": f"{type(e).__name__}: {e}"}
            continue
        ref = torch.zeros(tokens, h_q, dv, dtype=torch.bfloat16)
        extend.extend_attention_fwd(*_args({**x, "k_buf": pool.get_key_buffer(0), "v_buf": pool.get_value_buffer(0)},
                                           ref))
        rref, bounds = reference(x)
        bound = error_bound(bounds, rref, partials_bf16=bool(vmod) and vmod.__name__.endswith("verify_mla"))
        out["layers"][shape] = {"ran": ran, "vs_extend": _ratio(o.view(tokens, h_q, dv).double() - ref.double(),
                                                               2 * bound)}
    return out
