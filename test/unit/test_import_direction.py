"""The package's import chain runs one way (docs/architecture.md):

    cli -> qualify -> bench | release -> box -> artifacts -> patchset -> foundation

A module may import its own room and the rooms below it, never one above; bench and release are side by side and
do not import each other; bench/allreduce and bench/eagle3 share nothing. Lazy imports inside functions count
too: an arrow is an arrow. Read from the source with ast, nothing is imported.
"""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "python" / "sglang_blackwell"
FOUNDATION = {"envswitch", "errors", "httpclient", "leftovers", "limits", "paths", "procs", "receipts", "tomlio", ""}
RANK = {"foundation": 0, "patchset": 1, "artifacts": 2, "box": 3, "bench.allreduce": 4, "bench.eagle3": 4,
        "bench": 4, "release": 4, "qualify": 5, "cli": 6}


def room(module: str) -> str:
    """sglang_blackwell.box.doctor -> box; sglang_blackwell.bench.eagle3.x -> bench.eagle3."""
    parts = module.split(".")[1:]
    if not parts or parts[0] in FOUNDATION or parts[0] == "__init__":
        return "foundation"
    if parts[0] == "bench" and len(parts) > 1 and parts[1] in ("allreduce", "eagle3"):
        return f"bench.{parts[1]}"
    return parts[0]


def module_name(path: Path) -> tuple[str, str]:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    is_pkg = parts[-1] == "__init__"
    if is_pkg:
        parts = parts[:-1]
    name = ".".join(parts)
    return name, name if is_pkg else name.rsplit(".", 1)[0]


def _is_module(name: str) -> bool:
    p = PKG.parent.joinpath(*name.split("."))
    return p.with_suffix(".py").is_file() or (p / "__init__.py").is_file()


def arrows() -> list[tuple[str, str, int]]:
    out = []
    for f in sorted(PKG.rglob("*.py")):
        name, package = module_name(f)
        for node in ast.walk(ast.parse(f.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - node.level + 1]
                    mod = ".".join(base + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
                # `from pkg import x`: x is a submodule (an arrow of its own) or a name of pkg
                targets = [f"{mod}.{a.name}" if _is_module(f"{mod}.{a.name}") else mod for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            for t in targets:
                if t == "sglang_blackwell" or t.startswith("sglang_blackwell."):
                    out.append((name, t, node.lineno))
    return out


def test_the_scan_sees_the_arrows():
    found = {(room(a), room(b)) for a, b, _ in arrows()}
    assert ("cli", "qualify") in found and ("box", "patchset") in found and ("bench.eagle3", "box") in found


def test_imports_run_one_way():
    bad = []
    for src, dst, line in arrows():
        a, b = room(src), room(dst)
        if a == b or b == "foundation" and a != "foundation":
            continue
        if a == "foundation" and b != "foundation":
            bad.append(f"{src}:{line} -> {dst} (the foundation imports nothing above it)")
        elif RANK[b] > RANK[a]:
            bad.append(f"{src}:{line} -> {dst} ({a} is below {b})")
        elif RANK[b] == RANK[a] and not (a == "bench" and b.startswith("bench.")):
            bad.append(f"{src}:{line} -> {dst} ({a} and {b} stand side by side)")
    assert not bad, "imports running back up or sideways:\n  " + "\n  ".join(bad)
