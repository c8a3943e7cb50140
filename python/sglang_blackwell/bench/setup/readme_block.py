"""The README's set-up figures, generated from the newest `bench-setup` receipt in benchmark/results/ (never typed
by hand): the block between <!-- bench-setup:begin --> and <!-- bench-setup:end -->, written with the other
receipt blocks by `sglang-blackwell bench table --update README.md`."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any

from ...errors import UserError
from ...paths import read_json
from ...receipts import validate_receipt
from . import pytest_output
from .receipt import KIND
from .steps import STEPS

BEGIN, END = "<!-- bench-setup:begin -->", "<!-- bench-setup:end -->"


def load_newest(results: Path) -> tuple[Path, dict[str, Any]] | None:
    """The newest set-up receipt in `results` (by `created`, then name); None when there is none. A set-up
    receipt the block cannot show is refused, naming the file."""
    newest: tuple[Path, dict[str, Any]] | None = None
    for p in sorted(results.glob("*.json")):
        r = read_json(p)
        if not isinstance(r, dict) or r.get("kind") != KIND:
            continue
        probs = validate_receipt(r)
        if not probs:
            try:
                markdown(p, r, None)  # every value the block shows has the type it needs
            except (TypeError, ValueError, KeyError, AttributeError, IndexError) as e:
                probs.append(f"{type(e).__name__}: {e}")
        if probs:
            raise UserError(f"{p}: invalid {KIND} receipt: {'; '.join(probs)}")
        if newest is None or (r["created"], p.name) > (newest[1]["created"], newest[0].name):
            newest = (p, r)
    return newest


def duration(s: float) -> str:
    """12.24 -> "12.2 s"; 1197 -> "19 min 57 s"; 3725 -> "1 h 2 min"."""
    if s < 60:
        return f"{s:.1f} s"
    whole = round(s)
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60} min"


def _counts(p: dict[str, Any]) -> str:
    parts = [f"{p['passed']} passed", f"{p['skipped']} skipped", f"{p['failed']} failed"]
    if p.get("errors"):
        parts.append(f"{p['errors']} errors")
    return ", ".join(parts)


def step_line(step: dict[str, Any] | None, shown: str) -> str:
    if step is None:
        return f"- `{shown}`: not measured in this run"
    if "exit_code" not in step:
        return f"- `{shown}`: not run ({step.get('not_run', 'an earlier step failed')})"
    took = duration(float(step["wall_s"]))
    if step["timed_out"]:
        head = f"- `{shown}`: **timed out** after {took}"
    elif step["exit_code"] != 0:
        head = f"- `{shown}`: **failed** (exit {step['exit_code']}) after {took}"
    else:
        head = f"- `{shown}`: {took}"
    details = []
    if step.get("pytest"):
        details.append(_counts(step["pytest"]))
    elif "pytest" in step:
        details.append("no pytest summary line in its output")
    probes = step.get("probes")
    share = pytest_output.share_of_tests(probes)
    if share is not None:
        n = probes["tests"]
        details.append(f"the per-patch probes in `{probes['folder']}/` ({n} test{'' if n == 1 else 's'}) "
                       f"{share:.0%} of the tests' time; pytest {duration(float(step['pytest']['seconds']))}"
                       + (f" on {step['pytest']['workers']} workers" if step["pytest"].get("workers") else ""))
    return head + (f" ({'; '.join(details)})" if details else "")


def _machine(m: dict[str, Any]) -> str:
    cores = f"{m['nproc']} cores"
    if m.get("cpu_quota") and m["cpu_quota"] < m["nproc"]:
        cores += f", a quota of {m['cpu_quota']:g}"
    mem = f", {m['memory_gib']:g} GiB" if m.get("memory_gib") else ""
    load = f", load {m['load'][0]:.2f} at the start" if m.get("load") else ""
    return f"{m.get('cpu_model') or 'an unknown CPU'} ({cores}{mem}{load})"


def _caches(c: dict[str, Any]) -> str:
    pip, ours = c["pip"]["state"], c["sglang-blackwell"]["state"]
    if pip == ours:
        return f"pip's cache and ~/.cache/sglang-blackwell {pip}"
    return f"pip's cache {pip}, ~/.cache/sglang-blackwell {ours}"


def markdown(p: Path, r: dict[str, Any], link_base: Path | None) -> str:
    """The block for receipt `r` at `p`: one line naming the run, one per README set-up step."""
    src = r["source"]
    link = os.path.relpath(p, link_base) if link_base else p.name
    dirty = " (`--allow-dirty`: the checkout had uncommitted changes, the clone not)" if src["dirty"] else ""
    by_name = {s["name"]: s for s in r["steps"]}
    lines = [f"A fresh clone of `{src['commit'][:12]}`{dirty} on {_machine(r['machine'])}, "
             f"{_caches(r['caches']['before'])}, {r['created'][:10]} ([{p.name}]({link})):", ""]
    lines += [step_line(by_name.get(s.name), s.shown()) for s in STEPS]
    lines += ["", f"Measured by `{shlex.join(str(c) for c in r['command'])}`."]
    return "\n".join(lines)


def block(results: Path, link_base: Path | None) -> str:
    newest = load_newest(results)
    if newest is None:
        return "(no set-up receipt yet: `sglang-blackwell bench setup`)"
    return markdown(*newest, link_base)
