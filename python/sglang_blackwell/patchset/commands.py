"""The patch series verbs of the CLI (check, checkout, export, report, label): each `cmd_<verb>` runs one parsed
command line and returns its exit code; cli.py parses and calls it, and imports this module only for these verbs.
Also `progress`, the indented stderr line through which every verb's long steps report."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import UserError
from .plural import counted


def progress(msg: str) -> None:
    print(f"  {msg}", file=sys.stderr, flush=True)


def cmd_check(a: argparse.Namespace) -> int:
    from .bases import get_base, list_bases
    from .check import check_base

    if a.upstream:
        return _check_upstream(a)
    if a.json:
        raise UserError("--json goes with --upstream (the drift report)")
    if getattr(a, "request_timeouts", None) is not None:
        raise UserError("--request-timeouts goes with --upstream (the reads of the index)")
    bases = list_bases() if a.all else [get_base(a.base)]
    bad = 0
    for b in bases:
        res = check_base(b, progress=progress)
        for ln in res.lines:
            print(ln)
        for p in res.problems:
            print(f"ERROR: {p}", file=sys.stderr)
        bad += len(res.problems)
        print(f"base {b.name}: {'OK' if res.ok else counted(len(res.problems), 'problem')}")
    return 1 if bad else 0


def _check_upstream(a: argparse.Namespace) -> int:
    """The drift report: exit 0 when every patch applies to the newest releases, 1 when any does not."""
    import json

    from ..httpclient import parse_limits
    from .bases import get_base, list_bases
    from .drift import drift_report, format_report, newest_base

    limits = parse_limits(getattr(a, "request_timeouts", None))
    if a.all:
        raise UserError("--upstream tries one base's series (the newest by default, or --base): drop --all")
    base = get_base(a.base) if a.base else newest_base(list_bases())
    report = drift_report(base, a.upstream, progress=progress, limits=limits)
    print(json.dumps(report, indent=1) if a.json else format_report(report))
    return 1 if report["drift"] else 0


def cmd_checkout(a: argparse.Namespace) -> int:
    from .bases import get_base
    from .queue import checkout

    n = checkout(get_base(a.base), a.package, Path(a.dir))
    print(f"{a.dir}: upstream + {n} patch commits (tag 'upstream' marks the pinned release). "
          f"Edit, commit (one commit per patch), then: sglang-blackwell export {a.dir}")
    return 0


def cmd_export(a: argparse.Namespace) -> int:
    from .queue import export

    names = export(Path(a.dir), Path(a.to) if a.to else None)
    for n in names:
        print(n)
    return 0


def cmd_report(a: argparse.Namespace) -> int:
    from .bases import get_base, list_bases
    from .report import patch_report

    if a.table or a.update:
        from .patch_table import markdown_table, update_block

        table = markdown_table(list_bases())
        if a.update:
            changed = update_block(Path(a.update), table)
            print(f"{a.update}: patch table {'updated' if changed else 'already current'}")
        else:
            print(table)
        return 0
    print(patch_report(get_base(a.base)))
    return 0


def cmd_label(a: argparse.Namespace) -> int:
    from .bases import get_base, list_bases
    from .labellock import lock_problems, write_lock

    bases = list_bases() if a.all else [get_base(a.base)]
    bad = 0
    for b in bases:
        if a.action == "lock":
            print(write_lock(b))
        probs = lock_problems(b)
        for p in probs:
            print(f"ERROR: {p}", file=sys.stderr)
        bad += len(probs)
        if a.action == "status":
            print(f"base {b.name}: +{b.local_label} {'locked' if not probs else 'NOT locked'}")
    return 1 if bad else 0


def cmd_base_bump(a: argparse.Namespace) -> int:
    from .base_bump import execute

    return execute(a)

