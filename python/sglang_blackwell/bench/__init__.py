"""`sglang-blackwell bench <name>`: regression benchmarks that write JSON receipts under benchmark/results/.

Each benchmark is one module with `add_arguments(parser)` and `run(args) -> exit code`; register it in BENCHES
(name -> module, help) and the CLI picks it up. Modules are imported only when their benchmark runs or its
parser is built, and import nothing heavy at module level.
"""

from __future__ import annotations

import argparse
import importlib

BENCHES: dict[str, tuple[str, str]] = {
    "eagle3": ("sglang_blackwell.bench.eagle3",
               "EAGLE-3 vs the non-speculative baseline, launched or attached"),
    "allreduce": ("sglang_blackwell.bench.allreduce",
                  "in-graph all-reduce latency per backend; --tune writes the dispatch table"),
    "table": ("sglang_blackwell.bench.readme_table",
              "the README results table from benchmark/results/*.json"),
}


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """One sub-parser per registered benchmark under `bench`."""
    for name, (module, help_) in BENCHES.items():
        mod = importlib.import_module(module)
        p = sub.add_parser(name, help=help_, description=(mod.__doc__ or help_).strip().splitlines()[0])
        mod.add_arguments(p)
        p.set_defaults(bench_fn=mod.run)
