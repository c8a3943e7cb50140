"""benchmark/lab/verify_kernel_bench.py's decode sweep (`--decode`) on CPU: the bench itself, run in a probe against
the 0.5.14 tree `sglang-blackwell build` ships (what the lab installs), under Triton's interpreter, at a tiny
context (the lab runs it at 32k-128k on an H200). It times sglang's Triton decode attention (`decode_attention_fwd`)
per cap on the KV splits; what the receipt's `decode` rows must show:

- one row per (shape, context, batch, cap), the GQA draft's shape (32 / 8 heads of 128, separate K and V) and the
  MLA draft's (8 heads, one 576-wide latent, the values its first 512 columns);
- the splits chosen as TritonAttnBackend.get_num_kv_splits chooses them (get_num_kv_splits_triton, num_group 1, the
  device's SM count: an H200's 132 without a GPU, or --sm-count): at most the cap, more with a larger cap at a
  context that has room for them, fewer than the cap where the SMs run out (16 SMs);
- every output equal to fp64 softmax attention within the bound the bench derives from where the kernel rounds
  (bf16 probabilities and output, fp32 scores and sums), a bound that a kernel skipping the last quarter of the
  keys would break.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from sglang_blackwell import receipts
from support.probe import run_probe
from support.scenarios_draft_extend import SHAPES

ROOT = Path(__file__).resolve().parents[3]
BENCH = ROOT / "benchmark" / "lab" / "verify_kernel_bench.py"
BASE = "0.5.14"
CONTEXT = 256  # tokens a request: "long" for the split rule at 132 SMs (it gives every cap here its splits)
CAPS = [2, 8]
BATCH = [1, 2]

PROBE = """
import importlib.util, json
from support.triton_interp import fix_bf16_dot
fix_bf16_dot()
spec = importlib.util.spec_from_file_location("verify_kernel_bench", {bench!r})
vkb = importlib.util.module_from_spec(spec)
spec.loader.exec_module(vkb)
common = ["--shapes", "--calls", "1", "--reps", "1", "--warmup", "0", "--decode-contexts", "{context}"]
vkb.main(["--out", {out!r} + "/sweep", *common, "--decode", "gqa", "mla", "--decode-batch", {batch},
          "--decode-splits", {caps}])
vkb.main(["--out", {out!r} + "/few-sms", *common, "--decode", "gqa", "--decode-batch", "1", "--decode-splits", "8",
          "--sm-count", "16"])
# what the bound must catch: attention over all but the last quarter of each request's keys
x, _ = vkb._decode_problem("mla", {context}, 2, 8)
ref, bound = vkb._decode_reference(x, 8)
defect, _ = vkb._decode_reference(x, 8, drop_tail=0.25)
print(json.dumps({{"defect_vs_ref": float(((defect - ref).abs() / bound).max())}}))
"""


def split_rule(ctx: int, bs: int, h_q: int, h_kv: int, cap: int, sms: int) -> int:
    """sglang 0.5.14's get_num_kv_splits_triton for `bs` requests of `ctx` tokens each at decode (num_group 1): the
    equal lengths make its first term 1; the second spreads the grid over the SMs, more with the context."""
    ext = int(sms * max(math.log2(ctx / 64), 1.0))
    group = h_q // h_kv
    token_grid = bs * (h_q if group == 1 else -(-h_q // min(16, group)))
    chunk = -(-ctx // min(-(-ext // token_grid), cap))
    return max(1, -(-ctx // chunk))


@pytest.fixture(scope="module")
def outcome(tree_factory, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("verify-kernel-bench")
    trees = [tree_factory.built_tree(BASE, pkg) for pkg in ("sglang", "flashinfer")]
    code = PROBE.format(bench=str(BENCH), out=str(out), context=CONTEXT,
                        batch=", ".join(f'"{b}"' for b in BATCH), caps=", ".join(f'"{c}"' for c in CAPS))
    probe = run_probe(trees, code, env={"TRITON_INTERPRET": "1"}, timeout=900)
    found = {}
    for run in ("sweep", "few-sms"):
        (path,) = (out / run).glob("verify-kernel-bench_*.json")
        found[run] = json.loads(path.read_text())
    return {**found, "probe": probe}


def test_the_receipt_holds_a_decode_row_per_shape_context_batch_and_cap(outcome):
    r = outcome["sweep"]
    assert receipts.validate_receipt(r) == [] and r["kind"] == "verify-kernel-bench"
    assert r["rows"] == [] and r["tiles"] == []  # a bare --shapes: no verify rows
    d = r["decode"]
    assert "decode_attention_fwd" in d["measured"] and d["kv"] == "bf16"
    assert (d["sm_count"], d["use_pdl"], r["method"]["device"]) == (132, False, "cpu")
    keys = [(row["shape"], row["context"], row["batch"], row["max_kv_splits"]) for row in d["rows"]]
    assert keys == [(s, CONTEXT, b, c) for s in ("gqa", "mla") for b in BATCH for c in CAPS]
    for row in d["rows"]:
        h_q, h_kv, d_k, dv = SHAPES[row["shape"]]
        assert row["grid"] == [row["batch"], -(-h_q // min(16, h_q // h_kv)), row["max_kv_splits"]]
        assert row["us"] > 0
        token_bytes = h_kv * (d_k + (0 if row["shape"] == "mla" else dv)) * 2
        assert row["GBps"] == pytest.approx(row["batch"] * CONTEXT * token_bytes / row["us"] / 1e3, abs=0.06)
    by = r["summary"]["decode_us_by_shape_context_bs1"]
    assert set(by) == {f"gqa:{CONTEXT}", f"mla:{CONTEXT}"} and all(set(v) == {str(c) for c in CAPS}
                                                                     for v in by.values())


def test_splits_are_the_backends_at_most_the_cap_and_grow_with_it(outcome):
    rows = outcome["sweep"]["decode"]["rows"]
    for row in rows:
        h_q, h_kv, _, _ = SHAPES[row["shape"]]
        want = split_rule(row["context"], row["batch"], h_q, h_kv, row["max_kv_splits"], 132)
        assert row["splits"] == [want] * row["batch"], row
        assert all(1 <= s <= row["max_kv_splits"] for s in row["splits"])
    for shape in ("gqa", "mla"):
        for bs in BATCH:
            by_cap = {r["max_kv_splits"]: r["splits"][0] for r in rows if (r["shape"], r["batch"]) == (shape, bs)}
            assert by_cap[CAPS[0]] < by_cap[CAPS[-1]], (shape, bs, by_cap)
    (few,) = outcome["few-sms"]["decode"]["rows"]  # 16 SMs: the rule stops short of the cap
    assert outcome["few-sms"]["decode"]["sm_count_from"] == "--sm-count"
    assert few["splits"] == [split_rule(CONTEXT, 1, 32, 8, 8, 16)] == [4]


def test_decode_output_equals_fp64_attention_within_the_bf16_bound(outcome):
    for run in ("sweep", "few-sms"):
        for row in outcome[run]["decode"]["rows"]:
            assert row["vs_ref"] <= 1, row  # NaN fails too
    # the bound is tight enough to see a kernel that dropped the last quarter of the keys
    assert outcome["probe"]["defect_vs_ref"] > 1
