"""`sglang-blackwell bench <name>`: regression benchmarks that write JSON receipts under benchmark/results/.

Two unrelated benchmarks, a folder each: `allreduce/` (in-graph all-reduce latency per backend, the tuner) and
`eagle3/` (EAGLE-3 against the non-speculative baseline, end to end). Each entry module has
`add_arguments(parser)` and `run(args) -> exit code`; register it in BENCHES (name -> module, help) and the CLI
picks it up. Entry modules import nothing heavy at module level (torch, matplotlib load when a benchmark runs).
"""

from __future__ import annotations

import argparse
from types import ModuleType

from . import readme_blocks
from .allreduce import harness as allreduce_harness
from .eagle3 import harness as eagle3_harness
from .setup import harness as setup_harness

BENCHES: dict[str, tuple[ModuleType, str]] = {
    "eagle3": (eagle3_harness, "EAGLE-3 vs the non-speculative baseline, launched or attached"),
    "allreduce": (allreduce_harness, "in-graph all-reduce latency per backend; --tune writes the dispatch table"),
    "table": (readme_blocks, "the README's results, grid and set-up blocks from benchmark/results/*.json"),
    "setup": (setup_harness, "the README's set-up steps (make, make test, make image-test) timed in a fresh clone"),
}


def description(doc: str | None, fallback: str) -> str:
    """A sub-verb's --help description: the first paragraph of its entry module's docstring, as one line (a
    docstring's first line may end mid-sentence); the help text where the module has no docstring."""
    paragraph = (doc or "").strip().split("\n\n")[0]
    return " ".join(paragraph.split()) or fallback


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """One sub-parser per registered benchmark under `bench`."""
    for name, (mod, help_) in BENCHES.items():
        p = sub.add_parser(name, help=help_, description=description(mod.__doc__, help_))
        mod.add_arguments(p)
        p.set_defaults(bench_fn=mod.run)
