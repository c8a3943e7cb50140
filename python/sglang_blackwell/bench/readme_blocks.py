"""`sglang-blackwell bench table`: every README block made from the receipts in benchmark/results/: bench eagle3's
results table and grid (bench/eagle3/readme_table.py) and the set-up times (bench/setup/readme_block.py, where
the file has its <!-- bench-setup:begin --> ... <!-- bench-setup:end --> block). Prints them; --update FILE
rewrites them in FILE.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..paths import repo_root
from .eagle3 import readme_table
from .setup import readme_block

add_arguments = readme_table.add_arguments


def run(a: argparse.Namespace) -> int:
    results = Path(a.results) if a.results else (repo_root() or Path.cwd()) / "benchmark" / "results"
    target = Path(a.update) if a.update else None
    setup = target is None or readme_table.has_block(target, readme_block.BEGIN, readme_block.END)
    # rendered (every set-up receipt checked) before any block is written: a bad receipt changes no block
    setup_md = readme_block.block(results, target.parent if target else Path.cwd()) if setup else ""
    rc = readme_table.run(a)
    if target is None:
        print()
        print(setup_md)
    elif setup:
        readme_table.update_block(target, setup_md, readme_block.BEGIN, readme_block.END)
        print(f"{target}: set-up block updated")
    return rc
