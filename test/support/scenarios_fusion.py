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


def absorbed_fusion_cases(rank: int, world_size: int) -> dict:
    """The scenarios of the fusion-path backports upstream absorbed (P4's fallback, P3's EAGLE-3 capture), in
    one pair of ranks: where a base carries neither, one sglang import answers both."""
    return {"fallback": rmsnorm_fallback_cases(rank, world_size), "eagle3": eagle3_capture_on_off(rank, world_size)}


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
    --enable-flashinfer-allreduce-fusion (0.5.9) or --flashinfer-allreduce-fusion-backend trtllm (0.5.14+).
    sglang >= 0.5.23 resolves and publishes the record instead (support.sglang_compat), as this process's rank
    of the TP group (torch.distributed's rank, 0 before init)."""
    import dataclasses

    from support import sglang_compat

    if sglang_compat.runtime_context():
        if fusion is not None:
            overrides["flashinfer_allreduce_fusion_backend"] = "trtllm" if fusion else None
        return sglang_compat.publish_server_args(sglang_compat.current_rank(), **overrides)

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
    from support import sglang_compat

    if sglang_compat.runtime_context():
        from sglang.srt.runtime_context import get_exec

        return get_exec().comm.flashinfer_allreduce_fusion_backend is not None
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


def eagle3_summary(ranks: list[dict]) -> dict:
    """What the EAGLE-3 check looks at, from eagle3_capture_on_off's per-rank results: captured layers, fused
    calls, and the largest differences fusion on vs off, rank 0 vs rank 1 (partial sums differ per rank), and
    in the model output (a sanity check of the scenario)."""
    t = torch.tensor
    off, on = [r["off"] for r in ranks], [r["on"] for r in ranks]
    return {
        "n_aux": [len(off[0]["aux"]), len(on[0]["aux"])],
        "fused_calls": [r["fused_calls"] for r in on],
        "aux_diff": max(float((t(a) - t(b)).abs().max())
                        for a, b in zip(off[0]["aux"], on[0]["aux"], strict=True)),
        "rank_diff": max(float((t(a) - t(b)).abs().max())
                         for a, b in zip(on[0]["aux"], on[1]["aux"], strict=True)),
        "out_diff": float((t(off[0]["hidden"]) - t(on[0]["hidden"])).abs().max()),
    }


def eagle3_capture_on_off(rank: int, world_size: int) -> dict:
    return {"off": eagle3_capture(rank, world_size, fusion=False), "on": eagle3_capture(rank, world_size, fusion=True)}


def eagle3_capture(rank: int, world_size: int, fusion: bool, num_layers: int = 5, hidden: int = 64,
                   tokens: int = 3, layers_to_capture=(1, 2, 3)) -> dict:
    """Run the real DeepseekV2Model.forward / DeepseekV2DecoderLayer.forward / LayerCommunicator over
    `num_layers` layers (attention and MLP replaced by row-parallel partial-sum modules) in TARGET_VERIFY
    mode, with FlashInfer fusion on or off (SM90 + FlashInfer simulated; the fused op computed by
    reference_fused_allreduce_rmsnorm over the real TP group). Returns the captured aux hidden states."""
    from support import sglang_compat

    if sglang_compat.has_module("sglang.srt.layers.layer_boundary"):
        return _eagle3_capture_layer_boundary(rank, world_size, fusion, num_layers, hidden, tokens,
                                              layers_to_capture)
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


class _BoundaryAttention(_RowParallelPartial):
    """sglang >= 0.5.23: attention with reduce_results=False under the layer-boundary machinery."""

    def maybe_use_decode_attn_tp(self, forward_batch):
        import contextlib

        return contextlib.nullcontext()

    def forward(self, positions, hidden_states, forward_batch, zero_allocator, **_):
        return self.partial(hidden_states)


class _BoundaryMLP(_RowParallelPartial):
    """sglang >= 0.5.23: the FFN returns partial sums; the stage exit completes (or defers) the sum."""

    def forward(self, hidden_states, forward_batch, gemm_output_zero_allocator=None):
        return self.partial(hidden_states)


def _eagle3_capture_layer_boundary(rank, world_size, fusion, num_layers, hidden, tokens, layers_to_capture):
    """sglang >= 0.5.23: the same model through the layer-boundary stages (layer_boundary/), whose FFN exit
    leaves its all-reduce to the next layer's fused input norm. Layers are built inside a real layer stack
    (make_layers), so the stages bind to their neighbours as in the model."""
    from types import SimpleNamespace

    from support import fi_comm

    fi_comm.install()
    default_server_args(fusion=fusion, tp_size=world_size, device="cpu")
    import sglang.srt.layers.flashinfer_comm_fusion as fcf
    from sglang.srt.layers.dp_attention import initialize_dp_attention
    from sglang.srt.layers.layer_boundary.residual import add_norm
    from sglang.srt.layers.layernorm import RMSNorm
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.models import deepseek_v2 as dsv2
    from sglang.srt.runtime_context import get_server_args
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    from sglang.srt.utils.common import make_layers

    initialize_dp_attention(get_server_args())
    add_norm._is_sm90_supported = True  # simulated: SM90 with FlashInfer
    add_norm._is_flashinfer_available = True
    fused_calls = [0]

    def counted_fused_op(**kw):
        fused_calls[0] += 1
        return reference_fused_allreduce_rmsnorm(**kw)

    fcf.flashinfer_allreduce_residual_rmsnorm = counted_fused_op
    config = SimpleNamespace(n_routed_experts=None, first_k_dense_replace=num_layers, moe_layer_freq=1,
                             hidden_size=hidden, num_hidden_layers=num_layers)

    def layer_fn(idx, prefix):
        layer = dsv2.DeepseekV2DecoderLayer.__new__(dsv2.DeepseekV2DecoderLayer)
        torch.nn.Module.__init__(layer)
        layer.config, layer.layer_id, layer.is_nextn, layer.hidden_size = config, idx, False, hidden
        layer.speculative_algorithm = SpeculativeAlgorithm.from_string("EAGLE3")
        layer.self_attn = _BoundaryAttention(hidden, rank, world_size, seed=100 + idx)
        layer.mlp = _BoundaryMLP(hidden, rank, world_size, seed=200 + idx)
        layer.is_layer_sparse = False
        layer.input_layernorm = RMSNorm(hidden, eps=1e-6)
        layer.post_attention_layernorm = RMSNorm(hidden, eps=1e-6)
        layer._gfx95_quant_format = ""
        layer.attn_boundary, layer.ffn_boundary = layer._build_stages(
            input_layernorm=layer.input_layernorm, post_attention_layernorm=layer.post_attention_layernorm,
            qkv_latent_func=None)
        return layer

    model = dsv2.DeepseekV2Model.__new__(dsv2.DeepseekV2Model)
    torch.nn.Module.__init__(model)
    model.config = config
    model.use_dsa = False
    g = torch.Generator().manual_seed(7)
    model.embed_tokens = torch.nn.Embedding(100, hidden)
    with torch.no_grad():
        model.embed_tokens.weight.copy_(torch.randn(100, hidden, generator=g))
    model.layers = make_layers(num_layers, layer_fn)
    model.start_layer, model.end_layer = 0, num_layers
    model.next_full_attention_layer_id = {i: i + 1 for i in range(num_layers - 1)}
    model.norm = RMSNorm(hidden, eps=1e-6)
    model.first_k_dense_replace = num_layers
    model.layers_to_capture = list(layers_to_capture)
    model.enable_a2a_moe = False
    model.llama_4_scaling_config = None
    model.gemm_output_zero_allocator_size = 0
    model.pp_group = SimpleNamespace(is_first_rank=True, is_last_rank=True)

    input_ids = torch.arange(tokens) + 5
    batch = SimpleNamespace(input_ids=input_ids, positions=torch.arange(tokens),
                            forward_mode=ForwardMode.TARGET_VERIFY, can_run_tbo=False, batch_size=1,
                            attn_cp_metadata=None, nsa_cp_metadata=None, residual_stream=None,
                            dp_padding_mode=None)
    with torch.no_grad():
        out = model.forward(input_ids, torch.arange(tokens), batch)
    hidden_out, aux = out if isinstance(out, tuple) else (out, [])
    if isinstance(aux, torch.Tensor):  # packed: one [tokens, hidden * n] tensor
        aux = list(aux.split(hidden, dim=-1))
    return {"aux": [a.tolist() for a in aux], "hidden": hidden_out.tolist(), "fused_calls": fused_calls[0]}


# ---------------------------------------------------------------------------------------------------------
# Fusion workspace created before CUDA-graph capture and sized for the captured graphs (P5)


GATE_SIZES = (1, 24, 25, 48, 49, 2048)


def workspace_at_capture(rank: int, world_size: int, cuda_graph_bs=(1, 2, 4, 8, 16), draft_tokens: int = 3,
                         hidden: int = 64) -> dict:
    """Build a real CudaGraphRunner for an EAGLE-3 target (TARGET_VERIFY graphs) with fusion enabled; its
    capture() is replaced by a recorder of the fusion workspace state at the moment capture would start.
    Then exercise the fused RMSNorm path at and above the captured size, as prefill would."""
    from support import sglang_compat

    if sglang_compat.runtime_context():
        return _workspace_before_capture_published(rank, world_size, cuda_graph_bs, draft_tokens, hidden)
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


def _workspace_before_capture_published(rank, world_size, cuda_graph_bs, draft_tokens, hidden) -> dict:
    """sglang >= 0.5.23: the same, through the published runtime context: decode graphs up to bs 16 with 3
    draft tokens as server args, SM90 stated with override_platform, the real
    BaseRunner._pre_initialize_flashinfer_allreduce_workspace on an EagerRunner of an EAGLE-3 target whose
    ModelRunner answers the decode-width questions with its own methods (no DP attention: no gathers)."""
    from types import SimpleNamespace

    from support import cpu_ops, fi_comm

    cpu_ops.register_custom_ops_for_cpu()
    fc = fi_comm.install(fused_op=reference_fused_allreduce_rmsnorm)
    from sglang.srt.model_executor.cuda_graph_config import CudaGraphConfig, Phase, with_phase

    # the record has no model, so resolution stops before it derives the CUDA-graph config: state it, as
    # --cuda-graph-config '{"decode": {"max_bs": 16, "bs": [1, 2, 4, 8, 16]}}' resolves to
    graphs = with_phase(CudaGraphConfig(), Phase.DECODE, max_bs=max(cuda_graph_bs), bs=list(cuda_graph_bs))
    default_server_args(fusion=True, tp_size=world_size, device="cpu", cuda_graph_config=graphs,
                        speculative_algorithm="EAGLE3", speculative_num_draft_tokens=draft_tokens,
                        speculative_num_steps=draft_tokens - 1, speculative_eagle_topk=1)
    import sglang.srt.layers.flashinfer_comm_fusion as fcf
    from sglang.srt.layers.dp_attention import initialize_dp_attention
    from sglang.srt.layers.layer_boundary.residual import add_norm
    from sglang.srt.layers.layernorm import RMSNorm
    from sglang.srt.model_executor.runner.decode_cuda_graph_runner import DecodeCudaGraphRunner
    from sglang.srt.model_executor.runner.eager_runner import EagerRunner
    from sglang.srt.runtime_context import get_server_args, override_platform
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    initialize_dp_attention(get_server_args())
    override_platform(is_sm90=True, is_sm100=False, is_sm120=False).install()  # simulated SM90
    add_norm._is_sm90_supported = True
    add_norm._is_flashinfer_available = True
    fcf.is_flashinfer_available = lambda: True
    fcf._flashinfer_comm = fc
    fcf._create_allreduce_fusion_workspace = fc.create_allreduce_fusion_workspace
    fcf._flashinfer_create_workspace_supports_group = True
    fcf._preflight_check_workspace_memory = lambda **kw: True  # simulated: GPU memory for the workspace

    model_config = SimpleNamespace(hidden_size=hidden, vocab_size=1000, dtype=torch.bfloat16,
                                   hf_config=SimpleNamespace(architectures=["DeepseekV3ForCausalLM"]))
    mr = _TargetModelRunner(server_args=get_server_args(), spec_algorithm=SpeculativeAlgorithm.from_string("EAGLE3"),
                            is_draft_worker=False, model_config=model_config, dtype=torch.bfloat16, device="cuda",
                            req_to_token_pool=SimpleNamespace(size=max(cuda_graph_bs)),
                            decode_runner_cls=DecodeCudaGraphRunner)
    runner = EagerRunner.__new__(EagerRunner)
    runner.model_runner = mr
    runner._pre_initialize_flashinfer_allreduce_workspace()
    max_num_token = max(cuda_graph_bs) * draft_tokens
    mgr = fcf._get_workspace_manager(True)
    gate = add_norm.flashinfer_ar_fusion_applies
    seen = {"initialized": bool(mgr.initialized), "calls": [c for c in fc.workspace_calls if c["rank"] == rank][-1:],
            "gate": {n: bool(gate(n)) for n in GATE_SIZES}, "gate_at_max": gate(max_num_token),
            "gate_above_max": gate(max_num_token + 1), "max_num_token": max_num_token}
    norm = RMSNorm(hidden, eps=1e-6).to(torch.bfloat16)
    prefill_tokens = 2048
    before = len(fc.workspace_calls)
    x = torch.randn(prefill_tokens, hidden, dtype=torch.bfloat16)
    res = torch.randn(prefill_tokens, hidden, dtype=torch.bfloat16)
    prefill_error = None
    try:
        if gate(prefill_tokens):
            with torch.no_grad():
                norm.forward_with_allreduce_fusion(x, res)
    except AssertionError as e:
        prefill_error = f"AssertionError: {e}"
    return dict(seen, prefill_gate=gate(prefill_tokens), prefill_error=prefill_error,
                workspace_calls_after=len(fc.workspace_calls) - before)


class _TargetModelRunner:
    """The ModelRunner facts a runner's warmup reads, for an EAGLE-3 target (sglang >= 0.5.23). ModelRunner itself
    does not import in the CPU test environment (its module pulls the HTTP server stack); its two decode-width
    methods are what ModelRunner.decode_num_tokens_per_req / decode_graph_gather_requirements do for a
    non-DSpark speculative target: upstream's resolve_num_tokens_per_req and the decode runner class's own
    gather requirements."""

    def __init__(self, decode_runner_cls, **facts):
        self.__dict__.update(facts)
        self._decode_runner_cls = decode_runner_cls

    def decode_num_tokens_per_req(self, *, num_draft_tokens=None) -> int:
        from sglang.srt.speculative.spec_utils import resolve_num_tokens_per_req

        return resolve_num_tokens_per_req(phase="target_verify", spec_algorithm=self.spec_algorithm,
                                          is_draft_worker=self.is_draft_worker, num_draft_tokens=num_draft_tokens)

    def decode_graph_gather_requirements(self) -> tuple[bool, bool]:
        return self._decode_runner_cls.decode_graph_gather_requirements(self)
