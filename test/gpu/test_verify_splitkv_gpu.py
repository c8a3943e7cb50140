"""P8 on a real GPU: the split-KV target-verify kernel of the installed sglang (the lab line, 0.5.14 with our
series) against its own extend_attention_fwd and an fp64 reference, at the 61-layer lab pair's (and Kimi-K2.x
TP8's) attention shape: 8 query heads, one 512 + 64 latent KV head, 3 draft tokens, bf16 and fp8 KV, prefixes
up to 32k tokens; and captured in a CUDA graph, replayed at other prefix lengths than it was captured with.

The bounds are support/scenarios_verify.error_bound's (derived from where the kernels round); each case's largest
error over its bound goes to $SGLB_GPU_RECORD when set. Run on the lab:
PYTHONPATH=/tmp/site:python:test python3 -m pytest -m gpu test/gpu/test_verify_splitkv_gpu.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
TEST_ROOT = Path(__file__).resolve().parents[1]
if str(TEST_ROOT) not in sys.path:
    sys.path.insert(0, str(TEST_ROOT))

from support.gpu_record import record  # noqa: E402
from support.scenarios_verify import _args, error_bound, make_inputs, reference  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def _kernels():
    verify = pytest.importorskip("sglang.srt.layers.attention.triton_ops.verify_shared_kv",
                                 reason="no split-KV verify kernel in this sglang (P8)")
    from sglang.srt.layers.attention.triton_ops.extend_attention import extend_attention_fwd

    return verify, extend_attention_fwd


def _cuda(x: dict) -> dict:
    """x on the GPU, the values again views of the keys (MLA's latent pool; the fresh V of the draft tokens)."""
    g = {k: (v.cuda() if hasattr(v, "cuda") else v) for k, v in x.items()}
    g["v_ext"], g["v_buf"] = g["k_ext"][..., :512], g["k_buf"][..., :512]
    return g


CASES = [
    {"bs": 1, "h": 8, "draft": 3, "prefix": [256], "kv": "bf16"},
    {"bs": 2, "h": 8, "draft": 3, "prefix": [2048, 8192], "kv": "bf16"},
    {"bs": 1, "h": 8, "draft": 3, "prefix": [32768], "kv": "bf16"},
    {"bs": 4, "h": 16, "draft": 3, "prefix": [1, 300, 4097, 12000], "kv": "bf16"},
    {"bs": 2, "h": 8, "draft": 3, "prefix": [2048, 32768], "kv": "fp8", "k_scale": 0.5, "v_scale": 2.0},
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c['kv']}-h{c['h']}-{'-'.join(map(str, c['prefix']))}")
def test_equals_extend_attention(case):
    verify, extend = _kernels()
    x = make_inputs(case)
    ref, bounds = reference(x)
    bound = error_bound(bounds, ref, partials_bf16=False)
    g = _cuda(x)
    mine = torch.zeros(ref.shape, dtype=torch.bfloat16, device="cuda")
    ext = torch.zeros_like(mine)
    assert verify.verify_shared_kv_fwd(*_args(g, mine), max_bs=case["bs"])
    extend(*_args(g, ext))
    torch.cuda.synchronize()
    mine, ext = mine.double().cpu(), ext.double().cpu()
    r = {"mine_vs_ref": float(((mine - ref).abs() / bound).max()),
         "extend_vs_ref": float(((ext - ref).abs() / bound).max()),
         "mine_vs_extend": float(((mine - ext).abs() / (2 * bound)).max()),
         "max_abs_vs_ref": float((mine - ref).abs().max())}
    record("verify_equals_extend_attention", case=case, **r)  # the errors against the bound, not only "passed"
    assert r["mine_vs_ref"] <= 1
    assert r["extend_vs_ref"] <= 1  # the bound holds for the reference kernel too
    assert r["mine_vs_extend"] <= 1


def test_cuda_graph_replay_at_other_prefix_lengths():
    """Captured once (as the target-verify graph is), replayed with the kv_indptr / kv_indices of other
    contexts: the split count follows each replay's prefixes."""
    verify, _ = _kernels()
    captured = {"bs": 2, "h": 8, "draft": 3, "prefix": [6000, 6000], "kv": "bf16"}
    x = _cuda(make_inputs(captured))
    out = torch.zeros(6, 8, 512, dtype=torch.bfloat16, device="cuda")

    def step():  # as the model does it: k and v (a view of k) made contiguous inside the captured forward
        verify.verify_shared_kv_fwd(*_args(x, out), max_bs=2)

    step()  # eager first: the scratch is allocated outside capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for prefix in ([17, 9000], [4096, 1], [9999, 64]):
        y = make_inputs({**captured, "prefix": prefix}, seed=sum(prefix))
        x["kv_indptr"].copy_(y["kv_indptr"].cuda())
        x["kv_indices"][: y["kv_indices"].numel()].copy_(y["kv_indices"].cuda())
        x["q"].copy_(y["q"].cuda())
        x["k_ext"].copy_(y["k_ext"].cuda())
        x["k_buf"][: y["k_buf"].shape[0]].copy_(y["k_buf"].cuda())  # the pool of the captured case is larger
        graph.replay()
        torch.cuda.synchronize()
        ref, bounds = reference(y)
        got = out.double().cpu()
        assert float(((got - ref).abs() / error_bound(bounds, ref, partials_bf16=False)).max()) <= 1, prefix
