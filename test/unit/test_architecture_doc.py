"""docs/architecture.md names every module of the package and every CLI verb, and nothing that is gone.

How the page is read (the same rules stand on the page, under "Keeping this page true"):
- modules: a table row whose first cell is one code span ending in `.py` lists that module, the path written from
  python/sglang_blackwell/ (`cli.py`, `box/nccl_conf.py`, `bench/eagle3/window.py`). Every module of the package
  has exactly one such row. An `__init__.py` is a module (and needs a row) only when it holds more than its
  docstring and `from __future__` imports: today `__init__.py` (`__version__`) and `bench/__init__.py` (`BENCHES`);
  the others are a package's docstring only.
- verbs: the first column of the table headed `verb` (under "Which CLI verb enters where"); each code span there
  starts with a sub-command of `sglang_blackwell.cli.build_parser()`, `bench <name>` for bench's; `a|b` after a
  verb lists its actions (the choices of its positional argument), all of them. Every sub-command of the parser,
  and every `bench` sub-verb, has a row; a row naming no verb of the parser is stale.
- no stale paths: every code span outside fenced blocks that ends in `.py`, or starts with a folder of the package
  (`box/nccl_profiles.toml`, `bench/allreduce/`), is a file or folder under python/sglang_blackwell/ or, failing
  that, from the repository root (`test/unit/test_import_direction.py`).
- the import chain the page draws is the one test_import_direction.py enforces (its RANK).
Plain text parsing; the parser is built in-process (no subprocess).
"""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path

from test_import_direction import RANK

from sglang_blackwell.cli import build_parser

REPO = Path(__file__).resolve().parents[2]
PKG = REPO / "python" / "sglang_blackwell"
DOC = REPO / "docs" / "architecture.md"
EDIT = "edit docs/architecture.md"
CODE = re.compile(r"`([^`]+)`")
FOLDERS = tuple(sorted(f"{p.name}/" for p in PKG.iterdir() if (p / "__init__.py").is_file()))


def _prose_lines(text: str) -> list[str]:
    """The page's lines outside fenced code blocks (the diagrams)."""
    out, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            out.append(line)
    return out


def _cells(line: str) -> list[str]:
    """A markdown table row's cells; `\\|` is a pipe inside a cell."""
    body = line.strip().strip("|")
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", body)]


RULE = re.compile(r"\s*\|[-| :]+\|\s*$")


def _rows(lines: list[str]) -> list[list[str]]:
    """The cells of every table row among lines (header rows included, rule lines not)."""
    return [_cells(line) for line in lines if line.lstrip().startswith("|") and not RULE.match(line)]


def has_content(init: Path) -> bool:
    """An __init__.py that holds more than its docstring and `from __future__` imports."""
    body = ast.parse(init.read_text()).body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return any(not (isinstance(n, ast.ImportFrom) and n.module == "__future__") for n in body)


def package_modules() -> set[str]:
    """Every module of the package as its path from python/sglang_blackwell/."""
    return {str(f.relative_to(PKG)) for f in PKG.rglob("*.py")
            if "__pycache__" not in f.parts and (f.name != "__init__.py" or has_content(f))}


def listed_modules(text: str) -> list[str]:
    """Modules in the page's tables: rows whose first cell is exactly one `.py` code span (duplicates kept)."""
    out = []
    for row in _rows(_prose_lines(text)):
        m = re.fullmatch(r"`([^`]+\.py)`", row[0])
        if m:
            out.append(m[1])
    return out


def verb_rows(text: str) -> list[list[list[str]]]:
    """The verb table's first column: per row, its code spans, each split into words."""
    lines = _prose_lines(text)
    try:
        start = next(i for i, line in enumerate(lines) if line.lstrip().startswith("|") and _cells(line)[0] == "verb")
    except StopIteration:
        raise AssertionError(f"docs/architecture.md has no table headed `| verb | ...`: {EDIT}") from None
    table = []
    for line in lines[start + 1:]:
        if not line.lstrip().startswith("|"):
            break
        table.append(line)
    return [[span.split() for span in CODE.findall(row[0])] for row in _rows(table)]


def _subparsers(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            return dict(a.choices)
    return {}


def _actions(p: argparse.ArgumentParser) -> list[str]:
    """The choices of a sub-command's positional argument (nccl show|install|uninstall), if it has one."""
    for a in p._actions:
        if not a.option_strings and a.choices and not isinstance(a, argparse._SubParsersAction):
            return list(a.choices)
    return []


def parser_verbs() -> dict[str, list[str]]:
    """`verb` (and `bench <name>`) -> its actions, from the CLI's own parser."""
    out: dict[str, list[str]] = {}
    for name, sp in _subparsers(build_parser()).items():
        subs = _subparsers(sp)
        if subs:
            out.update({f"{name} {s}": _actions(p) for s, p in subs.items()})
        else:
            out[name] = _actions(sp)
    return out


def nested_verbs() -> set[str]:
    """The verbs whose second word is a sub-parser of its own (`bench eagle3`, `base bump`), from the parser."""
    return {v.split()[0] for v in parser_verbs() if " " in v}


def named_verbs(text: str) -> dict[str, list[str]]:
    """`verb` (and `bench <name>`, `base <action>`) -> the actions the page lists for it (`a|b` after the verb)."""
    out: dict[str, list[str]] = {}
    nested = nested_verbs()
    for spans in verb_rows(text):
        for words in spans:
            if not words:
                continue
            if words[0] in nested and len(words) > 1:
                out.setdefault(f"{words[0]} {words[1]}", [])
            else:
                out.setdefault(words[0], []).extend(words[1].split("|") if len(words) > 1 else [])
    return out


def stale_paths(text: str) -> list[str]:
    """Code spans that look like paths of the package but name nothing on disk."""
    bad = []
    for line in _prose_lines(text):
        for span in CODE.findall(line):
            span = span.replace("\\|", "|")
            if " " in span or not (span.endswith(".py") or span.startswith(FOLDERS)):
                continue
            if not ((PKG / span).exists() or (REPO / span).exists()):
                bad.append(span)
    return bad


def chain_from_ranks() -> str:
    """The import chain as test_import_direction.py ranks the rooms: `cli -> qualify -> bench | release -> ...`."""
    floors: dict[int, list[str]] = {}
    for name, rank in RANK.items():
        top = name.split(".")[0]
        if top not in floors.setdefault(rank, []):
            floors[rank].append(top)
    return " -> ".join(" | ".join(floors[r]) for r in sorted(floors, reverse=True))


def mentioned(module: str, text: str) -> bool:
    """Whether the page names a module at all, rows or not: its path, or its bare name as a word of a code span."""
    spans = [s for line in _prose_lines(text) for s in CODE.findall(line)]
    if module.endswith("__init__.py"):
        return any(module == s for s in spans)
    return any(Path(module).stem in re.findall(r"\w+", s) for s in spans)


def test_every_module_has_a_row():
    text = DOC.read_text()
    listed = listed_modules(text)
    missing = [m + ("" if mentioned(m, text) else "  (not named anywhere on the page)")
               for m in sorted(package_modules() - set(listed))]
    assert not missing, (f"modules of python/sglang_blackwell/ with no row in docs/architecture.md ({EDIT}: one row "
                         "`| `<path>` | <its job> |` in its folder's table):\n  " + "\n  ".join(missing))
    twice = sorted({m for m in listed if listed.count(m) > 1})
    assert not twice, f"modules with more than one row in docs/architecture.md ({EDIT}): {', '.join(twice)}"


def test_no_row_for_a_module_that_is_gone():
    gone = sorted(set(listed_modules(DOC.read_text())) - package_modules())
    assert not gone, (f"rows of docs/architecture.md for modules not in python/sglang_blackwell/ ({EDIT}: remove or "
                      "rename them):\n  " + "\n  ".join(gone))
    stale = stale_paths(DOC.read_text())
    assert not stale, (f"paths in docs/architecture.md that name nothing on disk ({EDIT}):\n  " + "\n  ".join(stale))


def test_every_cli_verb_has_a_row():
    have, named = parser_verbs(), named_verbs(DOC.read_text())
    missing = [v for v in have if v not in named]
    assert not missing, (f"CLI verbs of sglang_blackwell.cli.build_parser() with no row in the verb table of "
                         f"docs/architecture.md ({EDIT}: add `| `<verb>` | <module it enters> | <reads -> writes> |` "
                         "under \"Which CLI verb enters where\"): " + ", ".join(missing))
    unknown = [v for v in named if v not in have]
    assert not unknown, (f"rows of the verb table in docs/architecture.md for verbs the CLI does not have ({EDIT}): "
                         + ", ".join(unknown))
    wrong = [f"{v} {'|'.join(named[v])} (the CLI has {'|'.join(have[v])})" for v in named
             if named[v] and sorted(named[v]) != sorted(have[v])]
    assert not wrong, f"actions in the verb table of docs/architecture.md that are not the CLI's ({EDIT}): " + \
        "; ".join(wrong)


def test_the_page_draws_the_chain_the_direction_test_enforces():
    chain = chain_from_ranks()
    assert chain in DOC.read_text(), (f"docs/architecture.md does not draw the import chain "
                                      f"test/unit/test_import_direction.py enforces ({EDIT}): {chain}")
