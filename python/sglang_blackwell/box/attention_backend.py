"""Which attention backend `serve` runs an EAGLE-3 server with on SM12x, and which kernel its target-verify runs
(for `doctor`).

Every speculative receipt of this project was measured with `--attention-backend triton`: P8 (split-KV
target-verify) and P11 (split-KV draft extend) are kernels of sglang's Triton backend. Under FlashInfer they do
not run, and FlashInfer's own MLA path on SM12x is not what the receipts measured: `--attention-backend flashinfer`
runs FlashInfer's generic fa2 MLA kernel there (its "auto" picks fa3 only on SM90), never measured on an SM12x GPU
(the lab is SM90, where the same flag runs fa3); `trtllm_mla` is the backend whose trtllm-gen kernels reject the
arch (flashinfer#3263, sglang#24633). docs/attention-backends.md has the paths with their citations.
sglang's own default on SM12x is Triton for MLA models (DeepSeek-V3, Kimi-K2.x: `_get_default_attn_backend`,
0.5.9 / 0.5.14 / 0.5.23) and FlashInfer for the others; a README or config that passes `--attention-backend
flashinfer` switches P8 off. So on a box whose GPUs are all SM12x, `serve` adds `--attention-backend triton` to a
speculative launch in which the user chose no backend (any of the three per-phase flags, abbreviated or in the
--config file, is a choice; a user's flag always wins). Without speculation it leaves sglang's default alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from .sglang_argv import SglangArgv
from .topology import Topology

MEASURED_BACKEND = "triton"
FLAG = "--attention-backend"
SM12X_MAJOR = 12
VERIFY_KERNEL = "P8's grouped split-KV kernel (triton_ops/verify_shared_kv.py)"
UPSTREAM_VERIFY_KERNEL = "upstream's extend_attention_fwd (one program per sequence and head walks the prefix)"


@dataclass(frozen=True)
class BackendChoice:
    flags: list[str]  # what serve adds (empty: nothing)
    why: str


def all_sm12x(topology: Topology) -> bool:
    return topology.majors() == {SM12X_MAJOR}


def choose(parsed: SglangArgv, topology: Topology) -> BackendChoice:
    """The attention backend flags serve adds for these arguments on this box, and why (one line)."""
    if parsed.attention_settings:
        return BackendChoice([], f"attention backend: yours ({', '.join(parsed.attention_settings)}); "
                             f"the receipts measured {FLAG} {MEASURED_BACKEND} (P8 and P11 run only there)")
    if not all_sm12x(topology):
        caps = ", ".join(topology.capabilities()) or "no GPU"
        return BackendChoice([], f"attention backend: sglang's default (capability {caps}: not an all-SM12x box)")
    if parsed.speculative is None:
        return BackendChoice([], "attention backend: sglang's default (no --speculative-algorithm: target-verify "
                             "and draft extend do not run; Triton for MLA models on SM12x, FlashInfer otherwise)")
    return BackendChoice([FLAG, MEASURED_BACKEND],
                         f"{FLAG} {MEASURED_BACKEND}: speculation ({parsed.speculative}) on SM12x; target-verify "
                         f"runs {VERIFY_KERNEL} and draft extend P11's in the Triton backend only, the one every "
                         "receipt measured; FlashInfer's MLA path (its fa2 kernel on SM12x) is not measured on SM12x "
                         "(docs/attention-backends.md). Pass your own --attention-backend to choose another")
