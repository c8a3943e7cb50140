"""Scenarios for test_p13_decode_splits_by_context.py: the KV split count sglang's Triton backend gives its decode
kernel, from `TritonAttnBackend.__init__` itself (upstream's code, run on a stub model runner that carries only
what __init__ reads, with ServerArgs' own defaults) on a simulated 132-SM GPU, then from `get_num_kv_splits` (its
Triton kernel, interpreted) for one long and one short sequence, and `decode_attention_fwd` with the split count
and buffers the backend sized, against an fp64 softmax attention.

- `cap_cases`: max_kv_splits per (attention kind, model context, --triton-attention-num-kv-splits,
  SGLANG_TRITON_DECODE_SPLITS_BY_CONTEXT);
- `dispatch_case`: a GQA draft layer's (32 / 8 heads of 128, 160k context, bs 1) splits chosen at 131072 and 2048
  tokens of sequence, and the decode output at a sequence long enough for more than 8 splits (20480 tokens).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import math
import os
import tempfile
from types import SimpleNamespace
from typing import Any

from support.scenarios_verify import _first_module

BACKEND = "sglang.srt.layers.attention.triton_backend"
SM_COUNT = 132  # an H200's; the RTX PRO 6000 Blackwell has 188 (the caps below are powers of two either way)
ENV = "SGLANG_TRITON_DECODE_SPLITS_BY_CONTEXT"


def _server_args(num_kv_splits: int):
    """ServerArgs' own field defaults, without its __post_init__ (which needs a model), as the model runner holds
    them; sglang >= 0.5.23 reads them from the published runtime context instead, so those are published too."""
    from sglang.srt.server_args import ServerArgs

    from support import sglang_compat

    if sglang_compat.runtime_context():  # the published record is the model runner's too
        return sglang_compat.publish_server_args(0, triton_attention_num_kv_splits=num_kv_splits, device="cpu")
    fields = {}
    for f in dataclasses.fields(ServerArgs):
        if f.default is not dataclasses.MISSING:
            fields[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            fields[f.name] = f.default_factory()
    fields["triton_attention_num_kv_splits"] = num_kv_splits
    return SimpleNamespace(**fields)


class _Pool:
    def __init__(self, v_head_dim: int, kv_heads: int):
        import torch

        self.start_layer = 0
        self._v = torch.zeros(1, kv_heads, v_head_dim)

    def get_value_buffer(self, layer_id):
        return self._v

    def get_v_head_dim(self):
        return self._v.shape[-1]


def _model_config(mla: bool, context_len: int, heads: int, kv_heads: int, head_dim: int):
    """sglang's own ModelConfig, read from a config.json of the kind (a Llama-shaped GQA model, a DeepSeek-V3-shaped
    MLA one) with the context length the server would pass."""
    from sglang.srt.configs.model_config import ModelConfig
    from transformers import DeepseekV3Config, LlamaConfig

    common = {"vocab_size": 1024, "num_hidden_layers": 1, "intermediate_size": 64,
              "max_position_embeddings": max(163840, context_len)}
    if mla:
        hf = DeepseekV3Config(num_attention_heads=heads, num_key_value_heads=heads, hidden_size=1024,
                              kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128,
                              moe_intermediate_size=64, n_routed_experts=8, architectures=["DeepseekV3ForCausalLM"],
                              **common)
    else:
        hf = LlamaConfig(num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=head_dim,
                         hidden_size=heads * head_dim, architectures=["LlamaForCausalLM"], **common)
    with tempfile.TemporaryDirectory() as d:
        hf.save_pretrained(d)
        return ModelConfig(d, context_length=context_len)


def _model_runner(mla: bool, context_len: int, num_kv_splits: int, heads: int = 32, kv_heads: int = 8,
                  head_dim: int = 128):
    """A model runner with what TritonAttnBackend.__init__ reads on both lines, around sglang's own ModelConfig and
    ServerArgs (a target worker of a plain model, a bf16 cache, no sliding window, no hybrid layers)."""
    import torch

    model_config = _model_config(mla, context_len, heads, kv_heads, head_dim)
    v_head_dim = 512 if mla else head_dim
    pool_size = 4
    return SimpleNamespace(
        model_config=model_config, server_args=_server_args(num_kv_splits), device="cpu", gpu_id=0,
        req_to_token_pool=SimpleNamespace(size=pool_size, req_to_token=torch.zeros(pool_size, 8, dtype=torch.int32)),
        token_to_kv_pool=_Pool(v_head_dim, 1 if mla else kv_heads), token_to_kv_pool_allocator=None,
        sliding_window_size=None, hybrid_gdn_config=None, kimi_linear_config=None, linear_attn_model_spec=None,
        kv_index_translator=None, decode_num_tokens_per_req=lambda: 1, is_draft_worker=False,
        spec_algorithm=SimpleNamespace(is_dspark=lambda: False), kv_cache_dtype=torch.bfloat16, page_size=1)


def _backend(mla: bool, context_len: int, num_kv_splits: int = 8, env: str | None = None, **shape):
    from support.cuda_sim import simulate_cuda

    simulate_cuda((12, 0), device_count=1)
    if env is None:
        os.environ.pop(ENV, None)
    else:
        os.environ[ENV] = env
    tb = importlib.import_module(BACKEND)
    tb.get_device_core_count = lambda gpu_id=0: SM_COUNT
    tb.is_arch_support_pdl = lambda: False  # sgl_kernel is an import-only stand-in on CPU
    runner = _model_runner(mla, context_len, num_kv_splits, **shape)
    try:
        with _one_rank():
            return tb.TritonAttnBackend(runner)
    finally:
        os.environ.pop(ENV, None)


def _one_rank():
    """TP 1, without process groups: the parallel layout __init__ reads (get_parallel()) forced to one rank."""
    rc = importlib.import_module("sglang.srt.runtime_context")
    fields = getattr(rc, "_PARALLEL_FIELDS", set())
    values = {"attn_tp_size": 1, "attn_tp_rank": 0, "attn_dcp_size": 1, "attn_dcp_rank": 0, "attn_cp_size": 1,
              "attn_cp_rank": 0, "tp_size": 1, "tp_rank": 0}
    return rc.get_parallel().override(**{k: v for k, v in values.items() if k in fields})


def cap_cases() -> dict:
    rows = []
    for mla in (False, True):
        for context_len in (4096, 16384, 32768, 65536, 131072, 163840, 1048576):
            rows.append({"mla": mla, "context": context_len, "flag": 8, "env": None,
                         "max_kv_splits": _backend(mla, context_len).max_kv_splits})
    for flag, env in ((8, "0"), (128, None), (4, None)):
        rows.append({"mla": False, "context": 131072, "flag": flag, "env": env,
                     "max_kv_splits": _backend(False, 131072, flag, env).max_kv_splits})
    return {"sm_count": SM_COUNT, "rows": rows}


def _splits(backend, seq_lens: list[int]) -> list[int]:
    import torch

    out = torch.empty(len(seq_lens), dtype=torch.int32)
    backend.get_num_kv_splits(out, torch.tensor(seq_lens, dtype=torch.int32))
    return [int(v) for v in out]


DECODE_MODULES = ("sglang.kernels.ops.attention.decode_attention",  # 0.5.23
                  "sglang.srt.layers.attention.triton_ops.decode_attention")


def _decode_module():
    m = _first_module(DECODE_MODULES)
    if m is None:
        raise ImportError("no decode_attention module in this sglang")
    return m


def dispatch_case(seq_len: int = 20480, decode: bool = True) -> dict:
    """The GQA draft layer of a 160k-context pair at bs 1: the splits the backend gives a 131072- and a 2048-token
    sequence, and decode_attention_fwd over `seq_len` tokens with the splits it gives that one and the attn_logits /
    attn_lse buffers sized as the backend sizes them (bs, heads, max_kv_splits, ...), against an fp64 reference.
    The bound: the kernel keeps K, V and Q in bf16 (the reference reads the same bf16 values in fp64), accumulates
    in fp32 and rounds the output to bf16 once: |o - ref| <= 2^-8 |ref| (bf16's half ulp) + the fp32 softmax
    error, well under 2^-8 max|v| per element; the bound used is 2^-7 max|v| (two bf16 roundings)."""
    import torch

    from support.triton_interp import fix_bf16_dot

    fix_bf16_dot()
    draft = _backend(False, 163840)  # the draft's 32 / 8 heads of 128
    long_short = _splits(draft, [131072]) + _splits(draft, [2048])
    out: dict[str, Any] = {"max_kv_splits": draft.max_kv_splits, "splits_131072": long_short[0],
                           "splits_2048": long_short[1], "seq_len": seq_len}
    if not decode:  # the split counts alone (the tree without the patch: the interpreted kernel is the slow part)
        return out
    # the kernel at fewer heads (8 / 2 of 64: the interpreter's time goes with heads x dims), the same grouping
    heads, kv_heads, d = 8, 2, 64
    backend = _backend(False, 163840, heads=heads, kv_heads=kv_heads, head_dim=d)
    splits = _splits(backend, [seq_len])
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, heads, d, generator=g).to(torch.bfloat16)
    k = torch.randn(seq_len, kv_heads, d, generator=g).to(torch.bfloat16)
    v = torch.randn(seq_len, kv_heads, d, generator=g).to(torch.bfloat16)
    o = torch.zeros(1, heads, d, dtype=torch.bfloat16)
    kv_indptr = torch.tensor([0, seq_len], dtype=torch.int32)
    kv_indices = torch.arange(seq_len, dtype=torch.int64)
    attn_logits = torch.empty(1, heads, backend.max_kv_splits, d, dtype=torch.float32)
    attn_lse = torch.empty(1, heads, backend.max_kv_splits, dtype=torch.float32)
    num_kv_splits = torch.tensor(splits, dtype=torch.int32)
    sm_scale = 1.0 / math.sqrt(d)
    fwd = _decode_module().decode_attention_fwd
    # the split kernel, not 0.5.23's Lean decode (a persistent grid that takes no split count)
    lean = {"enable_lean": False} if "enable_lean" in inspect.signature(fwd).parameters else {}
    fwd(q, k, v, o, kv_indptr, kv_indices, attn_logits, attn_lse, num_kv_splits, backend.max_kv_splits, sm_scale,
        1.0, 1.0, **lean)
    qd, kd, vd = q.double(), k.double().repeat_interleave(heads // kv_heads, 1), \
        v.double().repeat_interleave(heads // kv_heads, 1)
    p = torch.softmax(torch.einsum("hd,thd->ht", qd[0], kd) * sm_scale, dim=-1)
    ref = torch.einsum("ht,thd->hd", p, vd)
    bound = 2 ** -7 * float(vd.abs().max())
    err = float((o[0].double() - ref).abs().max())
    out.update(splits=splits[0], err_vs_bound=err / bound, finite=bool(torch.isfinite(o).all()))
    return out
