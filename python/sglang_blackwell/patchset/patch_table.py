"""The README's patch table, generated from patches/ (never typed by hand): one row per logical patch, one
column per base line saying which patch file carries it there, or since which upstream release upstream has it
(base.toml `absorbed`). `sglang-blackwell report --table [--update README.md]` prints it or rewrites the block
between <!-- patch-table:begin --> and <!-- patch-table:end -->.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from ..paths import marked_block, replace_marked_block
from .bases import Base, series_for
from .series import Patch

BEGIN, END = "<!-- patch-table:begin -->", "<!-- patch-table:end -->"


@dataclass
class Row:
    logical_id: str
    package: str = ""
    newest: Patch | None = None  # the patch as the newest base that carries it has it
    cells: dict[str, str] = field(default_factory=dict)  # base -> cell


def _id_key(lid: str) -> tuple[int, str]:
    m = re.fullmatch(r"P(\d+)", lid)
    return (int(m[1]) if m else 1 << 30, lid)


def rows(bases: list[Base]) -> list[Row]:
    """Bases in version order (list_bases); a later base's patch text wins for the description."""
    out: dict[str, Row] = {}
    for b in bases:
        for pkg in b.patched:
            for p in series_for(b, pkg.package).patches:
                row = out.setdefault(p.logical_id or p.name, Row(p.logical_id or p.name))
                row.package, row.newest = pkg.package, p
                row.cells[b.name] = f"`{p.name.removesuffix('.patch')}`"
        for lid in b.absorbed:
            row = out.setdefault(lid, Row(lid))
            dist, version = b.absorbed_since(lid)
            row.cells[b.name] = f"absorbed: upstream since {dist} {version}"
            row.package = row.package or b.package(dist).package
    return sorted(out.values(), key=lambda r: _id_key(r.logical_id))


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_table(bases: list[Base]) -> str:
    names = [b.name for b in bases]
    lines = ["| id | package | change (patch subject) | Upstream-Status | " + " | ".join(names) + " |",
             "|---" * (4 + len(names)) + "|"]
    for r in rows(bases):
        subject = r.newest.subject if r.newest else ""
        status = r.newest.upstream_status if r.newest else ""
        lines.append("| " + " | ".join(_cell(c) for c in [r.logical_id, r.package, subject, status,
                                                          *(r.cells.get(n, "-") for n in names)]) + " |")
    return "\n".join(lines)


def update_block(path: Path, table: str) -> bool:
    """Rewrite the patch-table block of `path` (paths.replace_marked_block); returns whether the file changed."""
    return replace_marked_block(path, table, BEGIN, END)


def current_block(path: Path) -> str | None:
    """The table between the markers in `path` (None when there is no block)."""
    return marked_block(path, BEGIN, END)
