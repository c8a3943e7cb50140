"""The CLI verbs that make and publish artifacts (build, install, bundle, lock, index): each `cmd_<verb>` runs one
parsed command line and returns its exit code; cli.py parses and calls it, and imports this module only for these
verbs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import UserError
from ..patchset.commands import progress
from ..patchset.plural import counted


def cmd_build(a: argparse.Namespace) -> int:
    from ..patchset.bases import get_base
    from ..patchset.report import patch_report
    from .aot import AotRequest
    from .build import build

    base = get_base(a.base)
    aot = AotRequest.parse(a.aot, a.aot_modules, a.aot_python) if a.aot else None
    if aot is None and (a.aot_modules or a.aot_python):
        raise UserError("--aot-modules/--aot-python need --aot ARCHS (e.g. --aot 12.0a)")
    built, manifest = build(base, Path(a.out), python=a.python_version, progress=progress, aot=aot,
                            python_flag=a.python_version_flag)
    for w in built:
        print(f"{w.path}  sha256={w.sha256}")
    print(f"{manifest}")
    if a.report:
        print()
        print(patch_report(base))
    return 0


def cmd_install(a: argparse.Namespace) -> int:
    from ..patchset.bases import get_base
    from .install import install

    cmds = install(get_base(a.base), Path(a.dist), python_exe=a.python, no_deps=a.no_deps,
                   upstream=a.upstream, dry_run=a.dry_run, progress=progress, python_flag=a.python_flag)
    import shlex

    for cmd in cmds:  # one pip command per line, in order
        print(shlex.join(cmd))  # copy-pasteable: the kernel wheel's `name @ url` requirement has spaces
    return 0


def cmd_bundle(a: argparse.Namespace) -> int:
    from ..patchset.bases import get_base
    from .aot import parse_archs, parse_modules
    from .bundle import BundleOptions, make_bundle
    from .strip import parse_strip

    archs = parse_archs(a.jit_archs, "--jit-archs") if a.jit_archs else ()
    opts = BundleOptions(
        python=a.python_version or f"{sys.version_info[0]}.{sys.version_info[1]}", strip=parse_strip(a.strip),
        installed=Path(a.installed) if a.installed else None, deps=Path(a.deps) if a.deps else None,
        exclude=frozenset(_names(a.exclude)), jit_archs=archs,
        jit_modules=parse_modules(a.jit_modules, "--jit-modules") if archs and a.jit_modules else (),
        jit_python=a.jit_python, jit_cache=Path(a.jit_cache).expanduser() if a.jit_cache else None,
        chunk_mib=a.chunk_mib, kernel_wheel=Path(a.kernel_wheel) if a.kernel_wheel else None,
        no_kernel=a.no_kernel, index_url=a.index_url, find_links=tuple(a.find_links or ()))
    res = make_bundle(get_base(a.base), Path(a.out), opts, progress=progress)
    m = res.manifest
    kinds: dict[str, int] = {}
    for f in m["files"]:
        kinds[f["kind"]] = kinds.get(f["kind"], 0) + 1
    print(f"bundle {m['bundle_id'][:16]}: base {m['base']}, {m['python_tag']}, {counted(len(m['files']), 'file')} "
          f"({', '.join(f'{n} {k}' for k, n in kinds.items())}) in {res.out}")
    for name, size in res.chunks:
        print(f"  {(res.out / name) if name else res.out}  {size / 2**20:.2f} MiB")
    unmet = m["dependencies"]["unmet"]
    if unmet:
        print(f"note: {counted(len(unmet), 'requirement')} of the bundled wheels are neither carried nor known to "
              f"be on the target (details: dependencies.unmet in manifest.json): {', '.join(u['name'] for u in unmet)}",
              file=sys.stderr)
    first = res.out / res.chunks[0][0] if res.chunks[0][0] else res.out
    if len(res.chunks) > 1:
        print(f"install: bash <chunk>/install.sh --stage DIR --stage-only for each chunk as it arrives, then "
              f"bash <last chunk>/install.sh --stage DIR [--target SITE]; or with all chunks side by side: "
              f"bash {first}/install.sh [--target SITE]")
    else:
        print(f"install: bash {first}/install.sh [--target SITE]")
    import shlex

    from .bundle import check_line

    print("on the target, check the installer first (no file of the bundle can vouch for itself), then let it check "
          "every other file against the id (send these lines by another channel than the bundle; for another chunk "
          "the same line with its directory):")
    print(f"check first: {check_line(str(first), m)} && bash {shlex.quote(str(first))}/install.sh --expect-id "
          f"{m['bundle_id']} [--target SITE]")  # the full id: all of its sha256, not a 64-bit prefix
    return 0


def cmd_lock(a: argparse.Namespace) -> int:
    from ..patchset.bases import get_base, list_bases
    from .lock import command_for, generate, lock_problems, lock_pythons, write

    if a.python and not a.python_version:
        raise UserError(f"{a.python_flag} goes with --python-version (one interpreter resolves one Python's lock)")
    bad = 0
    for b in list_bases() if a.all else [get_base(a.base)]:
        for py in [a.python_version] if a.python_version else lock_pythons(b):
            if a.check:
                probs = lock_problems(b, py)
                for p in probs:
                    print(f"ERROR: {p}", file=sys.stderr)
                bad += len(probs)
                print(f"base {b.name} Python {py}: {'fresh' if not probs else 'NOT fresh'}")
                continue
            lock = generate(b, py, python_exe=a.python, index_url=a.index_url, progress=progress,
                            flags=(a.python_version_flag, a.python_flag))
            path = write(lock, command_for(b, py, a.index_url))
            print(f"{path}: {len(lock.entries)} hashed pins, {len(lock.outside)} outside the index, "
                  f"{len(lock.not_lockable)} not lockable, {path.stat().st_size / 1024:.1f} KiB")
    return 1 if bad else 0


def _names(spec: str | None) -> list[str]:
    from packaging.utils import canonicalize_name

    return [canonicalize_name(n.strip()) for n in (spec or "").split(",") if n.strip()]


def cmd_index(a: argparse.Namespace) -> int:
    from .index import build_index
    from .index_install import BaseInstall, install_problem, plan_install, render, write_install

    wheels = []
    for d in a.dist or ["dist"]:
        wheels += sorted(Path(d).rglob("*.whl") if a.recursive else Path(d).glob("*.whl"))
    plans: list[BaseInstall] = []

    def plan(published: list[str]) -> None:  # everything checked, requirements/ included, before files/, simple/
        plans[:] = plan_install(Path(a.dir), wheels, published)
        problem = install_problem(Path(a.dir), plans)
        if problem:
            raise UserError(f"{problem}; nothing was indexed")

    simple = build_index(wheels, Path(a.dir), url_template=a.url_template, simple_at_root=a.simple_at_root,
                         keep_first=a.keep_first, warn=lambda m: print(f"warning: {m}", file=sys.stderr),
                         built_only=a.url_template is None,  # files/ publishes only wheels of the build manifest
                         before_write=plan if a.url_template is None else None)
    print(f"# index: {simple.resolve()}")
    if a.url_template is not None:  # the wheels are linked elsewhere, not copied: no local files to pin to
        print("# the wheels are linked by --url-template: install them from where they are published")
        return 0
    write_install(Path(a.dir), plans)
    print(render(plans))
    return 0
