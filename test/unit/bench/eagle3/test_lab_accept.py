"""test/gpu/lab_accept.py, the GPU suites' accept-length check (issue 24 item 9), on CPU against what the GPU lab
recorded: the construction's expectation for the lab-line suite's own requests is what its committed receipt
measured, request by request; a draft that always fails at position 2 fails the check (the old floor of 1.5 let it
pass); the user-path receipt's 3.0 passes; the draft that misses by design has its own expectation."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[4]
RESULTS = REPO / "benchmark" / "results"
OLD_FLOOR = 1.5  # what test/gpu asserted before (gpu_suite_checks.MIN_ACCEPT_LEN)


def _lab_accept():
    if "lab_accept" not in sys.modules:
        spec = importlib.util.spec_from_file_location("lab_accept", REPO / "test" / "gpu" / "lab_accept.py")
        sys.modules["lab_accept"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules["lab_accept"])
    return sys.modules["lab_accept"]


L = _lab_accept()


def pair(tmp: Path, preset: str, seed: int = 0) -> Path:
    """A target directory as far as the expectation reads it: gen_lab_pair.py's lab_pair.json."""
    (tmp / preset).mkdir(exist_ok=True)
    (tmp / preset / "lab_pair.json").write_text(json.dumps({"preset": preset, "seed": seed}))
    return tmp / preset


def labline_arm(name: str) -> dict:
    """Arm A or B of the committed lab-line receipt (the 10-layer pair, gen_lab_pair.py's defaults: preset lab,
    seed 0, the exact draft)."""
    return json.loads((RESULTS / "lab-line-gpu-suite-2026-11-30.json").read_text())["facts"]["arms"][name]


def test_labline_expectation_is_what_the_lab_measured(tmp_path: Path) -> None:
    a = labline_arm("A")
    requests = [(p[-1], a["greedy"]["new_tokens"]) for p in a["prompts"]]
    got = L.expectation(pair(tmp_path, "lab"), "constructed", requests, a["server"]["speculative_num_steps"])
    assert got["verify_rounds"] == sum(a["accept"]["verify_ct"]) == 8 * 21  # every request: 21 verify rounds
    assert got["meta"]["expect"] == a["accept"]["accept_len"] == round(64 / 21, 4)
    assert got["meta"]["tolerance"] == round(2 * (64 / 21) / 167, 4)  # twice one verify round of 168
    for arm in ("A", "B"):  # fusion on and off
        assert L.check(got, "meta", labline_arm(arm)["accept"]["accept_len"])["passed"]
    # a draft that always fails at position 2: one draft and the bonus token per round, 2.0 either way
    broken = round(sum(n for _, n in requests) / sum(-(-(n - 1) // 2) for _, n in requests), 4)
    assert broken == 2.0 >= OLD_FLOOR
    r = L.check(got, "meta", broken)
    assert not r["passed"] and r["why"].startswith("accept length 2.0000 outside 3.0476 +- 0.0365 (the constructed")
    assert "SGLB_LAB_DRAFT_KIND" in r["why"]
    assert L.check(got, "meta", None)["why"] == "no accept length measured"


def test_userpath_exact_draft_gives_3_in_the_servers_form(tmp_path: Path) -> None:
    recorded = json.loads((RESULTS / "lab-userpath-2026-12-01.json").read_text())
    assert recorded["facts"]["ground_truth"] == {"preset": "lab", "seed": 0}
    got = L.expectation(pair(tmp_path, "lab"), "constructed", [(1234, 64), (567, 64), (2000, 64), (333, 64)], 2)
    assert got["server"]["expect"] == 3.0 and got["verify_rounds"] == 4 * 21
    assert L.check(got, "server", recorded["summary"]["accept_len"])["passed"]
    assert not L.check(got, "server", 2.0)["passed"]


def test_the_draft_that_misses_has_its_own_expectation(tmp_path: Path) -> None:
    """The target-shaped pair with the draft that misses by design (SGLB_LAB_DRAFT_KIND=miss): the same requests
    accept ~2.04, and neither its exact-draft reading nor a position-2 failure (1.65) passes."""
    a = labline_arm("A")
    requests = [(p[-1], 64) for p in a["prompts"]]
    got = L.expectation(pair(tmp_path, "kimi61"), "miss", requests, 2)
    assert abs(got["server"]["expect"] - 2.04) < 0.03 and got["server"]["tolerance"] < 0.1
    assert 0 < got["meta"]["tolerance"] < 0.03
    assert L.check(got, "meta", got["meta"]["expect"])["passed"]
    assert not L.check(got, "meta", 3.0476)["passed"] and not L.check(got, "server", 1.65)["passed"]


def test_the_draft_kind_is_checked() -> None:
    assert L.draft_kind({}) == "constructed" and L.draft_kind({"SGLB_LAB_DRAFT_KIND": "miss"}) == "miss"
    with pytest.raises(ValueError, match=r"SGLB_LAB_DRAFT_KIND='random': expected one of constructed, miss"):
        L.draft_kind({"SGLB_LAB_DRAFT_KIND": "random"})
