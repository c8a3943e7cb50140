"""A stand-in for `flashinfer.comm` in CPU tests.

The real module loads libcudart at import (CudaRTLibrary) and every entry point launches CUDA kernels or opens
CUDA IPC handles, none of which exist on a CPU host. The stand-in keeps the real `flashinfer` package importable
(so sglang's is_flashinfer_available() sees it), records workspace creation/destruction, and computes
trtllm_allreduce_fusion with `fused_op` when a scenario supplies one (the op's definition over the real gloo
group). Any other attribute is an import-only placeholder that raises when used.
"""

from __future__ import annotations

import enum
import sys

import _standin


class AllReduceFusionPattern(enum.IntEnum):
    kAllReduce = 0
    kARResidualRMSNorm = 1


def install(fused_op=None):
    import flashinfer

    m = _standin.StandinModule("flashinfer.comm")
    m.workspace_calls = []
    m.destroy_calls = []
    m.AllReduceFusionPattern = AllReduceFusionPattern

    def create_workspace(rank, world_size, max_token_num, hidden_dim, group=None, use_fp32_lamport=False):
        m.workspace_calls.append({"rank": rank, "world_size": world_size, "max_token_num": max_token_num,
                                  "hidden_dim": hidden_dim, "use_fp32_lamport": use_fp32_lamport})
        return (f"ipc-handles-{len(m.workspace_calls)}", f"workspace-{len(m.workspace_calls)}")

    def destroy_workspace(handles, group=None):
        m.destroy_calls.append(handles)

    def trtllm_allreduce_fusion(**kw):
        if fused_op is None:
            raise RuntimeError("trtllm_allreduce_fusion called but the scenario supplied no fused_op")
        norm_out, residual_out = fused_op(kw["allreduce_in"], kw["residual_in"], kw["rms_gamma"], kw["rms_eps"])
        kw["norm_out"].copy_(norm_out)
        kw["residual_out"].copy_(residual_out)

    m.trtllm_create_ipc_workspace_for_all_reduce_fusion = create_workspace
    m.trtllm_destroy_ipc_workspace_for_all_reduce = destroy_workspace
    m.trtllm_allreduce_fusion = trtllm_allreduce_fusion

    # the unified API (flashinfer >= 0.6.10; sglang 0.5.14+)
    class Workspace:
        backend = "trtllm"

        def __init__(self, max_token_num, hidden_dim, use_fp32_lamport=False):
            self.max_token_num, self.hidden_dim = max_token_num, hidden_dim
            self.metadata = {"use_fp32_lamport": use_fp32_lamport}  # read by sglang >= 0.5.23

        def is_buffer_size_sufficient(self, tp_size, num_tokens, hidden_dim, dtype, use_oneshot=None):
            return num_tokens <= self.max_token_num and hidden_dim <= self.hidden_dim

        def destroy(self):
            m.destroy_calls.append(self)

    def create_allreduce_fusion_workspace(backend="auto", world_size=None, rank=None, max_token_num=None,
                                          hidden_dim=None, dtype=None, gpus_per_node=None, comm_backend=None,
                                          group=None, force_oneshot_support=False, use_fp32_lamport=False):
        m.workspace_calls.append({"rank": rank, "world_size": world_size, "max_token_num": max_token_num,
                                  "hidden_dim": hidden_dim, "use_fp32_lamport": use_fp32_lamport,
                                  "backend": backend})
        return Workspace(max_token_num, hidden_dim, use_fp32_lamport)

    def allreduce_fusion(input, workspace, pattern, launch_with_pdl=False, residual_out=None, norm_out=None,
                         residual_in=None, rms_gamma=None, rms_eps=1e-6, use_oneshot=None, fp32_acc=False,
                         trigger_completion_at_end=False, **_):
        if fused_op is None:
            raise RuntimeError("allreduce_fusion called but the scenario supplied no fused_op")
        assert input.shape[0] <= workspace.max_token_num, "workspace too small for this batch"
        n, r = fused_op(input, residual_in, rms_gamma, rms_eps)
        norm_out.copy_(n)
        residual_out.copy_(r)

    m.create_allreduce_fusion_workspace = create_allreduce_fusion_workspace
    m.allreduce_fusion = allreduce_fusion
    sys.modules["flashinfer.comm"] = m
    flashinfer.comm = m
    return m
