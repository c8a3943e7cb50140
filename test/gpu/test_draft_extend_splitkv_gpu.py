"""P11 on a real GPU: the draft model's draft-extend through the split-KV kernel of the installed sglang (the lab
line, 0.5.14 with our series: verify_shared_kv.py) against its own extend_attention_fwd and an fp64 reference, at
the two lab drafts' attention shapes (GQA: 32 query / 8 KV heads of 128, separate K and V; MLA: 8 heads, one
512 + 64 latent), 3 tokens a request, prefixes up to 128k tokens and an empty one (a padded CUDA-graph row); and
captured in a CUDA graph, replayed at other prefix lengths. Each case's largest error over its bound is written to
$SGLB_GPU_RECORD (JSON lines) when set, so the receipt of the lab run holds the numbers, not only "passed".

The bounds are support/scenarios_draft_extend.error_bound's. Run on the lab:
PYTHONPATH=/tmp/site:python:test python3 -m pytest -m gpu test/gpu/test_draft_extend_splitkv_gpu.py
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
from support.scenarios_draft_extend import SHAPES, _args, error_bound, make_inputs, reference  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def _kernels():
    verify = pytest.importorskip("sglang.srt.layers.attention.triton_ops.verify_shared_kv",
                                 reason="no split-KV kernel in this sglang (P8)")
    from sglang.srt.layers.attention.triton_ops.extend_attention import extend_attention_fwd

    return verify, extend_attention_fwd


def _cuda(x: dict, mla: bool) -> dict:
    g = {k: (v.cuda() if hasattr(v, "cuda") else v) for k, v in x.items()}
    if mla:  # the values are views of the keys (MLA's latent pool)
        dv = x["v_ext"].shape[-1]
        g["v_ext"], g["v_buf"] = g["k_ext"][..., :dv], g["k_buf"][..., :dv]
    return g


CASES = [
    {"shape": "gqa", "bs": 3, "draft": 3, "prefix": [0, 2048, 8192], "kv": "bf16"},
    {"shape": "gqa", "bs": 1, "draft": 3, "prefix": [131072], "kv": "bf16"},
    {"shape": "mla", "bs": 3, "draft": 3, "prefix": [0, 2048, 8192], "kv": "bf16"},
    {"shape": "mla", "bs": 1, "draft": 3, "prefix": [131072], "kv": "bf16"},
    {"shape": "mla", "bs": 2, "draft": 3, "prefix": [32768, 65536], "kv": "bf16"},
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c['shape']}-{'-'.join(map(str, c['prefix']))}")
def test_equals_extend_attention(case):
    verify, extend = _kernels()
    x = make_inputs(case)
    ref, bounds = reference(x)
    bound = error_bound(bounds, ref, partials_bf16=False)
    g = _cuda(x, case["shape"] == "mla")
    h_q, _, _, dv = SHAPES[case["shape"]]
    mine = torch.zeros(ref.shape[0], h_q, dv, dtype=torch.bfloat16, device="cuda")
    ext = torch.zeros_like(mine)
    assert verify.verify_shared_kv_fwd(*_args(g, mine), max_bs=case["bs"])
    extend(*_args(g, ext))
    torch.cuda.synchronize()
    mine, ext = mine.double().cpu(), ext.double().cpu()
    r = {"mine_vs_ref": float(((mine - ref).abs() / bound).max()),
         "extend_vs_ref": float(((ext - ref).abs() / bound).max()),
         "mine_vs_extend": float(((mine - ext).abs() / (2 * bound)).max()),
         "max_abs_vs_ref": float((mine - ref).abs().max())}
    record("draft_extend_equals_extend_attention", case=case, **r)
    assert torch.isfinite(mine).all()
    assert r["mine_vs_ref"] <= 1 and r["extend_vs_ref"] <= 1 and r["mine_vs_extend"] <= 1, r


@pytest.mark.parametrize("shape", ["gqa", "mla"])
def test_cuda_graph_replay_at_other_prefix_lengths(shape):
    """Captured once (as the draft-extend graph is), replayed with other prefixes, a padded row (prefix 0)
    among them: the split count follows each replay's prefixes."""
    verify, _ = _kernels()
    mla = shape == "mla"
    captured = {"shape": shape, "bs": 2, "draft": 3, "prefix": [6000, 6000], "kv": "bf16"}
    x = _cuda(make_inputs(captured), mla)
    h_q, _, _, dv = SHAPES[shape]
    out = torch.zeros(6, h_q, dv, dtype=torch.bfloat16, device="cuda")

    def step():
        verify.verify_shared_kv_fwd(*_args(x, out), max_bs=2)

    step()  # eager first: the scratch is allocated outside capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    worst = 0.0
    for prefix in ([17, 9000], [4096, 0], [11900, 64]):  # each at most the 12000 prefix rows captured
        y = make_inputs({**captured, "prefix": prefix}, seed=sum(prefix))
        x["kv_indptr"].copy_(y["kv_indptr"].cuda())
        x["kv_indices"][: y["kv_indices"].numel()].copy_(y["kv_indices"].cuda())
        x["q"].copy_(y["q"].cuda())
        x["k_ext"].copy_(y["k_ext"].cuda())
        x["k_buf"][: y["k_buf"].shape[0]].copy_(y["k_buf"].cuda())
        if not mla:
            x["v_ext"].copy_(y["v_ext"].cuda())
            x["v_buf"][: y["v_buf"].shape[0]].copy_(y["v_buf"].cuda())
        graph.replay()
        torch.cuda.synchronize()
        ref, bounds = reference(y)
        ratio = float(((out.double().cpu() - ref).abs() / error_bound(bounds, ref, partials_bf16=False)).max())
        worst = max(worst, ratio)
        assert ratio <= 1, prefix
    record("draft_extend_cuda_graph_replay", shape=shape, worst_vs_ref=worst)
