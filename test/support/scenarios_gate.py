"""The FlashInfer all-reduce fusion gate (P2) under a simulated GPU generation, in one process.

Simulated: the device capability (support.cuda_sim) and flashinfer.comm (support.fi_comm). What runs for real:
sglang's communicator.apply_flashinfer_allreduce_fusion and ServerArgs' auto-enable logic for DeepSeek-V3.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

from support import sglang_compat

DSV3_CONFIG = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "vocab_size": 1024,
    "hidden_size": 256, "intermediate_size": 512, "moe_intermediate_size": 128, "num_hidden_layers": 4,
    "num_attention_heads": 4, "num_key_value_heads": 4, "q_lora_rank": 64, "kv_lora_rank": 64,
    "qk_rope_head_dim": 32, "qk_nope_head_dim": 32, "v_head_dim": 32, "n_routed_experts": 8,
    "n_shared_experts": 1, "num_experts_per_tok": 2, "first_k_dense_replace": 1, "moe_layer_freq": 1,
    "n_group": 1, "topk_group": 1, "topk_method": "noaux_tc", "scoring_func": "sigmoid", "norm_topk_prob": True,
    "routed_scaling_factor": 2.5, "hidden_act": "silu", "rms_norm_eps": 1e-6, "max_position_embeddings": 4096,
    "rope_theta": 10000, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}


def gate(capability: tuple[int, int], fusion_flag: bool, tokens: int = 3, tp: int = 8) -> dict:
    """Is fusion applied on this GPU generation? The communicator module is (re)loaded after the simulated
    capability is set: its SM predicates are module-level constants computed at import."""
    import importlib
    import sys

    from support import fi_comm
    from support.cuda_sim import simulate_cuda

    simulate_cuda(capability=tuple(capability), device_count=tp)
    if "flashinfer.comm" not in sys.modules or not hasattr(sys.modules["flashinfer.comm"], "workspace_calls"):
        fi_comm.install()
    from support.scenarios_fusion import default_server_args

    default_server_args(fusion=fusion_flag, tp_size=tp)
    if sglang_compat.has_module("sglang.srt.layers.layer_boundary"):  # sglang >= 0.5.23
        from sglang.srt.layers.layer_boundary.residual import add_norm

        add_norm = importlib.reload(add_norm)
        return {"gate": bool(add_norm.flashinfer_ar_fusion_applies(tokens))}
    from sglang.srt.layers import communicator

    communicator = importlib.reload(communicator)
    return {"gate": bool(communicator.apply_flashinfer_allreduce_fusion(tokens))}


def resolve_backend(capability: tuple[int, int], backend: str, multi_node: bool = False) -> dict:
    """sglang >= 0.5.14: which FlashInfer fusion backend a requested one resolves to (or the error)."""
    from support import fi_comm
    from support.cuda_sim import simulate_cuda

    simulate_cuda(capability=tuple(capability), device_count=8)
    if "flashinfer.comm" not in sys.modules:
        fi_comm.install()
    import sglang.srt.layers.flashinfer_comm_fusion as fcf

    if not hasattr(fcf, "_resolve_backend"):
        return {"resolved": None, "error": None, "applicable": False}
    try:
        return {"resolved": fcf._resolve_backend(backend, multi_node), "error": None, "applicable": True}
    except ValueError as e:
        return {"resolved": None, "error": str(e), "applicable": True}


def resolve_cases(cases: list[dict]) -> list[dict]:
    return [resolve_backend(**c) for c in cases]


def preflight_sizes(multicast_supported: bool) -> dict:
    """sglang >= 0.5.14: the fusion workspace preflight's allocation sizes on a GPU with / without multicast
    (a simulated CUDA driver: allocation granularity 2 MiB; cuMulticastGetGranularity fails without
    multicast, as on PCIe-only GPUs)."""
    from types import SimpleNamespace

    from support import fi_comm

    if "flashinfer.comm" not in sys.modules:
        fi_comm.install()
    import sglang.srt.layers.flashinfer_comm_fusion as fcf

    if not hasattr(fcf, "_flashinfer_trtllm_workspace_allocation_sizes"):
        return {"applicable": False}
    ok, not_supported = "CUDA_SUCCESS", "CUDA_ERROR_NOT_SUPPORTED"
    calls = []

    def get_attr(attr, dev):
        calls.append(("attr", attr))
        return ok, int(multicast_supported)

    def mc_granularity(prop, flags):
        calls.append(("mc_granularity",))
        return (ok, 1 << 29) if multicast_supported else (not_supported, 0)

    driver = SimpleNamespace(
        CUresult=SimpleNamespace(CUDA_SUCCESS=ok),
        CUdevice_attribute=SimpleNamespace(CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED="MULTICAST_SUPPORTED"),
        CUmemAllocationGranularity_flags=SimpleNamespace(CU_MEM_ALLOC_GRANULARITY_RECOMMENDED=0),
        CUmulticastGranularity_flags=SimpleNamespace(CU_MULTICAST_GRANULARITY_RECOMMENDED=0),
        CUmulticastObjectProp=SimpleNamespace,
        cuDeviceGetAttribute=get_attr,
        cuMemGetAllocationGranularity=lambda prop, flags: (ok, 1 << 21),
        cuMulticastGetGranularity=mc_granularity,
    )
    prop = SimpleNamespace(location=SimpleNamespace(id=0), requestedHandleTypes=0)
    try:
        sizes = fcf._flashinfer_trtllm_workspace_allocation_sizes(driver, prop, 8, 48, 7168, torch_bf16())
        return {"applicable": True, "sizes": sizes, "error": None}
    except RuntimeError as e:
        return {"applicable": True, "sizes": None, "error": str(e)}


def torch_bf16():
    import torch

    return torch.bfloat16


def gate_cases(cases: list[dict]) -> list[dict]:
    return [gate(**c) for c in cases]


def auto_enable(capability: tuple[int, int], tp: int = 8) -> dict:
    """Does ServerArgs turn fusion on by itself for a DeepSeek-V3 model on this GPU generation?"""
    from support import fi_comm
    from support.cuda_sim import simulate_cuda

    simulate_cuda(capability=tuple(capability), device_count=tp)
    if "flashinfer.comm" not in sys.modules:
        fi_comm.install()
    from support.scenarios_fusion import default_server_args

    model_dir = tempfile.mkdtemp(prefix="dsv3-config-")
    with open(os.path.join(model_dir, "config.json"), "w") as f:
        json.dump(DSV3_CONFIG, f)
    if sglang_compat.runtime_context():  # sglang >= 0.5.23: the auto-enable is a resolution pass
        from sglang.srt.arg_groups.model_override_base import resolved_view
        from sglang.srt.arg_groups.overrides import _flashinfer_allreduce_fusion_auto_enable
        from sglang.srt.server_args import ServerArgs

        args = ServerArgs(model_path=model_dir, tokenizer_path=model_dir, tp_size=tp)
        decided = _flashinfer_allreduce_fusion_auto_enable(resolved_view(args))
        return {"auto_enabled": decided.get("flashinfer_allreduce_fusion_backend") is not None}
    from support.scenarios_fusion import fusion_enabled

    args = default_server_args(fusion=False, model_path=model_dir, tokenizer_path=model_dir, tp_size=tp)
    args._handle_model_specific_adjustments()
    return {"auto_enabled": fusion_enabled(args)}
