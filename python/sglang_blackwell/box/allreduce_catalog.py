"""The all-reduce vocabulary, as data (no torch import: the CLI validates with it): the backends `bench allreduce`
measures, the order the tuned table prefers them in, and SGLang's own all-reduce paths (box/allreduce_paths.py has
one rule per path; `doctor` prints their ids). bench/allreduce/ reads it; adding a backend starts here.

op "ar" is a plain all-reduce (sum); op "ar_rmsnorm" is all-reduce + residual add + RMSNorm, the pair every
DeepSeek-V3 layer boundary does twice. Backends are only ever compared with backends of the same op.
"""

from __future__ import annotations

from dataclasses import dataclass

OPS = ("ar_rmsnorm", "ar")  # a backend's op: the tuned table has one section each, in this order

# SGLang's all-reduce paths, by the id of their rule in box/allreduce_paths.py: its dispatch order, then the
# FlashInfer fused AR + residual + RMSNorm that replaces a layer's all-reduce for small batches.
PATH_CUSTOM_AR = "custom_ar"
PATH_PCIE_IPC = "pcie_ipc"
PATH_MSCCLPP = "mscclpp"
PATH_TORCH_SYMM_MEM = "torch_symm_mem"
PATH_NCCL = "nccl"
PATH_FLASHINFER_FUSION = "flashinfer_fusion"
SGLANG_PATHS = (PATH_CUSTOM_AR, PATH_PCIE_IPC, PATH_MSCCLPP, PATH_TORCH_SYMM_MEM, PATH_NCCL, PATH_FLASHINFER_FUSION)


@dataclass(frozen=True)
class BackendInfo:
    name: str
    op: str  # "ar" | "ar_rmsnorm"
    what: str
    multicast: bool = False  # needs NVLink multicast (multimem): only with --allow-multicast
    # The SGLang path that runs it (one of SGLANG_PATHS), or why SGLang never selects it on its own path:
    # exactly one of the two is set.
    sglang_path: str = ""
    never_selected: str = ""


FI_AR_ALONE = ("a reference: sglang never runs FlashInfer's kAllReduce without the residual+RMSNorm fused into "
               "it (that fused op is fi_fused_*)")

CATALOG: dict[str, BackendInfo] = {b.name: b for b in (
    BackendInfo("nccl", "ar", "NCCL all_reduce, in place (sglang's default path)", sglang_path=PATH_NCCL),
    BackendInfo("fi_ar_oneshot", "ar", "FlashInfer trtllm_allreduce_fusion kAllReduce, one-shot (Lamport)",
                never_selected=FI_AR_ALONE),
    BackendInfo("fi_ar_twoshot", "ar", "FlashInfer trtllm_allreduce_fusion kAllReduce, two-shot",
                never_selected=FI_AR_ALONE),
    BackendInfo("symm_oneshot", "ar", "torch symm-mem one_shot_all_reduce_copy_out (copy-in fused)",
                sglang_path=PATH_TORCH_SYMM_MEM),
    BackendInfo("symm_twoshot", "ar", "torch symm-mem copy-in + two_shot_all_reduce_ + copy-out (sglang's)",
                sglang_path=PATH_TORCH_SYMM_MEM),
    BackendInfo("fi_pcie_ipc", "ar", "FlashInfer PCIe-IPC all-reduce (flashinfer >= 0.7.0)",
                sglang_path=PATH_PCIE_IPC),
    BackendInfo("symm_multimem", "ar", "torch symm-mem copy-in + multimem_all_reduce_ + copy-out",
                multicast=True, sglang_path=PATH_TORCH_SYMM_MEM),
    BackendInfo("nccl_norm", "ar_rmsnorm", "NCCL all_reduce, then fused add+RMSNorm (the unfused baseline)",
                sglang_path=PATH_NCCL),
    BackendInfo("symm_oneshot_norm", "ar_rmsnorm", "symm_oneshot, then fused add+RMSNorm",
                sglang_path=PATH_TORCH_SYMM_MEM),
    BackendInfo("symm_twoshot_norm", "ar_rmsnorm", "symm_twoshot, then fused add+RMSNorm",
                sglang_path=PATH_TORCH_SYMM_MEM),
    BackendInfo("fi_pcie_ipc_norm", "ar_rmsnorm", "fi_pcie_ipc, then fused add+RMSNorm (sglang 0.5.23's path)",
                sglang_path=PATH_PCIE_IPC),
    BackendInfo("fi_fused_oneshot", "ar_rmsnorm", "FlashInfer kARResidualRMSNorm, one-shot (sglang's)",
                sglang_path=PATH_FLASHINFER_FUSION),
    BackendInfo("fi_fused_twoshot", "ar_rmsnorm", "FlashInfer kARResidualRMSNorm, two-shot",
                sglang_path=PATH_FLASHINFER_FUSION),
)}

# Most conservative first: on a tie the earlier name wins (upstream's default path, then fewer moving parts).
PREFERENCE = (
    "nccl", "nccl_norm",
    "symm_twoshot", "symm_oneshot", "symm_twoshot_norm", "symm_oneshot_norm",
    "fi_fused_oneshot", "fi_fused_twoshot", "fi_ar_oneshot", "fi_ar_twoshot",
    "fi_pcie_ipc", "fi_pcie_ipc_norm", "symm_multimem",
)

NCCL_BACKENDS = ("nccl", "nccl_norm")  # what --nccl-profile re-measures under each profile


def default_backends(allow_multicast: bool) -> list[str]:
    return [n for n, b in CATALOG.items() if allow_multicast or not b.multicast]
