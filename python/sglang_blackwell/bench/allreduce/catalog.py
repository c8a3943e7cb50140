"""The all-reduce backends `bench allreduce` knows, as data (no torch import: the CLI validates with it).

op "ar" is a plain all-reduce (sum); op "ar_rmsnorm" is all-reduce + residual add + RMSNorm, the pair every
DeepSeek-V3 layer boundary does twice. Backends are only ever compared with backends of the same op.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BackendInfo:
    name: str
    op: str  # "ar" | "ar_rmsnorm"
    what: str
    multicast: bool = False  # needs NVLink multicast (multimem): only with --allow-multicast
    # The SGLang path that runs it, named as box/allreduce_paths.py's rule for that path names it (its Backend
    # id), or why SGLang never selects it on its own path: exactly one of the two is set.
    sglang_path: str = ""
    never_selected: str = ""


FI_AR_ALONE = ("a reference: sglang never runs FlashInfer's kAllReduce without the residual+RMSNorm fused into "
               "it (that fused op is fi_fused_*)")

CATALOG: dict[str, BackendInfo] = {b.name: b for b in (
    BackendInfo("nccl", "ar", "NCCL all_reduce, in place (sglang's default path)", sglang_path="nccl"),
    BackendInfo("fi_ar_oneshot", "ar", "FlashInfer trtllm_allreduce_fusion kAllReduce, one-shot (Lamport)",
                never_selected=FI_AR_ALONE),
    BackendInfo("fi_ar_twoshot", "ar", "FlashInfer trtllm_allreduce_fusion kAllReduce, two-shot",
                never_selected=FI_AR_ALONE),
    BackendInfo("symm_oneshot", "ar", "torch symm-mem one_shot_all_reduce_copy_out (copy-in fused)",
                sglang_path="torch_symm_mem"),
    BackendInfo("symm_twoshot", "ar", "torch symm-mem copy-in + two_shot_all_reduce_ + copy-out (sglang's)",
                sglang_path="torch_symm_mem"),
    BackendInfo("fi_pcie_ipc", "ar", "FlashInfer PCIe-IPC all-reduce (flashinfer >= 0.7.0)",
                sglang_path="pcie_ipc"),
    BackendInfo("symm_multimem", "ar", "torch symm-mem copy-in + multimem_all_reduce_ + copy-out",
                multicast=True, sglang_path="torch_symm_mem"),
    BackendInfo("nccl_norm", "ar_rmsnorm", "NCCL all_reduce, then fused add+RMSNorm (the unfused baseline)",
                sglang_path="nccl"),
    BackendInfo("symm_oneshot_norm", "ar_rmsnorm", "symm_oneshot, then fused add+RMSNorm",
                sglang_path="torch_symm_mem"),
    BackendInfo("symm_twoshot_norm", "ar_rmsnorm", "symm_twoshot, then fused add+RMSNorm",
                sglang_path="torch_symm_mem"),
    BackendInfo("fi_pcie_ipc_norm", "ar_rmsnorm", "fi_pcie_ipc, then fused add+RMSNorm (sglang 0.5.23's path)",
                sglang_path="pcie_ipc"),
    BackendInfo("fi_fused_oneshot", "ar_rmsnorm", "FlashInfer kARResidualRMSNorm, one-shot (sglang's)",
                sglang_path="flashinfer_fusion"),
    BackendInfo("fi_fused_twoshot", "ar_rmsnorm", "FlashInfer kARResidualRMSNorm, two-shot",
                sglang_path="flashinfer_fusion"),
)}

NCCL_BACKENDS = ("nccl", "nccl_norm")  # what --nccl-profile re-measures under each profile


def default_backends(allow_multicast: bool) -> list[str]:
    return [n for n, b in CATALOG.items() if allow_multicast or not b.multicast]
