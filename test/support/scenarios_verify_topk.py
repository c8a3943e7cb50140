"""Scenarios for test_p14_flashinfer_mla_verify_topk.py: what sglang's own argument resolution (a real `ServerArgs`,
resolved as `launch_server` resolves it, device "cuda": resolution reads no GPU) makes of an EAGLE-3 launch per
target kind (a DeepSeek-V3-shaped MLA model, a Llama-shaped GQA one), attention backend(s), speculative attention
mode and draft top-k. The draft is a LlamaForCausalLMEagle3 (GQA) config: FlashInfer's MLA draft-decode backend,
which refuses top-k > 1 on its own, is never built for it.

`cases()` -> {"rows": [{"name", "mla", "backends", "mode", "topk", "refused": the ValueError's text or None,
"error": any other exception's "Type: text" or None, "topk_after": the resolved top-k}]}.
"""

from __future__ import annotations

import tempfile

# (name, MLA target, {backend fields}, --speculative-attention-mode, --speculative-eagle-topk)
CASES = [
    ("mla flashinfer topk 4", True, {"attention_backend": "flashinfer"}, "prefill", 4),
    ("mla flashinfer topk 4, decode mode", True, {"attention_backend": "flashinfer"}, "decode", 4),
    ("mla flashinfer topk 1", True, {"attention_backend": "flashinfer"}, "prefill", 1),
    ("mla triton topk 4", True, {"attention_backend": "triton"}, "prefill", 4),
    ("gqa flashinfer topk 4", False, {"attention_backend": "flashinfer"}, "prefill", 4),
    ("mla hybrid, verify on flashinfer", True,
     {"prefill_attention_backend": "flashinfer", "decode_attention_backend": "triton"}, "prefill", 4),
    ("mla hybrid, verify on triton", True,
     {"prefill_attention_backend": "flashinfer", "decode_attention_backend": "triton"}, "decode", 4),
]
COMMON = {"vocab_size": 1024, "num_hidden_layers": 1, "intermediate_size": 64, "max_position_embeddings": 4096}


def _model_dirs(root: str) -> dict[str, str]:
    """config.json of an MLA target, a GQA target and a GQA EAGLE-3 draft (no weights: resolution reads configs)."""
    from transformers import DeepseekV3Config, LlamaConfig

    dirs = {k: tempfile.mkdtemp(prefix=f"{k}-", dir=root) for k in ("mla", "gqa", "draft")}
    DeepseekV3Config(num_attention_heads=8, num_key_value_heads=8, hidden_size=1024, kv_lora_rank=512,
                     qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128, moe_intermediate_size=64,
                     n_routed_experts=8, architectures=["DeepseekV3ForCausalLM"], **COMMON).save_pretrained(dirs["mla"])
    LlamaConfig(num_attention_heads=8, num_key_value_heads=2, head_dim=128, hidden_size=1024,
                architectures=["LlamaForCausalLM"], **COMMON).save_pretrained(dirs["gqa"])
    LlamaConfig(num_attention_heads=8, num_key_value_heads=2, head_dim=128, hidden_size=1024,
                architectures=["LlamaForCausalLMEagle3"], **COMMON).save_pretrained(dirs["draft"])
    return dirs


def _resolve(**fields):
    """A ServerArgs resolved as the launcher resolves it: in __post_init__ (0.5.9, 0.5.14) or resolve_once (0.5.23)."""
    from sglang.srt.server_args import ServerArgs

    args = ServerArgs(**fields)
    resolve = getattr(args, "resolve_once", None)
    if resolve is not None:
        resolve()
    return args


def cases() -> dict:
    rows = []
    with tempfile.TemporaryDirectory() as root:
        dirs = _model_dirs(root)
        for name, mla, backends, mode, topk in CASES:
            row = {"name": name, "mla": mla, "backends": backends, "mode": mode, "topk": topk, "refused": None,
                   "error": None, "topk_after": None}
            try:
                args = _resolve(model_path=dirs["mla" if mla else "gqa"], speculative_algorithm="EAGLE3",
                                speculative_draft_model_path=dirs["draft"], speculative_num_steps=3,
                                speculative_eagle_topk=topk, speculative_num_draft_tokens=8 if topk > 1 else 4,
                                speculative_attention_mode=mode, device="cuda", skip_tokenizer_init=True, **backends)
                row["topk_after"] = args.speculative_eagle_topk
            except ValueError as e:
                row["refused"] = str(e)
            except Exception as e:  # noqa: BLE001 - reported, the test names it
                row["error"] = f"{type(e).__name__}: {e}"[:500]
            rows.append(row)
    return {"rows": rows}
