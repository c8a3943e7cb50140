"""gpu_suite_checks: the lab-line GPU suite's judgements over measured data, each shown passing and failing.

Inputs are what the suite records from a real server (sglang 0.5.14 /generate meta_info with
--skip-tokenizer-init, the server log's workspace line): written out here by hand, no GPU involved.
"""

from __future__ import annotations

import pytest

from sglang_blackwell.qualify import gpu_suite_checks as c

LOG = """\
[2026-11-30 10:00:01 TP0] Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16
[2026-11-30 10:00:05 TP0] FlashInfer AllReduce Fusion enabled and workspace initialized: backend=trtllm, rank=0, \
world_size=2, max_token_num=48, hidden_dim=7168
[2026-11-30 10:00:05 TP1] FlashInfer AllReduce Fusion enabled and workspace initialized: backend=trtllm, rank=1, \
world_size=2, max_token_num=48, hidden_dim=7168
[2026-11-30 10:00:05 TP0] FlashInfer AllReduce Fusion enabled and workspace initialized: backend=trtllm, rank=0, \
world_size=2, max_token_num=48, hidden_dim=7168
[2026-11-30 10:00:05 TP1] FlashInfer AllReduce Fusion enabled and workspace initialized: backend=trtllm, rank=1, \
world_size=2, max_token_num=48, hidden_dim=7168
"""


def test_prompts_are_seeded_and_inside_the_closed_set():
    a, b = c.lab_prompts(), c.lab_prompts()
    assert a == b and len(a) == 8
    assert all(c.TOKEN_RANGE[0] <= t < c.TOKEN_RANGE[1] for p in a for t in p)
    assert any(len(p) <= 48 for p in a) and all(8 <= len(p) <= 40 for p in a)
    assert c.lab_prompts(seed=1) != a


def test_greedy_equal_and_first_difference():
    a = [[101, 102, 103], [200, 201]]
    assert c.compare_greedy(a, [list(x) for x in a])["equal"]
    r = c.compare_greedy(a, [[101, 102, 103], [200, 999]])
    assert not r["equal"] and r["first_diff"] == {"prompt": 1, "position": 1, "a": 201, "b": 999}
    r = c.compare_greedy(a, [[101, 102], [200, 201]])
    assert not r["equal"] and r["first_diff"]["position"] == 2 and r["first_diff"]["b"] is None
    assert not c.compare_greedy(a, a[:1])["equal"]
    assert not c.compare_greedy([[]], [[]])["equal"]  # nothing compared is not "equal"


def test_bigram_consistency():
    prompts = [[500, 700], [900, 700]]
    ok = c.bigram_consistency(prompts, [[701, 702], [701, 702]])
    assert ok["consistent"] and ok["pairs"] == 4
    bad = c.bigram_consistency(prompts, [[701, 702], [703, 702]])
    assert not bad["consistent"] and "700 is followed by 703" in bad["why"]
    out = c.bigram_consistency(prompts, [[701, 50], [701, 50]])
    assert not out["consistent"] and "outside [100, 2148)" in out["why"]


def test_accept_length_from_meta_info():
    metas = [{"completion_tokens": 64, "spec_verify_ct": 21}, {"completion_tokens": 64, "spec_verify_ct": 22}]
    assert c.accept_length(metas)["accept_len"] == round(128 / 43, 4)
    assert c.accept_length([{"completion_tokens": 64}])["accept_len"] is None  # not a speculative server
    assert c.accept_length([{"completion_tokens": 64, "spec_verify_ct": 0}])["accept_len"] is None
    assert c.accept_length([])["accept_len"] is None


@pytest.mark.parametrize(("on", "off", "ok", "why"), [
    (3.05, 3.05, True, "3.05 vs 3.05"),
    (3.05, 3.02, True, ""),
    (3.05, 1.0, False, "below 1.5"),  # the P3 failure: capture before the deferred all-reduce
    (1.2, 1.2, False, "below 1.5"),  # equal, but too low to mean anything
    (3.05, 2.9, False, "|diff| > 0.05"),
    (None, 3.0, False, "missing"),
])
def test_compare_accept(on, off, ok, why):
    r = c.compare_accept(on, off)
    assert r["ok"] is ok and why in r["why"]


def meta(tokens: list[tuple[float, int]], top: list[list[tuple[float, int]]]) -> dict:
    """meta_info as sglang 0.5.14 answers with --skip-tokenizer-init: (logprob, id, text=None) triples."""
    return {"output_token_logprobs": [[lp, t, None] for lp, t in tokens],
            "output_top_logprobs": [[[lp, t, None] for lp, t in pos] for pos in top]}


def test_logprobs_from_meta_drops_text():
    m = meta([(-1e-9, 701), (-2e-9, 702)], [[(-1e-9, 701), (-20.5, 333)], [(-2e-9, 702), (-19.0, 444)]])
    lp = c.logprobs_from_meta(m)
    assert lp["token"] == [[-1e-9, 701], [-2e-9, 702]]
    assert lp["top"][1] == [[-2e-9, 702], [-19.0, 444]]
    assert c.logprobs_from_meta({"output_top_logprobs": [None]})["top"] == [None]


def rows(shift: float = 0.0, swap: bool = False, token: int = 701) -> list[dict]:
    top = [[-1e-9, token], [-20.0 + shift, 300], [-20.4, 301], [-21.0, 302], [-21.2, 303]]
    if swap:
        top = top[:3] + [[-21.0, 399], [-21.1, 398]]
    return [{"token": [[-1e-9, token]], "top": [top]}]


def test_logprobs_within_the_bf16_tolerance():
    r = c.compare_logprobs(rows(), rows(shift=0.6))  # 0.6 <= 0.5 + 20 * 2^-6
    assert r["ok"], r
    assert r["worst_abs_diff"] == pytest.approx(0.6)
    assert c.compare_logprobs(rows(), rows(swap=True))["ok"]  # the 4th/5th runner-ups may change


def test_logprobs_beyond_tolerance_fail():
    r = c.compare_logprobs(rows(), rows(shift=1.0))
    assert not r["ok"] and "id 300" in r["why"]
    assert "token 701 vs 702" in c.compare_logprobs(rows(), rows(token=702))["why"]
    low = rows()
    low[0]["top"][0] = [[-1e-9, 701], [-20.0, 900], [-20.4, 901], [-21.0, 902], [-21.2, 903]]
    assert "share 1 ids" in c.compare_logprobs(rows(), low)["why"]
    assert not c.compare_logprobs(rows(), [])["ok"]


def test_fused_kernels_per_forward():
    assert c.fused_kernels_per_forward(10) == 19  # the lab target: 10 layers
    assert c.fused_kernels_per_forward(61) == 121  # DeepSeek-V3 / Kimi-K2.5


def test_workspace_lines_parsed_and_checked():
    lines = c.workspace_lines(LOG)
    assert len(lines) == 4 and lines[0] == {"backend": "trtllm", "rank": 0, "world_size": 2, "max_token_num": 48,
                                            "hidden_dim": 7168}
    assert c.check_workspace_lines(lines, max_token_num=48, hidden=7168, world_size=2)["ok"]
    upstream = c.workspace_lines(LOG.replace("max_token_num=48", "max_token_num=2048"))
    r = c.check_workspace_lines(upstream, max_token_num=48, hidden=7168, world_size=2)
    assert not r["ok"] and "max_token_num=2048" in r["why"]
    one_rank = [ln for ln in lines if ln["rank"] == 0]
    assert "ranks [0]" in c.check_workspace_lines(one_rank, max_token_num=48, hidden=7168, world_size=2)["why"]
    assert "no 'workspace initialized' line" in c.check_workspace_lines([], max_token_num=48, hidden=7168,
                                                                        world_size=2)["why"]


def test_workspace_logical_bytes_follow_flashinfer():
    # tp=2, 2048 tokens, hidden 7168, bf16: 56 MiB data + 2 KiB flags + 3 x 56 MiB Lamport buffers
    assert c.workspace_logical_bytes(2, 2048, 7168) == 58720256 + 2048 + 3 * 58720256
    assert c.workspace_logical_bytes(2, 48, 7168) == 1376256 + 2048 + 3 * 1376256
    # TP8 on the target box: ~0.94 GB per workspace, the figure P5's description quotes
    assert 0.93e9 < c.workspace_logical_bytes(8, 2048, 7168) < 0.95e9
    # the Lamport part is capped at MAX_COMM_SIZE (2 GiB - 2 MiB) per third, the data buffer is not
    assert c.workspace_logical_bytes(8, 100000, 7168) == 8 * 100000 * 7168 * 2 + 8192 + 3 * (2**31 - 2**21)


def test_check_workspace_bytes():
    l48, l2048 = c.workspace_logical_bytes(2, 48, 7168), c.workspace_logical_bytes(2, 2048, 7168)
    ok = c.check_workspace_bytes({48: 12 << 20, 2048: l2048 + (6 << 20)}, 2, 7168)
    assert ok["ok"], ok
    assert not c.check_workspace_bytes({48: l48 - 1, 2048: l2048}, 2, 7168)["ok"]  # less than FlashInfer asks
    assert not c.check_workspace_bytes({48: l48, 2048: l2048 + (64 << 20)}, 2, 7168)["ok"]


def test_symm_mem_line_matches_the_patch_message():
    # the P7 patch's format string with its arguments filled in, as rank 0 logs it (the lab's line, 2026-11-30)
    fmt = ("TorchSymmMemCommunicator: %s; one-shot all-reduce up to %d bytes, "
           "two-shot below %d bytes (world size %d); NCCL above.")
    msg = fmt % ("no multicast", 262144, 67108864, 2)  # noqa: UP031
    m = c.SYMM_MEM_LINE.search(msg)
    assert m and (m["oneshot"], m["max"], m["world"]) == ("262144", "67108864", "2")


def test_lab_tp_from_the_environment():
    assert c.lab_tp({}) == 2 and c.lab_tp({"SGLB_TP": "8"}) == 8
    for bad in ("1", "x", "", "-4"):
        with pytest.raises(ValueError, match="SGLB_TP"):
            c.lab_tp({"SGLB_TP": bad})
