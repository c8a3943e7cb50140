"""P6 (sglang): torch symm-mem all-reduce on SM12x and without multicast (CPU ranks, TP=2)."""

from __future__ import annotations

import pytest

from .conftest import carrying

SMALL, LARGE, HUGE = 43008, 1048576, 16 << 20  # 3 tokens x 7168 x bf16 (EAGLE-3 verify), 1 MiB, 16 MiB
CASES = {
    "sm120_pcie_atomics": dict(capability=(12, 0), p2p_atomics=True),
    "sm120_pcie_no_atomics": dict(capability=(12, 0), p2p_atomics=False),
    "unknown_capability": dict(capability=(13, 0), p2p_atomics=True),
    "hopper_nvlink_no_multicast": dict(capability=(9, 0), p2p_atomics=True),  # the GPU lab
    "hopper_multicast": dict(capability=(9, 0), multicast=True, p2p_atomics=False),
}
PROBE = ("import json\nfrom support.tp import run_tp\n"
         f"cases = {list(CASES.values())!r}\n"
         "res = run_tp(2, 'support.scenarios_symm_mem:communicator_cases', {'cases': cases}, sglang_init=False)\n"
         f"print(json.dumps(dict(zip({list(CASES)!r}, res[0]))))")


def _one_then_two_shot(r: dict) -> list[str]:
    if not r["constructed"]:
        return [f"constructor raised {r['error']}"]
    if r["disabled"]:
        return ["communicator disabled although every GPU pair has native P2P atomics"]
    p = []
    if r["kernels"][str(SMALL)] != ["one_shot_all_reduce_copy_out"]:
        p.append(f"42 KB message used {r['kernels'][str(SMALL)]}, expected the one-shot kernel")
    if r["kernels"][str(LARGE)] != ["two_shot_all_reduce_"]:
        p.append(f"1 MiB message used {r['kernels'][str(LARGE)]}, expected the two-shot kernel")
    return p + [f"{n} bytes: result off by {e}" for n, e in r["max_abs_err"].items() if e != 0.0]


def _sm12x_capped(r: dict) -> list[str]:
    """On SM12x (PCIe) symm-mem serves latency-bound sizes only: 16 MiB stays on NCCL (the capability-12 cap
    is 8 MiB; sglang 0.5.23's default Inkling buffer enlargement to 256-512 MiB must not lift it)."""
    p = _one_then_two_shot(r)
    if not p and r["kernels"][str(HUGE)] != "nccl":
        p.append(f"16 MiB message used {r['kernels'][str(HUGE)]}, expected NCCL above the SM12x cap")
    return p


def _stays_on_nccl(r: dict) -> list[str]:
    if not r["constructed"]:
        return [f"constructor raised {r['error']} (crashes server start)"]
    if not r["disabled"] or set(r["kernels"].values()) != {"nccl"}:
        return ["symm-mem used where it must not be"]
    return []


CHECKS = {
    "sm120_pcie_atomics": _sm12x_capped,
    "sm120_pcie_no_atomics": _stays_on_nccl,
    "unknown_capability": _stays_on_nccl,
    "hopper_nvlink_no_multicast": _one_then_two_shot,
}


def _problems(r: dict) -> list[str]:
    return [f"{case}: {p}" for case, check in CHECKS.items() for p in check(r[case])]


@pytest.fixture(scope="module", params=carrying("P6"))
def outcome(request, patch_trees):
    return patch_trees.assert_needs_patch(request.param, "P6", PROBE, _problems)


@pytest.mark.parametrize("case", list(CHECKS))
def test_case_needs_patch(outcome, case):
    """Each case passes with the patch; the patch set as a whole fails without it (assert_needs_patch).
    Without the patch: KeyError on SM12x and 13, symm-mem disabled on Hopper without multicast."""
    assert CHECKS[case](outcome["with"][case]) == []


def test_without_patch_sm120_gets_no_symm_mem(outcome):
    """Upstream: 0.5.9 crashes server start (KeyError: 12); 0.5.14 disables the communicator."""
    r = outcome["without"]["sm120_pcie_atomics"]
    assert r.get("error", "").startswith("KeyError: 12") or (r["constructed"] and r["disabled"]), r


def test_multicast_hopper_unchanged(outcome):
    """Multicast present: world size 2 is not a multimem size on SM90 (4, 6, 8), so two-shot over the
    multicast buffer, exactly as upstream."""
    for side in ("with", "without"):
        r = outcome[side]["hopper_multicast"]
        assert r["constructed"] and not r["disabled"], r
        assert r["kernels"][str(LARGE)] == ["two_shot_all_reduce_"], r
