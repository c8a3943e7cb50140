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

import argparse
import datetime as dt
import json
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import receipts
from ..errors import UserError
from . import gpu_suite_checks as checks

KIND = "lab-gpu-suite"
FACTS_SCHEMA = "sglang-blackwell/lab-gpu-suite-facts/1"
BASE = "0.5.14"
TP = checks.lab_tp()  # $SGLB_TP, default 2


def parse_junit(path: Path) -> dict[str, Any]:
    """Counts and one row per test case: outcome passed | failed | error | skipped (failure wins over a
    teardown error on the same case)."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        raise UserError(f"--junit {path}: cannot read JUnit XML: {e}") from None
    cases = []
    for tc in root.iter("testcase"):
        kinds = {child.tag for child in tc}
        outcome = ("failed" if "failure" in kinds else "error" if "error" in kinds
                   else "skipped" if "skipped" in kinds else "passed")
        msg = next((child.get("message") for child in tc if child.tag in ("failure", "error", "skipped")), None)
        cases.append({"name": f"{tc.get('classname', '')}::{tc.get('name', '')}", "outcome": outcome,
                      "time_s": float(tc.get("time") or 0.0), "message": (msg or "")[:400] or None})
    counts = {k: sum(1 for c in cases if c["outcome"] == k) for k in ("passed", "failed", "error", "skipped")}
    return {"counts": counts, "cases": cases}


def load_facts(path: Path, schema: str = FACTS_SCHEMA) -> dict[str, Any]:
    """The facts a GPU suite wrote (schema: which suite's), {} when it never got to write them."""
    if not path.is_file():
        return {}  # the suite never got to write one (collection error, killed): the receipt says so
    try:
        facts = json.loads(path.read_text())
    except ValueError as e:
        raise UserError(f"--facts {path}: not JSON: {e}") from None
    if not isinstance(facts, dict) or facts.get("schema") != schema:
        got = facts.get("schema") if isinstance(facts, dict) else type(facts).__name__
        raise UserError(f"--facts {path}: schema {got!r}, expected {schema!r}")
    return facts


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
    n = junit["counts"]
    return {
        "machine": machine_label,
        "tp": TP,
        "fusion_in_verify": d["fusion_in_verify"],
        "greedy_equal": d["greedy_equal"],
        "accept_len_fusion_on": d["accept_len_fusion_on"],
        "accept_len_fusion_off": d["accept_len_fusion_off"],
        "tests_passed": n["passed"],
        "tests_failed": n["failed"] + n["error"],
        "tests_skipped": n["skipped"],
        "fused_ar_per_verify": d["fused_ar_per_verify"],
        "expected_fused_ar_per_verify": d["expected_fused_ar_per_verify"],
        "workspace_mib_p5": d["workspace_mib_p5"],
        "workspace_mib_upstream": d["workspace_mib_upstream"],
        "symm_mem_bit_identical": d["symm_mem_bit_identical"],
        "teardown_clean": d["teardown_clean"],
        "passed": pytest_rc == 0 and n["failed"] + n["error"] == 0 and n["skipped"] == 0 and n["passed"] > 0,
    }


def installed_stack() -> dict[str, Any]:
    """Version and our patch marker (wheels.MARKER_FILE) of each installed package of the lab line."""
    from ..box.stackinfo import dist_facts

    out = {}
    for name in ("sglang", "flashinfer-python", "sglang-kernel", "torch"):
        f = dist_facts(name)
        out[name] = None if f is None else {"version": f["version"], "patches": f["patches"],
                                            "base": (f["marker"] or {}).get("base")}
    return out


def build_receipt(facts: dict[str, Any], junit: dict[str, Any], *, pytest_rc: int | None,
                  machine: dict[str, Any] | None = None, versions: dict[str, Any] | None = None,
                  installed: dict[str, Any] | None = None, command: list[str] | None = None) -> dict[str, Any]:
    from ..box import nvidia_smi as nvidia

    m = machine if machine is not None else nvidia.machine()
    summary = build_summary(facts, junit, nvidia.machine_label(m), pytest_rc)
    return receipts.make_receipt(
        KIND, summary, base=BASE, tp=TP, machine=m,
        versions=versions if versions is not None else receipts.collect_versions(),
        command=command, pytest_rc=pytest_rc, junit_missing=junit.get("missing"), tests=junit["cases"],
        derived=derive(facts), installed=installed if installed is not None else installed_stack(),
        facts=facts)


def receipt_name(now: dt.datetime | None = None) -> str:
    now = now or dt.datetime.now(dt.timezone.utc)
    return f"lab-line-gpu-suite-{now.strftime('%Y-%m-%d')}.json"


def receipt_cli(argv: list[str] | None, *, prog: str, description: str, what: str,
                receipt_name: Callable[[], str], build: Callable[..., dict[str, Any]],
                load: Callable[[Path], dict[str, Any]]) -> int:
    """The command line of a GPU-suite receipt writer (this module's and the user path's): --junit, --facts,
    --out, --pytest-rc; a JUnit file pytest never wrote is recorded as missing, not an error."""
    ap = argparse.ArgumentParser(prog=prog, description=description)
    ap.add_argument("--junit", required=True, help="pytest --junitxml output")
    ap.add_argument("--facts", required=True, help=f"facts.json {what} wrote into $SGLB_OUT")
    ap.add_argument("--out", required=True, help=f"directory for {receipt_name().rsplit('-', 3)[0]}-<date>.json")
    ap.add_argument("--pytest-rc", type=int, help="pytest's exit code (recorded; 0 is needed for passed)")
    a = ap.parse_args(argv)
    try:
        junit_path = Path(a.junit)
        junit = parse_junit(junit_path) if junit_path.is_file() else {
            "counts": {"passed": 0, "failed": 0, "error": 0, "skipped": 0}, "cases": [],
            "missing": f"{junit_path} not written (pytest did not get to the end)"}
        facts = load(Path(a.facts))
        r = build(facts, junit, pytest_rc=a.pytest_rc, command=[Path(sys.argv[0]).name, *sys.argv[1:]])
        path = receipts.write_receipt(r, Path(a.out) / receipt_name())
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(r["summary"], indent=1))
    print(f"receipt: {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    return receipt_cli(argv, prog="python3 -m sglang_blackwell.qualify.gpu_suite_receipt",
                       description=(__doc__ or "").strip().splitlines()[0], what="the suite",
                       receipt_name=receipt_name, build=build_receipt, load=load_facts)


if __name__ == "__main__":
    sys.exit(main())
