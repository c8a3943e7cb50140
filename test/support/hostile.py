"""The yardstick of the hostile-input suite (test/unit/hostile/): run the real CLI the way a user would, in a
fresh process, then classify what happened. Issue 18's rule: bad input gets one clear line naming the thing at
fault (patch and hunk, base, file, key, flag, env var), exit 2, and nothing half-written.

    clean      the expected exit code (2 for bad input), no traceback, stderr names the thing at fault, and the
               watched state is byte for byte as before (or, for a case that succeeds, as the case says)
    traceback  a Python traceback reached the user (or only cli.main's last-resort net caught it: NET_MARK)
    wrong      no traceback, but the exit code or the message is not what the rule says
    damaged    a watched file or directory changed, or a temporary / partial file was left behind

Each case is a `Case`; `check(case, tmp_path)` runs it and returns an `Outcome`; the suite's conftest tallies
every outcome and prints the counts at the end of the run (`hostile: tried N, clean ..., traceback ...`).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CLASSES = ("clean", "traceback", "wrong", "damaged")
# cli.main's last-resort net turns an exception nobody handled into one line with this mark (and a crash report):
# still a traceback for this suite, caught one level too late
NET_MARK = "(unexpected "
TEMP_MARKERS = (".partial", ".tmp", ".sglang-blackwell-tmp-", ".bundle-tmp-")


@dataclass
class Case:
    id: str
    item: str  # the issue-18 item it covers ("1".."11", or "fuzz")
    argv: list[str]  # sglang-blackwell arguments; "{tmp}" is replaced by the case's directory
    names: tuple[str, ...] = ()  # what stderr must name (the flag, file, key, patch, ...): all of them
    rc: int = 2
    setup: Callable[[Path], None] | None = None  # prepares files in the case's directory
    watch: tuple[str, ...] = ()  # paths (relative to the case's directory) that must not change
    env: dict[str, str] = field(default_factory=dict)  # added to a clean environment; "{tmp}" replaced
    stdin: str | None = None
    timeout: float = 120.0
    after: Callable[[Path, subprocess.CompletedProcess], str | None] | None = None  # extra check: why it is wrong
    cli: tuple[str, ...] | None = None  # another command than sglang-blackwell (install.sh); "{tmp}" replaced


@dataclass
class Outcome:
    case: Case
    cls: str
    why: str
    rc: int | None
    stderr: str


def _digest(p: Path) -> str:
    if not p.exists() and not p.is_symlink():
        return "absent"
    if p.is_symlink():
        return "link:" + os.readlink(p)
    if p.is_file():
        st = p.stat()
        return f"file:{oct(st.st_mode & 0o7777)}:" + hashlib.sha256(p.read_bytes()).hexdigest()
    parts = []
    for q in sorted(p.rglob("*")):
        parts.append(f"{q.relative_to(p)}={_digest(q) if not q.is_dir() else 'dir'}")
    return "dir:" + hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _leftovers(root: Path) -> list[str]:
    return sorted(str(q.relative_to(root)) for q in root.rglob("*")
                  if any(m in q.name for m in TEMP_MARKERS) and not q.name.endswith(".tmpl"))


def clean_env(tmp: Path, extra: dict[str, str]) -> dict[str, str]:
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "PIP_INDEX_URL", "PIP_CONFIG_FILE")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env["PYTHONPATH"] = str(REPO / "python")
    env.setdefault("SGLANG_BLACKWELL_CACHE", str(tmp / "cache"))
    env["SGLANG_BLACKWELL_OFFLINE"] = "1"  # a hostile case never downloads
    env.update({k: v.replace("{tmp}", str(tmp)) for k, v in extra.items()})
    return env


def check(case: Case, tmp: Path, *, cli: tuple[str, ...] = (sys.executable, "-m", "sglang_blackwell.cli")) -> Outcome:
    if case.setup is not None:
        case.setup(tmp)
    before = {w: _digest(tmp / w) for w in case.watch}
    temps_before = set(_leftovers(tmp))
    argv = [a.replace("{tmp}", str(tmp)) for a in case.argv]
    if case.cli is not None:
        cli = tuple(a.replace("{tmp}", str(tmp)) for a in case.cli)
    try:
        r = subprocess.run([*cli, *argv], capture_output=True, text=True, errors="replace", cwd=tmp,
                           env=clean_env(tmp, case.env), input=case.stdin, timeout=case.timeout)
    except subprocess.TimeoutExpired:
        return Outcome(case, "wrong", f"did not finish in {case.timeout:.0f} s", None, "")
    err = r.stderr
    if "Traceback (most recent call last)" in err or "Traceback (most recent call last)" in r.stdout:
        return Outcome(case, "traceback", err.strip().splitlines()[-1][:300] if err.strip() else "", r.returncode, err)
    if NET_MARK in err:
        return Outcome(case, "traceback", "caught only by cli.main's net: " + err.strip()[-300:], r.returncode, err)
    changed = [w for w in case.watch if _digest(tmp / w) != before[w]]
    left = sorted(set(_leftovers(tmp)) - temps_before)
    if changed or left:
        why = "; ".join(x for x in (f"changed: {', '.join(changed)}" if changed else "",
                                    f"left behind: {', '.join(left)}" if left else "") if x)
        return Outcome(case, "damaged", why, r.returncode, err)
    if r.returncode != case.rc:
        return Outcome(case, "wrong", f"exit {r.returncode}, expected {case.rc}", r.returncode, err)
    missing = [n for n in case.names if n.replace("{tmp}", str(tmp)) not in err]
    if missing:
        return Outcome(case, "wrong", f"stderr does not name {missing}", r.returncode, err)
    if case.rc == 2 and len([ln for ln in err.strip().splitlines() if ln.strip()]) != 1:
        return Outcome(case, "wrong", "bad input must be answered in one line", r.returncode, err)
    if case.after is not None:
        why = case.after(tmp, r)
        if why:
            return Outcome(case, "wrong", why, r.returncode, err)
    return Outcome(case, "clean", "", r.returncode, err)


TALLY: list[Outcome] = []


def assert_clean(case: Case, tmp: Path) -> Outcome:
    """Run, record for the summary, and fail the test with the classification unless it is clean."""
    o = check(case, tmp)
    TALLY.append(o)
    assert o.cls == "clean", f"{case.id} (item {case.item}): {o.cls}: {o.why}\nstderr:\n{o.stderr[-2000:]}"
    return o


def summary(outcomes: list[Outcome]) -> str:
    counts = {c: sum(o.cls == c for o in outcomes) for c in CLASSES}
    items = sorted({o.case.item for o in outcomes}, key=lambda s: (not s.isdigit(), int(s) if s.isdigit() else 0, s))
    return (f"hostile: tried {len(outcomes)}, " + ", ".join(f"{c} {n}" for c, n in counts.items())
            + f" (items covered: {', '.join(items)})")
