"""TP scenarios around FlashInfer AR+residual+RMSNorm fusion, run on CPU ranks by support.tp.run_tp.

The FlashInfer kernel itself cannot run here; where a scenario needs the fused op to *succeed* it is replaced
by `reference_fused_allreduce_rmsnorm` (the op's definition: all-reduce, residual add, RMSNorm, over the real
gloo TP group). Where it needs the op to *decline*, the op returns (None, None) as it does without FlashInfer.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def _tp_group():
    from sglang.srt.distributed import get_tp_group

    return get_tp_group()


def reference_fused_allreduce_rmsnorm(input_tensor, residual, weight, eps=1e-6, **_):
    x = input_tensor.clone()
    dist.all_reduce(x, group=_tp_group().cpu_group)
    residual_out = x + residual
    var = residual_out.float().pow(2).mean(-1, keepdim=True)
    norm_out = (residual_out.float() * torch.rsqrt(var + eps)).to(x.dtype) * weight
    return norm_out, residual_out


def rmsnorm_fallback_cases(rank: int, world_size: int) -> dict:
    return {"plain": rmsnorm_fallback(rank, world_size, post_residual=False),
            "post_residual_addition": rmsnorm_fallback(rank, world_size, post_residual=True)}


def rmsnorm_fallback(rank: int, world_size: int, hidden: int = 64, tokens: int = 3,
                     post_residual: bool = False) -> dict:
    """RMSNorm.forward_with_allreduce_fusion when the fused op declines: is the all-reduce still done?"""
    from support import fi_comm

    fi_comm.install()
    import sglang.srt.layers.flashinfer_comm_fusion as fcf
    from sglang.srt.layers.layernorm import RMSNorm

    fcf.flashinfer_allreduce_residual_rmsnorm = lambda **kw: (None, None)  # kernel unavailable
    torch.manual_seed(0)
    partials = [torch.randn(tokens, hidden) for _ in range(world_size)]
    residual = torch.randn(tokens, hidden)
    post = torch.randn(tokens, hidden) if post_residual else None
    norm = RMSNorm(hidden, eps=1e-6)
    with torch.no_grad():
        norm.weight.copy_(torch.linspace(0.5, 1.5, hidden))
    residual_in = residual.clone()
    with torch.no_grad():
        out, res_out = norm.forward_with_allreduce_fusion(partials[rank].clone(), residual_in, post)
    full = sum(partials)
    exp_out, exp_res = reference_fused_allreduce_rmsnorm_local(full, residual + (post if post is not None else 0),
                                                               norm.weight.detach(), 1e-6)
    return {
        "out_max_err": float((out - exp_out).abs().max()),
        "residual_max_err": float((res_out - exp_res).abs().max()),
        "caller_residual_untouched": bool(torch.equal(residual_in, residual)),
    }


def reference_fused_allreduce_rmsnorm_local(full, residual, weight, eps):
    residual_out = full + residual
    var = residual_out.float().pow(2).mean(-1, keepdim=True)
    return (residual_out.float() * torch.rsqrt(var + eps)).to(full.dtype) * weight, residual_out


# ---------------------------------------------------------------------------------------------------------
# EAGLE-3 aux hidden-state capture through DeepseekV2Model.forward (P3)


def default_server_args(fusion: bool | None = None, **overrides):
    """A ServerArgs holding its declared defaults (no __post_init__: no model, no GPU probing).

    fusion=True/False sets the user's fusion opt-in the way this sglang version spells it:
    --enable-flashinfer-allreduce-fusion (0.5.9) or --flashinfer-allreduce-fusion-backend trtllm (0.5.14+)."""
    import dataclasses

    from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler

    args = ServerArgs.__new__(ServerArgs)
    for f in dataclasses.fields(ServerArgs):
        if f.default is not dataclasses.MISSING:
            setattr(args, f.name, f.default)
        elif f.default_factory is not dataclasses.MISSING:
            setattr(args, f.name, f.default_factory())
    if fusion is not None:
        if hasattr(args, "flashinfer_allreduce_fusion_backend"):
            args.flashinfer_allreduce_fusion_backend = "trtllm" if fusion else None
        else:
            args.enable_flashinfer_allreduce_fusion = fusion
    if getattr(args, "cuda_graph_config", False) is None:  # sglang >= 0.5.14 fills it in __post_init__
        from sglang.srt.model_executor.cuda_graph_config import CudaGraphConfig

        args.cuda_graph_config = CudaGraphConfig()
    for k, v in overrides.items():
        setattr(args, k, v)
    set_global_server_args_for_scheduler(args)
    return args


def fusion_enabled(args) -> bool:
    if hasattr(args, "flashinfer_allreduce_fusion_backend"):
        return args.flashinfer_allreduce_fusion_backend is not None
    return bool(args.enable_flashinfer_allreduce_fusion)


class _RowParallelPartial(torch.nn.Module):
    """Stands in for attention/MLP whose output projection is row-parallel: each rank returns its partial
    sum. `reduce` mirrors DeepseekV2MLP: all-reduce unless the caller defers it to the next layer's fusion."""

    def __init__(self, hidden: int, rank: int, world_size: int, seed: int):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        full = torch.randn(hidden, hidden, generator=g) * 0.2
        self.weight = full.chunk(world_size, dim=0)[rank].clone()
        self.rank, self.world_size = rank, world_size

    def partial(self, x: torch.Tensor) -> torch.Tensor:
        # x @ full == sum over ranks of x[:, shard_r] @ full[shard_r, :]
        cols = x.chunk(self.world_size, dim=-1)[self.rank]
        return cols @ self.weight


class _FakeAttention(_RowParallelPartial):
    def forward(self, positions, hidden_states, forward_batch, zero_allocator, llama_4_scaling=None, **_):
        return self.partial(hidden_states)  # o_proj with reduce_results=False: partial sums


class _FakeMLP(_RowParallelPartial):
    def forward(self, hidden_states, forward_batch, should_allreduce_fusion=False, use_reduce_scatter=False,
                gemm_output_zero_allocator=None):
        from sglang.srt.distributed import tensor_model_parallel_all_reduce

        out = self.partial(hidden_states)
        if not should_allreduce_fusion and not use_reduce_scatter:
            out = tensor_model_parallel_all_reduce(out)
        return out


def eagle3_capture_on_off(rank: int, world_size: int) -> dict:
    return {"off": eagle3_capture(rank, world_size, fusion=False), "on": eagle3_capture(rank, world_size, fusion=True)}


def eagle3_capture(rank: int, world_size: int, fusion: bool, num_layers: int = 5, hidden: int = 64,
                   tokens: int = 3, layers_to_capture=(1, 2, 3)) -> dict:
    """Run the real DeepseekV2Model.forward / DeepseekV2DecoderLayer.forward / LayerCommunicator over
    `num_layers` layers (attention and MLP replaced by row-parallel partial-sum modules) in TARGET_VERIFY
    mode, with FlashInfer fusion on or off (SM90 + FlashInfer simulated; the fused op computed by
    reference_fused_allreduce_rmsnorm over the real TP group). Returns the captured aux hidden states."""
    from types import SimpleNamespace

    from support import fi_comm

    fi_comm.install()
    import sglang.srt.layers.communicator as comm
    import sglang.srt.layers.flashinfer_comm_fusion as fcf
    from sglang.srt.layers.communicator import LayerCommunicator, LayerScatterModes
    from sglang.srt.layers.dp_attention import initialize_dp_attention
    from sglang.srt.layers.layernorm import RMSNorm
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.models import deepseek_v2 as dsv2

    args = default_server_args(fusion=fusion, tp_size=world_size, device="cpu")
    initialize_dp_attention(args, SimpleNamespace(hidden_size=hidden, dtype=torch.float32, hf_config=SimpleNamespace()))
    comm._is_sm90_supported = True  # simulated: SM90 with FlashInfer
    comm._is_flashinfer_available = True
    fused_calls = [0]

    def counted_fused_op(**kw):
        fused_calls[0] += 1
        return reference_fused_allreduce_rmsnorm(**kw)

    fcf.flashinfer_allreduce_residual_rmsnorm = counted_fused_op

    layers = torch.nn.ModuleList()
    for i in range(num_layers):
        layer = dsv2.DeepseekV2DecoderLayer.__new__(dsv2.DeepseekV2DecoderLayer)
        torch.nn.Module.__init__(layer)
        layer.layer_id = i
        layer.nsa_enable_prefill_cp = False
        layer.dsa_enable_prefill_cp = layer.mla_enable_prefill_cp = False  # sglang 0.5.14
        layer.self_attn = _FakeAttention(hidden, rank, world_size, seed=100 + i)
        layer.mlp = _FakeMLP(hidden, rank, world_size, seed=200 + i)
        layer.input_layernorm = RMSNorm(hidden, eps=1e-6)
        layer.post_attention_layernorm = RMSNorm(hidden, eps=1e-6)
        layer.layer_scatter_modes = LayerScatterModes.init_new(
            layer_id=i, num_layers=num_layers, is_layer_sparse=False, is_previous_layer_sparse=False,
            is_next_layer_sparse=False)
        layer.layer_communicator = LayerCommunicator(
            layer_scatter_modes=layer.layer_scatter_modes, input_layernorm=layer.input_layernorm,
            post_attention_layernorm=layer.post_attention_layernorm, allow_reduce_scatter=True,
            is_last_layer=(i == num_layers - 1))
        layers.append(layer)

    model = dsv2.DeepseekV2Model.__new__(dsv2.DeepseekV2Model)
    torch.nn.Module.__init__(model)
    g = torch.Generator().manual_seed(7)
    model.embed_tokens = torch.nn.Embedding(100, hidden)
    with torch.no_grad():
        model.embed_tokens.weight.copy_(torch.randn(100, hidden, generator=g))
    model.layers = layers
    model.norm = RMSNorm(hidden, eps=1e-6)
    model.start_layer, model.end_layer = 0, num_layers
    model.first_k_dense_replace = num_layers
    model.layers_to_capture = list(layers_to_capture)
    model.enable_a2a_moe = False
    model.llama_4_scaling_config = None
    model.gemm_output_zero_allocator_size = 0
    model.pp_group = SimpleNamespace(is_first_rank=True, is_last_rank=True)
    model.cp_size = 1
    model.use_dsa = model.dsa_enable_prefill_cp = model.mla_enable_prefill_cp = False  # sglang 0.5.14
    model.config = SimpleNamespace(num_hidden_layers=num_layers)

    input_ids = torch.arange(tokens) + 5
    batch = SimpleNamespace(input_ids=input_ids, forward_mode=ForwardMode.TARGET_VERIFY, can_run_tbo=False,
                            batch_size=1, attn_cp_metadata=None, nsa_cp_metadata=None)
    with torch.no_grad():
        out = model.forward(input_ids, torch.arange(tokens), batch)
    hidden_out, aux = out if isinstance(out, tuple) else (out, [])
    return {"aux": [a.tolist() for a in aux], "hidden": hidden_out.tolist(), "fused_calls": fused_calls[0]}


# ---------------------------------------------------------------------------------------------------------
# Fusion workspace created before CUDA-graph capture and sized for the captured graphs (P5)


GATE_SIZES = (1, 24, 25, 48, 49, 2048)


def workspace_at_capture(rank: int, world_size: int, cuda_graph_bs=(1, 2, 4, 8, 16), draft_tokens: int = 3,
                         hidden: int = 64) -> dict:
    """Build a real CudaGraphRunner for an EAGLE-3 target (TARGET_VERIFY graphs) with fusion enabled; its
    capture() is replaced by a recorder of the fusion workspace state at the moment capture would start.
    Then exercise the fused RMSNorm path at and above the captured size, as prefill would."""
    if _has_module("sglang.srt.model_executor.runner.base_runner"):
        return _workspace_before_capture_runner(rank, world_size, cuda_graph_bs, draft_tokens, hidden)
    from types import SimpleNamespace

    from support import cpu_ops, fi_comm

    cpu_ops.register_custom_ops_for_cpu()
    fc = fi_comm.install(fused_op=reference_fused_allreduce_rmsnorm)
    import sglang.srt.layers.communicator as comm
    import sglang.srt.layers.flashinfer_comm_fusion as fcf
    from sglang.srt.layers.dp_attention import initialize_dp_attention
    from sglang.srt.layers.layernorm import RMSNorm
    from sglang.srt.model_executor import cuda_graph_runner as cgr
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    args = default_server_args(fusion=True, tp_size=world_size, device="cpu",
                               cuda_graph_bs=list(cuda_graph_bs), cuda_graph_max_bs=max(cuda_graph_bs),
                               speculative_algorithm="EAGLE3", speculative_num_draft_tokens=draft_tokens,
                               speculative_num_steps=draft_tokens - 1, speculative_eagle_topk=1)
    model_config = SimpleNamespace(hidden_size=hidden, vocab_size=1000, dtype=torch.bfloat16,
                                   hf_config=SimpleNamespace(), is_encoder_decoder=False)
    initialize_dp_attention(args, model_config)
    comm._is_sm90_supported = True  # simulated SM90 + FlashInfer
    comm._is_flashinfer_available = True
    fcf._flashinfer_comm = fcf.comm = fc
    fcf.is_flashinfer_available = lambda: True

    seen = {}

    def record_capture(self):
        mgr = fcf._workspace_manager
        seen.update(initialized=mgr.initialized, calls=list(fc.workspace_calls),
                    gate={n: bool(comm.apply_flashinfer_allreduce_fusion(n)) for n in GATE_SIZES},
                    gate_at_max=comm.apply_flashinfer_allreduce_fusion(self.max_num_token),
                    gate_above_max=comm.apply_flashinfer_allreduce_fusion(self.max_num_token + 1),
                    max_num_token=self.max_num_token)

    cgr.CudaGraphRunner.capture = record_capture
    attn_backend = SimpleNamespace(init_cuda_graph_state=lambda *a, **k: None,
                                   get_cuda_graph_seq_len_fill_value=lambda: 1)
    runner = SimpleNamespace(
        server_args=args, device="cpu", model_config=model_config, attn_backend=attn_backend,
        spec_algorithm=SpeculativeAlgorithm.from_string("EAGLE3"), is_draft_worker=False,
        req_to_token_pool=SimpleNamespace(size=max(cuda_graph_bs)), eagle_use_aux_hidden_state=False,
        model=SimpleNamespace(set_eagle3_layers_to_capture=lambda *a: None), lora_manager=None)
    cgr.CudaGraphRunner(runner)

    # after capture: a prefill-sized batch must not trip the workspace's max_token_num assert
    norm = RMSNorm(hidden, eps=1e-6)
    prefill_tokens = 2048
    fused_before = len(fc.workspace_calls)
    x = torch.randn(prefill_tokens, hidden, dtype=torch.bfloat16)
    res = torch.randn(prefill_tokens, hidden, dtype=torch.bfloat16)
    prefill_error = None
    try:
        if comm.apply_flashinfer_allreduce_fusion(prefill_tokens):
            norm.to(torch.bfloat16).forward_with_allreduce_fusion(x, res)
    except AssertionError as e:
        prefill_error = f"AssertionError: {e}"
    return dict(seen, prefill_gate=comm.apply_flashinfer_allreduce_fusion(prefill_tokens),
                prefill_error=prefill_error, workspace_calls_after=len(fc.workspace_calls) - fused_before)


def _has_module(name: str) -> bool:
    """Does the sglang tree under test have this module (by file, without importing it)?"""
    import os

    import sglang

    rel = name.split(".", 1)[1].replace(".", os.sep) + ".py"
    return os.path.exists(os.path.join(os.path.dirname(sglang.__file__), rel))


def _workspace_before_capture_runner(rank, world_size, cuda_graph_bs, draft_tokens, hidden) -> dict:
    """sglang >= 0.5.14: the runners pre-initialize the workspaces in BaseRunner.warmup (first runner: the
    eager one) before any CUDA-graph capture. Run the real _pre_initialize_flashinfer_allreduce_workspace on an
    EagerRunner of an EAGLE-3 target with decode graphs up to bs 16 and 3 draft tokens."""
    from types import SimpleNamespace

    from support import cpu_ops, fi_comm

    cpu_ops.register_custom_ops_for_cpu()
    fc = fi_comm.install(fused_op=reference_fused_allreduce_rmsnorm)
    import sglang.srt.layers.communicator as comm
    import sglang.srt.layers.flashinfer_comm_fusion as fcf
    from sglang.srt.layers.dp_attention import initialize_dp_attention
    from sglang.srt.layers.layernorm import RMSNorm
    from sglang.srt.model_executor.cuda_graph_config import CudaGraphConfig
    from sglang.srt.model_executor.runner.eager_runner import EagerRunner
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    cg = CudaGraphConfig()
    cg.decode.bs = list(cuda_graph_bs)
    cg.decode.max_bs = max(cuda_graph_bs)
    args = default_server_args(fusion=True, tp_size=world_size, device="cpu", cuda_graph_config=cg,
                               speculative_algorithm="EAGLE3", speculative_num_draft_tokens=draft_tokens,
                               speculative_num_steps=draft_tokens - 1, speculative_eagle_topk=1)
    model_config = SimpleNamespace(hidden_size=hidden, vocab_size=1000, dtype=torch.bfloat16,
                                   hf_config=SimpleNamespace())
    initialize_dp_attention(args, model_config)
    comm._is_sm90_supported = True  # simulated SM90 + FlashInfer
    comm._is_flashinfer_available = True
    fcf.is_flashinfer_available = lambda: True
    fcf._flashinfer_comm = fc
    fcf._create_allreduce_fusion_workspace = fc.create_allreduce_fusion_workspace
    fcf._flashinfer_create_workspace_supports_group = True
    fcf._preflight_check_workspace_memory = lambda **kw: True  # simulated: GPU memory for the workspace
    fcf.is_sm90_supported = lambda *a: True  # simulated SM90 for the backend resolution
    fcf.is_sm100_supported = lambda *a: False

    runner = EagerRunner.__new__(EagerRunner)
    runner.model_runner = SimpleNamespace(
        server_args=args, spec_algorithm=SpeculativeAlgorithm.from_string("EAGLE3"), is_draft_worker=False,
        model_config=model_config, dtype=torch.bfloat16, device="cuda")
    runner._pre_initialize_flashinfer_allreduce_workspace()
    max_num_token = max(cuda_graph_bs) * draft_tokens
    mgr = fcf._get_workspace_manager(True)
    seen = {"initialized": bool(mgr.initialized), "calls": [c for c in fc.workspace_calls if c["rank"] == rank],
            "gate": {n: bool(comm.apply_flashinfer_allreduce_fusion(n)) for n in GATE_SIZES},
            "gate_at_max": comm.apply_flashinfer_allreduce_fusion(max_num_token),
            "gate_above_max": comm.apply_flashinfer_allreduce_fusion(max_num_token + 1),
            "max_num_token": max_num_token}
    # both workspaces (attention TP, MoE TP) share a size: report the attention one
    seen["calls"] = seen["calls"][-1:]

    norm = RMSNorm(hidden, eps=1e-6).to(torch.bfloat16)
    prefill_tokens = 2048
    before = len(fc.workspace_calls)
    x = torch.randn(prefill_tokens, hidden, dtype=torch.bfloat16)
    res = torch.randn(prefill_tokens, hidden, dtype=torch.bfloat16)
    prefill_error = None
    try:
        if comm.apply_flashinfer_allreduce_fusion(prefill_tokens):
            with torch.no_grad():
                norm.forward_with_allreduce_fusion(x, res)
    except AssertionError as e:
        prefill_error = f"AssertionError: {e}"
    return dict(seen, prefill_gate=comm.apply_flashinfer_allreduce_fusion(prefill_tokens),
                prefill_error=prefill_error, workspace_calls_after=len(fc.workspace_calls) - before)
