"""The CLI verbs about this machine (nccl, doctor, serve): each `cmd_<verb>` runs one parsed command line and
returns its exit code; cli.py parses and calls it, and imports this module only for these verbs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import UserError
from ..patchset.commands import progress


def cmd_nccl(a: argparse.Namespace) -> int:
    import json

    from .nccl import Profile, format_state, load_profiles, nccl_conf, resolve, user_environ
    from .nccl_hook import install, probe, state, uninstall
    from .topology import detect

    profiles = load_profiles(a.profiles)
    if a.action == "uninstall":
        print(uninstall(probe(a.python, user_environ()), a.nccl_conf).message)
        return 0
    if a.action == "install":
        res = resolve(a.profile or "auto", detect(cuda=False), profiles)
        change = install(probe(a.python, user_environ()), res, a.hook, nccl_conf=a.nccl_conf)
        print(change.message)
        if not res.profile.fits_class(res.topology_class):
            print(f"warning: {res.reason}", file=sys.stderr)
        if change.env:
            print("a fresh interpreter of that environment now gets:")
        for r in change.env:
            src = ".pth hook" if r.source == "pth" else r.source
            print(f"  {r.key}={r.value or '-'}  ({src}{': ' + r.note if r.note else ''})")
        if change.conf_env:
            print(f"an NCCL program started with NCCL_CONF_FILE={change.nccl_conf} gets from that file:")
        for key, value, where in change.conf_env:
            print(f"  {key}={value or '-'}  ({where})")
        for n in change.notes:
            print(n)
        for p in change.problems:
            print(f"PROBLEM: {p}", file=sys.stderr)
        return 1 if change.problems else 0
    if a.format == "nccl-conf":
        if a.profile:
            res = resolve(a.profile, detect(cuda=False), profiles)
            print(nccl_conf(res.profile, res.requested), end="")
            return 0
        act = state(a.python, profiles=profiles)["active"]
        if act is None:
            raise UserError("no managed block installed here: pass --profile P (or auto) to choose one")
        recorded = Profile(act["profile"], f"as recorded in {act['path']}", (), (), "", act["env"])
        print(nccl_conf(recorded, act["requested"]), end="")
        return 0
    st = state(a.python, profiles=profiles, requested=a.profile)
    print(json.dumps(st, indent=1) if a.format == "json" else format_state(st))
    return 1 if st["problems"] else 0  # each problem is a PROBLEM line (text) / an entry of "problems" (json)


def cmd_doctor(a: argparse.Namespace) -> int:
    from ..receipts import write_receipt
    from .doctor import check_arguments, format_report, run_doctor, to_receipt

    check_arguments(tp=a.tp, python=a.python, out=a.out)
    report = run_doctor(python=a.python, tp=a.tp, progress=progress if not a.json else None)
    receipt = to_receipt(report)
    if a.out:
        print(f"wrote {write_receipt(receipt, Path(a.out))}", file=sys.stderr)
    if a.json:
        import json

        print(json.dumps(receipt, indent=1, default=str))
    else:
        print(format_report(report))
    return 1 if report.failed else 0


def cmd_serve(a: argparse.Namespace) -> int:
    from .serve import run

    args = a.sglang_args[1:] if a.sglang_args[:1] == ["--"] else a.sglang_args
    return run(args, table=a.table, profile=a.profile, dry_run=a.dry_run,
               allow_unauthenticated=a.allow_unauthenticated)
