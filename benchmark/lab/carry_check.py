#!/usr/bin/env python3
"""Before a lab session, here: will each bundle chunk travel in one device call with the working tree, and is it
the bundle the session needs? The device tool carries the working tree (tracked files, untracked files git does
not ignore, shared/) plus the carried paths, 64 MiB in all per call. Its count is not ours to the byte: on
2026-12-08 it refused c1 55.79 MiB + a tree of 8.12 MiB (647 files) = 63.91 MiB by this script's count, so a chunk
must leave --reserve-mib (1 MiB by default) of the limit free.

    python3 benchmark/lab/carry_check.py [--limit-mib 64] [--reserve-mib 1] [--jit 9.0a:trtllm_comm,norm] \
        .whl/c1 .whl/c2 .whl/c3

Checks: every directory is a chunk of one and the same bundle (manifest.json: schema, bundle_id, chunk) and
together they are all of its chunks; each chunk's bytes + the tree's bytes + the reserve <= the limit; with --jit
ARCH:MODULES, the bundle carries those prebuilt FlashInfer modules built for ARCH (manifest files of kind "jit").
Prints one line per chunk (MiB, MiB with the tree, the margin) and exits 0 when everything holds, 1 when something
does not (each problem on its own line), 2 on bad input. Standard library only (the lab image runs it too).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

SCHEMA = "sglang-blackwell/bundle/1"
MIB = 2**20


def tree_bytes(root: Path) -> int:
    """Bytes of what travels with every call: tracked and untracked-not-ignored files (that exist), and shared/."""
    out = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         capture_output=True, check=True).stdout
    total = 0
    for rel in filter(None, out.split(b"\0")):
        p = root / os.fsdecode(rel)
        if p.is_file() and not p.is_symlink():
            total += p.stat().st_size
    shared = root / "shared"
    if shared.is_dir() and not shared.is_symlink():
        tracked = {os.fsdecode(r) for r in filter(None, out.split(b"\0"))}
        total += sum(p.stat().st_size for p in shared.rglob("*")
                     if p.is_file() and str(p.relative_to(root)) not in tracked)
    return total


def dir_bytes(d: Path) -> int:
    return sum(p.stat().st_size for p in d.rglob("*") if p.is_file())


def check(chunks: list[Path], *, limit: int, tree: int, jit: tuple[str, set[str]] | None,
          reserve: int = 0) -> tuple[list[str], list[str]]:
    """(report lines, problems); an empty problem list means the chunks are ready to carry."""
    lines, problems = [], []
    manifests = {}
    for d in chunks:
        m = d / "manifest.json"
        try:
            manifests[d] = json.loads(m.read_text())
        except (OSError, ValueError) as e:
            raise SystemExit(f"carry_check: {m}: not a bundle chunk's manifest ({e})") from None
        if manifests[d].get("schema") != SCHEMA:
            raise SystemExit(f"carry_check: {m}: schema {manifests[d].get('schema')!r}, expected {SCHEMA!r}")
    ids = {m.get("bundle_id") for m in manifests.values()}
    if len(ids) != 1:
        problems.append(f"chunks of different bundles: {', '.join(sorted(str(i)[:16] for i in ids))}")
    first = next(iter(manifests.values()))
    want = list(first.get("chunks") or [""])
    have = sorted(m.get("chunk") or "" for m in manifests.values())
    if sorted(want) != have:
        problems.append(f"the bundle has chunks {want}, given {have}")
    lines.append(f"bundle {str(first.get('bundle_id'))[:16]} (base {first.get('base')}, {first.get('python_tag')}), "
                 f"{len(first.get('files', []))} files; the tree that travels with every call: {tree / MIB:.2f} MiB")
    for d in chunks:
        size = dir_bytes(d)
        total = size + tree
        ok = total + reserve <= limit
        lines.append(f"  {d}: {size / MIB:6.2f} MiB, with the tree {total / MIB:6.2f} MiB of {limit / MIB:.0f} "
                     f"({'ok' if ok else 'TOO BIG'}, margin {(limit - total) / MIB:+.2f} MiB, "
                     f"{reserve / MIB:.2f} needed)")
        if not ok:
            problems.append(f"{d}: {total / MIB:.2f} MiB with the tree, over the {limit / MIB:.0f} MiB a call "
                            f"carries less the {reserve / MIB:.2f} MiB reserve (rebuild with a smaller --chunk-mib)")
    if jit:
        arch, modules = jit
        built = {f.get("module") for f in first.get("files", [])
                 if f.get("kind") == "jit" and arch in (f.get("archs") or [])}
        where = {f.get("module"): f.get("chunk") for f in first.get("files", []) if f.get("kind") == "jit"}
        missing = sorted(modules - built)
        if missing:
            problems.append(f"no prebuilt FlashInfer module(s) {', '.join(missing)} for {arch} in the bundle "
                            f"(bundle --jit-archs {arch}); the lab would compile them at the first start")
        else:
            lines.append(f"  prebuilt FlashInfer modules for {arch}: "
                         + ", ".join(f"{n} ({where.get(n)})" for n in sorted(modules)))
    return lines, problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("chunks", nargs="+", type=Path, help="the bundle's chunk directories (.whl/c1 ...)")
    ap.add_argument("--limit-mib", type=float, default=64.0, help="what one device call carries (default 64)")
    ap.add_argument("--reserve-mib", type=float, default=1.0,
                    help="of the limit left free: the device tool counts more than files' bytes (default 1)")
    ap.add_argument("--jit", metavar="ARCH:MODULES", help="prebuilt FlashInfer modules the session needs, e.g. "
                                                          "9.0a:trtllm_comm,norm")
    ap.add_argument("--repo", type=Path, default=Path(__file__).resolve().parents[2], help="the checkout that travels")
    a = ap.parse_args(argv)
    jit = None
    if a.jit:
        arch, _, mods = a.jit.partition(":")
        if not arch or not mods:
            print(f"carry_check: --jit {a.jit!r}: expected ARCH:MODULE[,MODULE...]", file=sys.stderr)
            return 2
        jit = (arch, set(filter(None, mods.split(","))))
    try:
        if not 0 <= a.reserve_mib < a.limit_mib:
            print(f"carry_check: --reserve-mib {a.reserve_mib}: expected 0 up to below --limit-mib", file=sys.stderr)
            return 2
        lines, problems = check(a.chunks, limit=int(a.limit_mib * MIB), tree=tree_bytes(a.repo), jit=jit,
                                reserve=int(a.reserve_mib * MIB))
    except SystemExit as e:
        print(e, file=sys.stderr)
        return 2
    except subprocess.CalledProcessError as e:
        print(f"carry_check: --repo {a.repo}: git ls-files failed ({e.stderr.decode(errors='replace').strip()})",
              file=sys.stderr)
        return 2
    print("\n".join(lines))
    for p in problems:
        print(f"PROBLEM: {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
