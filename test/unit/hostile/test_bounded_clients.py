"""Issue 32, class 3: every network read of ours is bounded. `base bump` and `check --upstream` read the index's
JSON API through the one bounded client (httpclient.py: first byte, idle, total, size; `--request-timeouts` as
`bench eagle3` reads it), the pip downloads fetch starts end within TOTAL, and `bench eagle3 --attach`'s /health
check ends by `--deadline-s`. The servers (index_world.py, a real HTTP server on loopback) send an endless body, a
byte every so often, no answer, or headers and then nothing; the deadlines of each case are a few seconds, and
what the case checks is the bound its message names, never how long it took.

Each case runs the real CLI in a fresh process and is classified by support/hostile.py; only clean passes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from bench_fakes import write_config

from support import hostile
from support.hostile import Case

from . import index_world as iw
from .index_world import Index, index  # noqa: F401 - the fixture

ITEM = "32.3"
BT = "patches/9.9.9/base.toml"
WATCH = (BT, "cache")


def url(idx: Index) -> str:
    return idx.url + iw.JSON_PATH


def json_route(behaviour: Callable[[Index, Path], iw.Behaviour]) -> iw.Step:
    def step(idx: Index, tmp: Path) -> None:
        idx.routes[iw.JSON_PATH] = behaviour(idx, tmp)
    return step


def wheel_trickles(idx: Index, tmp: Path) -> None:
    """The new wheel, a byte every 0.1 s (pip's own socket timeout never fires): ~100 s for the whole file."""
    idx.routes["/" + iw.NEW] = iw.trickle((idx.root / iw.NEW).read_bytes(), 0.1)


def bump(id: str, idx: Index, *steps: iw.Step, names: tuple[str, ...], timeouts: str | None = None,
         **kw) -> Case:
    extra = ("--request-timeouts", timeouts) if timeouts else ()
    return Case(id, ITEM, iw.bump_argv(idx, *extra), names=names, setup=iw.world(idx, *steps), watch=WATCH,
                env=iw.env(idx), timeout=kw.pop("timeout", 60), **kw)


def upstream(id: str, idx: Index, *steps: iw.Step, names: tuple[str, ...], timeouts: str, **kw) -> Case:
    return Case(id, ITEM, [*iw.UPSTREAM, "--request-timeouts", timeouts], names=names,
                setup=iw.world(idx, *steps), watch=WATCH, env=iw.env(idx), timeout=60, **kw)


def attach_health(id: str, idx: Index) -> Case:
    """bench eagle3 --attach a server whose /health never answers, with --deadline-s 1 (the check's own timeout
    is 5 s: the message says which bound ended it)."""
    def setup(tmp: Path) -> None:
        write_config(tmp, repeats=1, concurrency="[1]", api="completions", fusion_env=None)
        idx.routes["/health"] = iw.silent

    argv = ["bench", "eagle3", "--config", "{tmp}/fake.toml", "--out", "{tmp}/out", "--no-plots", "--arms",
            "baseline", "--attach", idx.url, "--deadline-s", "1"]
    return Case(id, ITEM, argv, names=(f"--attach baseline={idx.url}", "--deadline-s 1 reached"), setup=setup,
                watch=("out",), timeout=60)


Builder = Callable[[Index], Case]
CASES: list[tuple[str, Builder]] = [
    # ---- the JSON API --------------------------------------------------------------------------------------------
    ("endless-body", lambda idx: bump(  # ~65 MB/s: the cap in ~1 s; without one, <1.4 GB before the case's 20 s
        "index-endless-body", idx, json_route(lambda idx, tmp: iw.endless(b"[0," * 43690, 0.002)),
        names=(url(idx), "larger than 64 MiB"), timeout=20)),
    # total = idle = 2 s: a byte comes every 0.3 s, so the idle bound (2 s after the last byte) always ends later
    # than the total one (2 s after the request), which fires; 2 s of idle is ~7 of the byte intervals
    ("a-byte-every-0.3-s", lambda idx: bump(
        "index-a-byte-every-0.3-s", idx, json_route(lambda idx, tmp: iw.trickle(b"{" + b" " * 4096 + b"}", 0.3)),
        timeouts="2,2,2", names=(url(idx), "no whole answer within 2 s (total deadline)"))),
    ("never-answers", lambda idx: bump(
        "index-never-answers", idx, iw.route(iw.JSON_PATH, iw.silent), timeouts="1,1,30",
        names=(url(idx), "no answer within 1 s (first-byte deadline)"))),
    ("upstream-headers-then-nothing", lambda idx: upstream(
        "upstream-headers-then-nothing", idx, iw.route(iw.JSON_PATH, iw.headers_then_silent), timeouts="30,1,60",
        names=(url(idx), "no byte for 1 s (idle deadline)"))),
    ("upstream-a-byte-every-0.3-s", lambda idx: upstream(
        "upstream-a-byte-every-0.3-s", idx,
        json_route(lambda idx, tmp: iw.trickle(b"{" + b" " * 4096 + b"}", 0.3)), timeouts="2,2,2",
        names=(url(idx), "no whole answer within 2 s (total deadline)"))),
    ("request-timeouts-past-a-week", lambda idx: bump(
        "index-request-timeouts-past-a-week", idx, timeouts="1e308,1,1e308",
        names=("--request-timeouts 1e308,1,1e308", "at most"))),
    # ---- the pip processes fetch starts ---------------------------------------------------------------------------
    ("pip-download-trickles", lambda idx: bump(
        "index-pip-download-trickles", idx, wheel_trickles, timeouts="2,2,3", cli=iw.progress_to_stdout_cli(),
        names=(iw.NEW, "pip did not finish within 3 s", "killed"))),
    ("upstream-pip-download-trickles", lambda idx: Case(
        "upstream-pip-download-trickles", ITEM, [*iw.UPSTREAM, "--request-timeouts", "2,2,3"],
        names=(iw.NEW, "pip did not finish within 3 s"), setup=iw.world(idx, wheel_trickles), watch=WATCH,
        env=iw.env(idx), timeout=60, cli=iw.progress_to_stdout_cli())),
    # ---- bench eagle3 --attach: the health check ----------------------------------------------------------------
    ("attach-health-never-answers", lambda idx: attach_health("attach-health-deadline-s", idx)),
]


@pytest.mark.parametrize("which", [c for c, _ in CASES])
def test_hostile(which: str, index: Index, tmp_path: Path):  # noqa: F811 - the fixture
    hostile.assert_clean(dict(CASES)[which](index), tmp_path)


def test_case_ids_unique():
    assert len({c for c, _ in CASES}) == len(CASES)
