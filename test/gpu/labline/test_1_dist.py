"""P6 and P5 without a server: two processes, one per GPU (labline_dist_worker.py).

- P6: sglang's TP group, set up as a server with --disable-custom-all-reduce --enable-torch-symm-mem sets it up,
  gets an enabled TorchSymmMemCommunicator although multicast is off (TORCH_SYMM_MEM_DISABLE_MULTICAST=1);
  kernel_for(42 KB) is one-shot, kernel_for(1 MiB) two-shot; sglang's all-reduce dispatch sends bf16 tensors to
  it and the result equals NCCL's bit for bit at TP=2 (a + b rounded once, either way); rank 0 logs the
  patch's line.
- P5: FlashInfer's trtllm fusion workspace for 48 tokens (P5's size for the lab flags) vs 2048 (upstream), in
  device bytes, against FlashInfer's own buffer sizes.
"""

from __future__ import annotations

import pytest

from sglang_blackwell.qualify import gpu_suite_checks as checks

pytestmark = pytest.mark.gpu


def _results(dist_run: dict) -> list[dict]:
    out = []
    for r in dist_run["ranks"]:
        res = r.get("result")
        if not res or not res.get("ok"):
            err = (res or {}).get("error") or [p.get("error") for p in ((res or {}).get("phases") or {}).values()
                                               if p.get("error")]
            pytest.fail(f"rank {r['rank']} (rc {r['returncode']}, timed out: {dist_run['timed_out']}): {err}\n"
                        f"{(res or {}).get('traceback', '')}\nlog {r['log']}:\n{r['log_tail']}")
        out.append(res)
    return out


def _phase(dist_run: dict, name: str) -> list[dict]:
    return [res["phases"][name] for res in _results(dist_run)]


def test_both_ranks_finished_and_left_nothing(dist_run):
    assert not dist_run["timed_out"], f"ranks still running after {dist_run['timeout_s']} s"
    _results(dist_run)
    for r in dist_run["ranks"]:
        assert r["returncode"] == 0, r
        td = r["teardown"] or {}
        assert td.get("group_gone"), f"rank {r['rank']}: session not gone: {td}"
        assert (td.get("gpu") or {}).get("ours_left") == [], f"rank {r['rank']}: GPU process left: {td}"


def test_symm_mem_selected_without_multicast(dist_run):
    for rank, p in enumerate(_phase(dist_run, "symm_mem")):
        assert p["setup_path"] == "sglang", f"rank {rank}: {p['setup_error']} (kernels checked on a plain group)"
        assert p["communicator"], p.get("why")
        assert p["disabled"] is False, f"rank {rank}: TorchSymmMemCommunicator disabled ({p.get('why')})"
        assert p["use_multimem"] is False, f"rank {rank}: multimem selected with multicast off: {p}"
        assert p["has_kernel_for"], f"rank {rank}: no kernel_for(): the P6 patch is not in the installed sglang"
        assert p["kernel_for"] == {"43008": "one_shot", "1048576": "two_shot"}, p["kernel_for"]
        assert p["all_dispatched"], [(s["shape"], s["dispatched_to_symm_mem"]) for s in p["sizes"]]


def test_symm_mem_all_reduce_equals_nccl_bit_for_bit(dist_run):
    for rank, p in enumerate(_phase(dist_run, "symm_mem")):
        kernels = {s["kernel"] for s in p["sizes"]}
        assert {"one_shot", "two_shot"} <= kernels, f"sizes did not cover both kernels: {kernels}"
        for s in p["sizes"]:
            assert s["nonzero"], s
            assert s["equal_dispatch"] and s["equal_direct"], \
                f"rank {rank} shape {s['shape']} ({s['kernel']}): differs from NCCL, max |diff| {s['max_abs_diff']}"
        assert p["bit_identical"]


def test_symm_mem_logs_the_no_multicast_choice(dist_run):
    res = _results(dist_run)
    p0 = res[0]["phases"]["symm_mem"]
    msgs0 = [r["message"] for r in res[0].get("symm_mem_log", [])]
    found = [m for msg in msgs0 if (m := checks.SYMM_MEM_LINE.search(msg))]
    assert found, f"rank 0 never logged the patch's line; torch_symm_mem logged: {msgs0}"
    m = found[0]
    assert int(m["oneshot"]) == p0["oneshot_max_size"] == 256 * 1024
    assert int(m["max"]) == p0["max_size"] and int(m["world"]) == 2
    for rank, r in enumerate(res):
        bad = [x["message"] for x in r.get("symm_mem_log", []) if "not available" in x["message"]
               or "not supported" in x["message"]]
        assert not bad, f"rank {rank}: {bad}"


def _workspace(dist_run: dict, lab) -> list[tuple[dict[int, int], dict]]:
    out = []
    for p in _phase(dist_run, "workspace"):
        measured = {int(k): v for k, v in p["measured_bytes"].items()}
        assert sorted(measured) == [48, 2048], p
        for n in measured:
            meta = p["metadata"][str(n)]
            assert meta["max_token_num"] == n and meta["hidden_dim"] == lab.target["hidden_size"], meta
        out.append((measured, p))
    return out


def test_workspace_bytes_match_flashinfer_sizes(dist_run, lab):
    hidden = lab.target["hidden_size"]
    for rank, (measured, _) in enumerate(_workspace(dist_run, lab)):
        r = checks.check_workspace_bytes(measured, 2, hidden)
        assert r["ok"], f"rank {rank}: {r['why']} ({r['workspaces']})"


def test_workspace_lives_outside_torchs_allocator(dist_run, lab):
    """Symmetric memory is not in torch's caching allocator, so --mem-fraction-static does not cover it."""
    for rank, (_, p) in enumerate(_workspace(dist_run, lab)):
        assert all(v < 1 << 20 for v in p["torch_allocated_delta"].values()), \
            f"rank {rank}: torch.cuda.memory_allocated grew by {p['torch_allocated_delta']}"


def test_p5_workspace_is_a_fraction_of_upstream(dist_run, lab):
    hidden = lab.target["hidden_size"]
    saved_logical = checks.workspace_logical_bytes(2, 2048, hidden) - checks.workspace_logical_bytes(2, 48, hidden)
    for rank, (measured, _) in enumerate(_workspace(dist_run, lab)):
        assert measured[48] * 10 <= measured[2048], f"rank {rank}: {measured}"
        assert measured[2048] - measured[48] >= 0.9 * saved_logical, \
            f"rank {rank}: saves {measured[2048] - measured[48]} B, FlashInfer's sizes say {saved_logical} B"
