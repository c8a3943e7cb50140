"""The receipt of one lab-line GPU suite run (kind `lab-gpu-suite`), from pytest's JUnit XML and the facts file
the suite writes (test/gpu/labline, $SGLB_OUT/facts.json).

    python3 -m sglang_blackwell.qualify.gpu_suite_receipt --junit J.xml --facts facts.json --out DIR [--pytest-rc N]

writes DIR/lab-line-gpu-suite-<UTC date>.json and prints its summary. The summary is recomputed from the raw
facts with the suite's own checks (gpu_suite_checks), so it does not depend on which tests got to run:
  machine, tp, fusion_in_verify (bool), greedy_equal (bool), accept_len_fusion_on, accept_len_fusion_off,
  tests_passed, tests_failed (failures + errors), tests_skipped, plus a few comparable numbers.
A value is null where the suite did not measure it (a server that did not start, the deadline).
"""

from __future__ import annotations

import sys
from typing import Any

from . import gpu_suite_checks as checks
from .suite_receipt import (
    SuiteReceipt,
    all_passed,
    summary_counts,
)

KIND = "lab-gpu-suite"
FACTS_SCHEMA = "sglang-blackwell/lab-gpu-suite-facts/1"
BASE = "0.5.14"
TP = checks.lab_tp()  # $SGLB_TP, default 2


def _arm(facts: dict[str, Any], name: str) -> dict[str, Any]:
    return (facts.get("arms") or {}).get(name) or {}


def _outputs(arm: dict[str, Any]) -> list[list[int]] | None:
    g = arm.get("greedy") or {}
    outs = g.get("outputs")
    return outs if isinstance(outs, list) and outs and all(isinstance(o, list) for o in outs) else None


def derive(facts: dict[str, Any]) -> dict[str, Any]:
    """The suite's verdicts recomputed from the raw facts (None where the inputs are missing)."""
    a, b, c = _arm(facts, "A"), _arm(facts, "B"), _arm(facts, "C")
    out: dict[str, Any] = {}
    prof = a.get("profile") or {}
    out["fusion_in_verify"] = (prof.get("verdict") or {}).get("ok") if prof.get("verdict") else None
    oa, ob, oc = _outputs(a), _outputs(b), _outputs(c)
    out["greedy_fusion"] = checks.compare_greedy(oa, ob) if oa and ob else None
    out["greedy_spec"] = checks.compare_greedy(oa, oc) if oa and oc else None
    eq = [x["equal"] for x in (out["greedy_fusion"], out["greedy_spec"]) if x is not None]
    out["greedy_equal"] = False if False in eq else (True if len(eq) == 2 else None)
    on = (a.get("accept") or {}).get("accept_len")
    off = (b.get("accept") or {}).get("accept_len")
    out["accept_len_fusion_on"], out["accept_len_fusion_off"] = on, off
    out["accept"] = checks.compare_accept(on, off) if on is not None or off is not None else None
    counts = [s["counts"].get("fused", 0) for s in prof.get("verify_spans") or []]
    out["fused_ar_per_verify"] = sorted(counts)[len(counts) // 2] if counts else None
    out["expected_fused_ar_per_verify"] = (prof.get("verdict") or {}).get("expected_per_step")
    dist = facts.get("dist") or {}
    ws = (dist.get("workspace") or {}).get("measured_bytes") or {}
    out["workspace_mib_p5"] = round(ws["48"] / 2**20, 2) if "48" in ws else None
    out["workspace_mib_upstream"] = round(ws["2048"] / 2**20, 2) if "2048" in ws else None
    symm = dist.get("symm_mem") or {}
    out["symm_mem_bit_identical"] = symm.get("bit_identical")
    td = [(_arm(facts, n).get("teardown_check") or {}).get("clean") for n in ("A", "B", "C") if _arm(facts, n)]
    out["teardown_clean"] = all(td) if td and None not in td else (False if False in td else None)
    return out


def build_summary(facts: dict[str, Any], junit: dict[str, Any], machine_label: str,
                  pytest_rc: int | None) -> dict[str, Any]:
    d = derive(facts)
    return {
        "machine": machine_label,
        "tp": TP,
        "fusion_in_verify": d["fusion_in_verify"],
        "greedy_equal": d["greedy_equal"],
        "accept_len_fusion_on": d["accept_len_fusion_on"],
        "accept_len_fusion_off": d["accept_len_fusion_off"],
        **summary_counts(junit),
        "fused_ar_per_verify": d["fused_ar_per_verify"],
        "expected_fused_ar_per_verify": d["expected_fused_ar_per_verify"],
        "workspace_mib_p5": d["workspace_mib_p5"],
        "workspace_mib_upstream": d["workspace_mib_upstream"],
        "symm_mem_bit_identical": d["symm_mem_bit_identical"],
        "teardown_clean": d["teardown_clean"],
        "passed": all_passed(junit, pytest_rc),
    }


RECEIPT = SuiteReceipt(kind=KIND, facts_schema=FACTS_SCHEMA, base=BASE, tp=TP, file_prefix="lab-line-gpu-suite",
                       facts_writer="the suite", summarize=build_summary,
                       extra=lambda facts: {"derived": derive(facts)})
load_facts, build_receipt, receipt_name = RECEIPT.load_facts, RECEIPT.build_receipt, RECEIPT.receipt_name


def main(argv: list[str] | None = None) -> int:
    return RECEIPT.main(argv, prog="python3 -m sglang_blackwell.qualify.gpu_suite_receipt",
                        description=(__doc__ or "").strip().splitlines()[0])


if __name__ == "__main__":
    sys.exit(main())
