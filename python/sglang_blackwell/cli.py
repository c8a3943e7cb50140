"""sglang-blackwell: one subcommand per job (see README)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import __version__
from .errors import UserError


def _progress(msg: str) -> None:
    print(f"  {msg}", file=sys.stderr, flush=True)


def cmd_build(a: argparse.Namespace) -> int:
    from .bases import get_base
    from .build import build
    from .report import patch_report

    base = get_base(a.base)
    built, manifest = build(base, Path(a.out), python=a.python, progress=_progress)
    for w in built:
        print(f"{w.path}  sha256={w.sha256}")
    print(f"{manifest}")
    if a.report:
        print()
        print(patch_report(base))
    return 0


def cmd_check(a: argparse.Namespace) -> int:
    from .bases import get_base, list_bases
    from .check import check_base

    bases = list_bases() if a.all else [get_base(a.base)]
    bad = 0
    for b in bases:
        res = check_base(b, progress=_progress)
        for ln in res.lines:
            print(ln)
        for p in res.problems:
            print(f"ERROR: {p}", file=sys.stderr)
        bad += len(res.problems)
        print(f"base {b.name}: {'OK' if res.ok else f'{len(res.problems)} problem(s)'}")
    return 1 if bad else 0


def cmd_checkout(a: argparse.Namespace) -> int:
    from .bases import get_base
    from .patchqueue import checkout

    n = checkout(get_base(a.base), a.package, Path(a.dir))
    print(f"{a.dir}: upstream + {n} patch commits (tag 'upstream' marks the pinned release). "
          f"Edit, commit (one commit per patch), then: sglang-blackwell export {a.dir}")
    return 0


def cmd_export(a: argparse.Namespace) -> int:
    from .patchqueue import export

    names = export(Path(a.dir), Path(a.to) if a.to else None)
    for n in names:
        print(n)
    return 0


def cmd_install(a: argparse.Namespace) -> int:
    from .bases import get_base
    from .install import install

    cmd = install(get_base(a.base), Path(a.dist), python_exe=a.python_exe, no_deps=a.no_deps,
                  upstream=a.upstream, dry_run=a.dry_run, progress=_progress)
    print(" ".join(cmd))
    return 0


def cmd_index(a: argparse.Namespace) -> int:
    from .index import build_index

    wheels = sorted(Path(a.dist).glob("*.whl"))
    simple = build_index(wheels, Path(a.dir))
    print(f"pip install --extra-index-url file://{simple.resolve()} sglang flashinfer-python")
    return 0


def cmd_report(a: argparse.Namespace) -> int:
    from .bases import get_base
    from .report import patch_report

    print(patch_report(get_base(a.base)))
    return 0


def cmd_bench(a: argparse.Namespace) -> int:
    return a.bench_fn(a)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="sglang-blackwell", description=__doc__)
    ap.add_argument("--version", action="version", version=f"sglang-blackwell {__version__}")
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    p = sub.add_parser("build", help="patched wheels + build manifest for a base")
    p.add_argument("--base", help="base line (default: the one base.toml marked default)")
    p.add_argument("--out", default="dist", help="output directory (default: dist)")
    p.add_argument("--python", help="only wheels for this CPython version, e.g. 3.12 (default: all pinned)")
    p.add_argument("--report", action="store_true", help="print the patch report afterwards")
    p.set_defaults(fn=cmd_build)

    p = sub.add_parser("check", help="series apply with zero fuzz, headers valid, series and files agree")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--base")
    g.add_argument("--all", action="store_true", help="every base")
    p.set_defaults(fn=cmd_check)

    p = sub.add_parser("checkout", help="upstream tree as a git repo with one commit per patch")
    p.add_argument("--base")
    p.add_argument("--package", required=True, help="sglang or flashinfer")
    p.add_argument("dir")
    p.set_defaults(fn=cmd_checkout)

    p = sub.add_parser("export", help="write a checkout's commits back as the series")
    p.add_argument("dir")
    p.add_argument("--to", help="series directory (default: where the checkout came from)")
    p.set_defaults(fn=cmd_export)

    p = sub.add_parser("install", help="pip install the patched stack (or --upstream to roll back)")
    p.add_argument("--base")
    p.add_argument("--dist", default="dist")
    p.add_argument("--python-exe", default=sys.executable, help="interpreter whose environment to install into")
    p.add_argument("--upstream", action="store_true", help="reinstall the unpatched pinned wheels (rollback)")
    p.add_argument("--no-deps", action="store_true", help="only our wheels, no dependencies or runtime pins")
    p.add_argument("--dry-run", action="store_true", help="print the pip command, change nothing")
    p.set_defaults(fn=cmd_install)

    p = sub.add_parser("index", help="PEP 503 simple index of the built wheels")
    p.add_argument("dir")
    p.add_argument("--dist", default="dist")
    p.set_defaults(fn=cmd_index)

    p = sub.add_parser("report", help="print the patch report of a base")
    p.add_argument("--base")
    p.set_defaults(fn=cmd_report)

    from .bench import add_parsers as add_bench_parsers

    p = sub.add_parser("bench", help="regression benchmarks with JSON receipts (see benchmark/README.md)")
    add_bench_parsers(p.add_subparsers(dest="bench", required=True, metavar="BENCHMARK"))
    p.set_defaults(fn=cmd_bench)
    return ap


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    try:
        return a.fn(a)
    except UserError as e:
        print(f"sglang-blackwell {a.cmd}: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print(f"sglang-blackwell {a.cmd}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
