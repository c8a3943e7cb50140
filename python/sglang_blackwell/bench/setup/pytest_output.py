"""What a pytest run said: the counts of its final summary line ("1039 passed, 10 skipped in 1197.12s (0:19:57)"),
and from its JUnit XML (`--junitxml`) how much of the test time went to the tests under one folder (the per-patch
probes in test/unit/patches/). Both read the run's own output; neither runs anything."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
SUMMARY = re.compile(r"^=*\s*(?P<body>no tests ran|\d+ [a-z]+(?:, \d+ [a-z]+)*) in (?P<secs>\d+(?:\.\d+)?)s"
                     r"(?: \(\d+:\d\d:\d\d\))?\s*=*$")
# pytest's words -> our keys ("1 error", "2 errors"; "1 warning", "3 warnings")
WORDS = {"passed": "passed", "failed": "failed", "skipped": "skipped", "error": "errors", "errors": "errors",
         "xfailed": "xfailed", "xpassed": "xpassed", "deselected": "deselected", "warning": "warnings",
         "warnings": "warnings", "rerun": "rerun"}
ALWAYS = ("passed", "failed", "skipped", "errors")
XDIST_WORKERS = re.compile(r"^(?P<n>\d+) workers \[\d+ items?\]\s*$")  # pytest-xdist: "2 workers [1628 items]"


def summary_counts(output: str) -> dict[str, Any] | None:
    """The last pytest summary line of `output`: {"passed", "failed", "skipped", "errors" (always there), any
    other count it names, "seconds", "line"}; None when the output has none (pytest never got that far)."""
    for raw in reversed(output.splitlines()):
        line = ANSI.sub("", raw).strip()
        m = SUMMARY.match(line)
        if not m:
            continue
        items = [] if m["body"] == "no tests ran" else [i.split(" ", 1) for i in m["body"].split(", ")]
        if any(word not in WORDS for _, word in items):
            continue  # "3 foo in 1s": not pytest's
        counts: dict[str, Any] = dict.fromkeys(ALWAYS, 0)
        for n, word in items:
            counts[WORDS[word]] = counts.get(WORDS[word], 0) + int(n)
        return {**counts, "seconds": float(m["secs"]), "line": line}
    return None


def xdist_workers(output: str) -> int | None:
    """How many pytest-xdist workers ran the tests (its "N workers [M items]" line); None: no xdist."""
    for raw in output.splitlines():
        m = XDIST_WORKERS.match(ANSI.sub("", raw).strip())
        if m:
            return int(m["n"])
    return None


def folder_time(junit: Path, folder: str) -> dict[str, Any] | None:
    """Seconds and test count of the test cases under `folder` (a path from the rootdir: "test/unit/patches")
    and of all test cases, from a JUnit XML file; None when there is none or it does not parse. A test case's
    classname is its module path with dots ("test.unit.patches.test_p1_x" or "...test_p1_x.TestClass"), its time
    setup + call + teardown (pytest's default junit_duration_report)."""
    try:
        root = ET.parse(junit).getroot()
    except (OSError, ET.ParseError):
        return None
    prefix = ".".join(Path(folder).parts)
    inside = total = 0.0
    n_inside = n_total = 0
    for case in root.iter("testcase"):
        try:
            t = float(case.get("time") or 0.0)
        except ValueError:
            t = 0.0
        total += t
        n_total += 1
        cls = case.get("classname") or ""
        if cls == prefix or cls.startswith(prefix + "."):
            inside += t
            n_inside += 1
    return {"folder": folder, "seconds": round(inside, 2), "tests": n_inside, "all_seconds": round(total, 2),
            "all_tests": n_total}


def share_of_tests(t: dict[str, Any] | None) -> float | None:
    """A folder's share of all the tests' time, from folder_time's sums (a receipt's `probes` holds them too, those
    from before `share_of_tests` was recorded included); None without a test time."""
    if not t or not t.get("all_seconds"):
        return None
    return round(float(t["seconds"]) / float(t["all_seconds"]), 3)
