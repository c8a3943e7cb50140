"""`sglang-blackwell bench <name>`: regression benchmarks that write JSON receipts under benchmark/results/.

Two unrelated benchmarks, a folder each: `allreduce/` (in-graph all-reduce latency per backend, the tuner) and
`eagle3/` (EAGLE-3 against the non-speculative baseline, end to end). Each entry module has
`add_arguments(parser)` and `run(args) -> exit code`; register it in BENCHES (name -> a function that imports it,
help) and the CLI picks it up. An entry module is imported only when its benchmark is parsed (`bench <name>`, or
every one for a parser built for all verbs), and imports nothing heavy at module level (torch, matplotlib load
when a benchmark runs).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Collection
from types import ModuleType


def _eagle3() -> ModuleType:
    from .eagle3 import harness

    return harness


def _allreduce() -> ModuleType:
    from .allreduce import harness

    return harness


def _table() -> ModuleType:
    from . import readme_blocks

    return readme_blocks


def _setup() -> ModuleType:
    from .setup import harness

    return harness


BENCHES: dict[str, tuple[Callable[[], ModuleType], str]] = {
    "eagle3": (_eagle3, "EAGLE-3 vs the non-speculative baseline, launched or attached"),
    "allreduce": (_allreduce, "in-graph all-reduce latency per backend; --tune writes the dispatch table"),
    "table": (_table, "the README's results, grid and set-up blocks from benchmark/results/*.json"),
    "setup": (_setup, "the README's set-up steps (make, make test, make image-test) timed in a fresh clone"),
}


def description(doc: str | None, fallback: str) -> str:
    """A sub-verb's --help description: the first paragraph of its entry module's docstring, as one line (a
    docstring's first line may end mid-sentence); the help text where the module has no docstring."""
    paragraph = (doc or "").strip().split("\n\n")[0]
    return " ".join(paragraph.split()) or fallback


def add_parsers(sub: argparse._SubParsersAction, parsed: Collection[str] | None = None) -> None:
    """One sub-parser per registered benchmark under `bench`, each listed with its help; the arguments (and the
    entry module they come from) only for the benchmarks in parsed (None: every one)."""
    for name, (load, help_) in BENCHES.items():
        if parsed is not None and name not in parsed:
            sub.add_parser(name, help=help_)
            continue
        mod = load()
        p = sub.add_parser(name, help=help_, description=description(mod.__doc__, help_))
        mod.add_arguments(p)
        p.set_defaults(bench_fn=mod.run)
