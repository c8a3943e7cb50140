"""sglang-blackwell: one subcommand per job (see README)."""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from . import __version__
from .errors import UserError
from .patchset.plural import counted
from .paths import write_atomic

DEBUG_ENV = "SGLANG_BLACKWELL_DEBUG"  # =1: an unexpected exception prints its traceback instead of a crash file
EXIT_INTERNAL = 70  # EX_SOFTWARE: a bug of ours, not the user's input


class Parser(argparse.ArgumentParser):
    """argparse with its usage errors in one line (the flag and what is wrong with it), exit 2."""

    def error(self, message: str):  # type: ignore[override]
        print(f"{self.prog}: error: {message} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(2)


def python_version_arg(text: str) -> str:
    """type= of --python-version: a CPython MAJOR.MINOR."""
    from .patchset.bases import python_version

    try:
        major, minor = python_version(text, "")
    except UserError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a CPython MAJOR.MINOR, e.g. 3.12") from None
    return f"{major}.{minor}"


# One meaning per flag name, pip's: `--python PATH` is an interpreter (nccl, doctor, image verify, install, lock),
# `--python-version X.Y` a CPython version (build, bundle, lock). The old spellings keep working, each with one
# deprecation line on stderr: `--python X.Y` where a version is meant, and `--python-exe PATH`. main() prints the
# lines once the command has run (a usage error stays the one line that names the bad input).
def _deprecated(parser: argparse.ArgumentParser, namespace: argparse.Namespace, old: str, new: str) -> None:
    namespace.deprecations = [*getattr(namespace, "deprecations", []),
                              f"{parser.prog}: warning: {old} is deprecated here: use {new}"]


class PythonOption(argparse.Action):
    """`--python VALUE`. interpreter=True: VALUE is an interpreter (dest `python`), unless versions=True and it is
    a CPython MAJOR.MINOR: then it is the deprecated spelling of --python-version (dest `python_version`). On a
    command that takes no interpreter (build, bundle) only that old spelling exists."""

    def __init__(self, option_strings, dest, *, interpreter: bool, versions: bool, **kw):
        self.interpreter, self.versions = interpreter, versions
        super().__init__(option_strings, dest, **kw)

    def __call__(self, parser, namespace, values, option_string=None):
        from .patchset.bases import PYTHON_VERSION_RE

        text = str(values)
        if self.versions and PYTHON_VERSION_RE.match(text.strip()):
            version = python_version_arg(text)
            _deprecated(parser, namespace, f"{option_string} {text}", f"--python-version {version}")
            namespace.python_version, namespace.python_version_flag = version, option_string
            return
        if not self.interpreter:
            raise argparse.ArgumentError(self, f"{text!r} is not a CPython MAJOR.MINOR, e.g. 3.12")
        try:
            namespace.python = path_arg(text)
        except argparse.ArgumentTypeError as e:
            raise argparse.ArgumentError(self, str(e)) from None
        namespace.python_flag = option_string


class RenamedInterpreter(argparse.Action):
    """`--python-exe PATH`: the old name of `--python PATH` (install, lock)."""

    def __call__(self, parser, namespace, values, option_string=None):
        try:
            namespace.python = path_arg(str(values))
        except argparse.ArgumentTypeError as e:
            raise argparse.ArgumentError(self, str(e)) from None
        _deprecated(parser, namespace, f"{option_string} {values}", f"--python {values}")
        namespace.python_flag = option_string


def add_python_version(p: argparse.ArgumentParser, help: str, *, interpreter: str | None = None) -> None:
    """--python-version X.Y, its old spelling --python X.Y, and (interpreter: the help of) --python PATH with
    its old name --python-exe PATH."""
    p.add_argument("--python-version", type=python_version_arg, metavar="X.Y", help=help)
    p.add_argument("--python", action=PythonOption, interpreter=interpreter is not None, versions=True,
                   dest="python", metavar="PATH", help=interpreter or argparse.SUPPRESS)
    if interpreter is not None:
        p.add_argument("--python-exe", action=RenamedInterpreter, dest="python", help=argparse.SUPPRESS)
    p.set_defaults(python_version_flag="--python-version", python_flag="--python")


def add_interpreter(p: argparse.ArgumentParser, help: str, *, renamed: bool = False, **kw) -> None:
    """--python PATH (an interpreter); renamed: also its old name --python-exe PATH."""
    p.add_argument("--python", action=PythonOption, interpreter=True, versions=False, metavar="PATH", help=help,
                   **kw)
    if renamed:
        p.add_argument("--python-exe", action=RenamedInterpreter, dest="python", help=argparse.SUPPRESS)
    p.set_defaults(python_flag="--python")


def positive_float_arg(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = math.nan
    if not math.isfinite(v) or v <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number")
    return v


NAME_MAX, PATH_MAX = 255, 4095  # Linux: bytes per path component, per path


def path_arg(text: str) -> str:
    """type= of arguments that name a file or directory: an empty string names nothing (and would mean '.'), and a
    path the kernel refuses to look up (ENAMETOOLONG) is refused here, by name."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path names no file")
    raw = os.fsencode(text)
    if len(raw) > PATH_MAX or any(len(part) > NAME_MAX for part in raw.split(b"/")):
        raise argparse.ArgumentTypeError(f"{text[:40]}...: longer than a path can be ({NAME_MAX} bytes a component, "
                                         f"{PATH_MAX} in all)")
    return text


def _progress(msg: str) -> None:
    print(f"  {msg}", file=sys.stderr, flush=True)


def cmd_build(a: argparse.Namespace) -> int:
    from .artifacts.aot import AotRequest
    from .artifacts.build import build
    from .patchset.bases import get_base
    from .patchset.report import patch_report

    base = get_base(a.base)
    aot = AotRequest.parse(a.aot, a.aot_modules, a.aot_python) if a.aot else None
    if aot is None and (a.aot_modules or a.aot_python):
        raise UserError("--aot-modules/--aot-python need --aot ARCHS (e.g. --aot 12.0a)")
    built, manifest = build(base, Path(a.out), python=a.python_version, progress=_progress, aot=aot,
                            python_flag=a.python_version_flag)
    for w in built:
        print(f"{w.path}  sha256={w.sha256}")
    print(f"{manifest}")
    if a.report:
        print()
        print(patch_report(base))
    return 0


def cmd_check(a: argparse.Namespace) -> int:
    from .patchset.bases import get_base, list_bases
    from .patchset.check import check_base

    if a.upstream:
        return _check_upstream(a)
    if a.json:
        raise UserError("--json goes with --upstream (the drift report)")
    bases = list_bases() if a.all else [get_base(a.base)]
    bad = 0
    for b in bases:
        res = check_base(b, progress=_progress)
        for ln in res.lines:
            print(ln)
        for p in res.problems:
            print(f"ERROR: {p}", file=sys.stderr)
        bad += len(res.problems)
        print(f"base {b.name}: {'OK' if res.ok else counted(len(res.problems), 'problem')}")
    return 1 if bad else 0


def _check_upstream(a: argparse.Namespace) -> int:
    """The drift report: exit 0 when every patch applies to the newest releases, 1 when any does not."""
    import json

    from .patchset.bases import get_base, list_bases
    from .patchset.drift import drift_report, format_report, newest_base

    if a.all:
        raise UserError("--upstream tries one base's series (the newest by default, or --base): drop --all")
    base = get_base(a.base) if a.base else newest_base(list_bases())
    report = drift_report(base, a.upstream, progress=_progress)
    print(json.dumps(report, indent=1) if a.json else format_report(report))
    return 1 if report["drift"] else 0


def cmd_checkout(a: argparse.Namespace) -> int:
    from .patchset.bases import get_base
    from .patchset.queue import checkout

    n = checkout(get_base(a.base), a.package, Path(a.dir))
    print(f"{a.dir}: upstream + {n} patch commits (tag 'upstream' marks the pinned release). "
          f"Edit, commit (one commit per patch), then: sglang-blackwell export {a.dir}")
    return 0


def cmd_export(a: argparse.Namespace) -> int:
    from .patchset.queue import export

    names = export(Path(a.dir), Path(a.to) if a.to else None)
    for n in names:
        print(n)
    return 0


def cmd_install(a: argparse.Namespace) -> int:
    from .artifacts.install import install
    from .patchset.bases import get_base

    cmds = install(get_base(a.base), Path(a.dist), python_exe=a.python, no_deps=a.no_deps,
                   upstream=a.upstream, dry_run=a.dry_run, progress=_progress, python_flag=a.python_flag)
    import shlex

    for cmd in cmds:  # one pip command per line, in order
        print(shlex.join(cmd))  # copy-pasteable: the kernel wheel's `name @ url` requirement has spaces
    return 0


def cmd_bundle(a: argparse.Namespace) -> int:
    from .artifacts.aot import parse_archs, parse_modules
    from .artifacts.bundle import BundleOptions, make_bundle
    from .artifacts.strip import parse_strip
    from .patchset.bases import get_base

    archs = parse_archs(a.jit_archs, "--jit-archs") if a.jit_archs else ()
    opts = BundleOptions(
        python=a.python_version or f"{sys.version_info[0]}.{sys.version_info[1]}", strip=parse_strip(a.strip),
        installed=Path(a.installed) if a.installed else None, deps=Path(a.deps) if a.deps else None,
        exclude=frozenset(_names(a.exclude)), jit_archs=archs,
        jit_modules=parse_modules(a.jit_modules, "--jit-modules") if archs and a.jit_modules else (),
        jit_python=a.jit_python, jit_cache=Path(a.jit_cache).expanduser() if a.jit_cache else None,
        chunk_mib=a.chunk_mib, kernel_wheel=Path(a.kernel_wheel) if a.kernel_wheel else None,
        no_kernel=a.no_kernel, index_url=a.index_url, find_links=tuple(a.find_links or ()))
    res = make_bundle(get_base(a.base), Path(a.out), opts, progress=_progress)
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

    from .artifacts.bundle import check_line

    print("on the target, check the installer first (no file of the bundle can vouch for itself), then let it check "
          "every other file against the id (send these lines by another channel than the bundle; for another chunk "
          "the same line with its directory):")
    print(f"check first: {check_line(str(first), m)} && bash {shlex.quote(str(first))}/install.sh --expect-id "
          f"{m['bundle_id']} [--target SITE]")  # the full id: all of its sha256, not a 64-bit prefix
    return 0


def cmd_lock(a: argparse.Namespace) -> int:
    from .artifacts.lock import command_for, generate, lock_problems, lock_pythons, write
    from .patchset.bases import get_base, list_bases

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
            lock = generate(b, py, python_exe=a.python, index_url=a.index_url, progress=_progress,
                            flags=(a.python_version_flag, a.python_flag))
            path = write(lock, command_for(b, py, a.index_url))
            print(f"{path}: {len(lock.entries)} hashed pins, {len(lock.outside)} outside the index, "
                  f"{len(lock.not_lockable)} not lockable, {path.stat().st_size / 1024:.1f} KiB")
    return 1 if bad else 0


def _names(spec: str | None) -> list[str]:
    from packaging.utils import canonicalize_name

    return [canonicalize_name(n.strip()) for n in (spec or "").split(",") if n.strip()]


def cmd_index(a: argparse.Namespace) -> int:
    from .artifacts.index import build_index

    wheels = []
    for d in a.dist or ["dist"]:
        wheels += sorted(Path(d).rglob("*.whl") if a.recursive else Path(d).glob("*.whl"))
    simple = build_index(wheels, Path(a.dir), url_template=a.url_template, simple_at_root=a.simple_at_root,
                         keep_first=a.keep_first, warn=lambda m: print(f"warning: {m}", file=sys.stderr),
                         built_only=a.url_template is None)  # files/ publishes only wheels of the build manifest
    print(f"# index: {simple.resolve()}")
    if a.url_template is not None:  # the wheels are linked elsewhere, not copied: no local files to pin to
        print("# the wheels are linked by --url-template: install them from where they are published")
        return 0
    from .artifacts.index_install import write_install_commands

    print(write_install_commands(Path(a.dir), wheels))
    return 0


def cmd_report(a: argparse.Namespace) -> int:
    from .patchset.bases import get_base, list_bases
    from .patchset.report import patch_report

    if a.table or a.update:
        from .patchset.patch_table import markdown_table, update_block

        table = markdown_table(list_bases())
        if a.update:
            changed = update_block(Path(a.update), table)
            print(f"{a.update}: patch table {'updated' if changed else 'already current'}")
        else:
            print(table)
        return 0
    print(patch_report(get_base(a.base)))
    return 0


def cmd_nccl(a: argparse.Namespace) -> int:
    import json

    from .box.nccl import Profile, format_state, load_profiles, nccl_conf, resolve, user_environ
    from .box.nccl_hook import install, probe, state, uninstall
    from .box.topology import detect

    profiles = load_profiles(a.profiles)
    if a.action == "uninstall":
        print(uninstall(probe(a.python, user_environ()), a.nccl_conf).message)
        return 0
    if a.action == "install":
        res = resolve(a.profile or "auto", detect(cuda=False), profiles)
        change = install(probe(a.python, user_environ()), res, a.hook, nccl_conf=a.nccl_conf)
        print(change.message)
        if not res.profile.fits_class(res.topology_class):
            print(f"warning: {res.reason}", file=sys.stderr)
        if change.env:
            print("a fresh interpreter of that environment now gets:")
        for r in change.env:
            src = ".pth hook" if r.source == "pth" else r.source
            print(f"  {r.key}={r.value or '-'}  ({src}{': ' + r.note if r.note else ''})")
        if change.conf_env:
            print(f"an NCCL program started with NCCL_CONF_FILE={change.nccl_conf} gets from that file:")
        for key, value, where in change.conf_env:
            print(f"  {key}={value or '-'}  ({where})")
        for n in change.notes:
            print(n)
        for p in change.problems:
            print(f"PROBLEM: {p}", file=sys.stderr)
        return 1 if change.problems else 0
    if a.format == "nccl-conf":
        if a.profile:
            res = resolve(a.profile, detect(cuda=False), profiles)
            print(nccl_conf(res.profile, res.requested), end="")
            return 0
        act = state(a.python, profiles=profiles)["active"]
        if act is None:
            raise UserError("no managed block installed here: pass --profile P (or auto) to choose one")
        recorded = Profile(act["profile"], f"as recorded in {act['path']}", (), (), "", act["env"])
        print(nccl_conf(recorded, act["requested"]), end="")
        return 0
    st = state(a.python, profiles=profiles, requested=a.profile)
    print(json.dumps(st, indent=1) if a.format == "json" else format_state(st))
    return 1 if st["problems"] else 0  # each problem is a PROBLEM line (text) / an entry of "problems" (json)


def cmd_doctor(a: argparse.Namespace) -> int:
    from .box.doctor import check_arguments, format_report, run_doctor, to_receipt
    from .receipts import write_receipt

    check_arguments(tp=a.tp, python=a.python, out=a.out)
    report = run_doctor(python=a.python, tp=a.tp, progress=_progress if not a.json else None)
    receipt = to_receipt(report)
    if a.out:
        print(f"wrote {write_receipt(receipt, Path(a.out))}", file=sys.stderr)
    if a.json:
        import json

        print(json.dumps(receipt, indent=1, default=str))
    else:
        print(format_report(report))
    return 1 if report.failed else 0


def cmd_image(a: argparse.Namespace) -> int:
    from .release import image

    if a.action == "facts":
        print(image.format_facts(image.facts(), a.get, a.github_output), end="")
        return 0
    if a.action == "check":
        from .release.pins import check_pins, check_release

        root = image.checkout_root()
        rep = check_release(root, a.tag) if a.release else check_pins(root)
        for n in rep.notes:
            print(f"note: {n}")
        for p in rep.problems:
            print(f"ERROR: {p}", file=sys.stderr)
        print(f"image check{' --release' if a.release else ''}: "
              f"{'OK' if rep.ok else counted(len(rep.problems), 'problem')}")
        return 0 if rep.ok else 1
    from .patchset.bases import get_base

    base = get_base(a.base)
    if a.action == "labels":
        print(image.format_labels(image.image_labels(base, Path(a.dist)), a.format), end="")
        return 0
    from .artifacts.aot import parse_archs

    if not a.python:
        raise UserError("image verify: --python (the environment's interpreter) is required")
    probs = image.verify(base, Path(a.dist), a.python, nccl_profile=a.nccl_profile,
                         aot_archs=parse_archs(a.aot) if a.aot else None, cuda_wheels=not a.skip_cuda_wheels)
    for p in probs:
        print(f"PROBLEM: {p}", file=sys.stderr)
    print(f"image verify {a.python}: {'OK' if not probs else counted(len(probs), 'problem')} "
          f"(base {base.name}, manifest {Path(a.dist)})")
    return 1 if probs else 0


def cmd_label(a: argparse.Namespace) -> int:
    from .patchset.bases import get_base, list_bases
    from .patchset.labellock import lock_problems, write_lock

    bases = list_bases() if a.all else [get_base(a.base)]
    bad = 0
    for b in bases:
        if a.action == "lock":
            print(write_lock(b))
        probs = lock_problems(b)
        for p in probs:
            print(f"ERROR: {p}", file=sys.stderr)
        bad += len(probs)
        if a.action == "status":
            print(f"base {b.name}: +{b.local_label} {'locked' if not probs else 'NOT locked'}")
    return 1 if bad else 0


def cmd_changelog(a: argparse.Namespace) -> int:
    from .patchset.changelog import WORKTREE, changelog_bases, changelog_refs, previous_tag
    from .release.image import checkout_root

    root = checkout_root()
    if a.bases:
        text = changelog_bases(root, a.bases[0], a.bases[1], a.to or WORKTREE)
    else:
        old = a.from_ref or previous_tag(root, a.to or "HEAD")  # None: no earlier tag, a first release
        text = changelog_refs(root, old, a.to or WORKTREE)
    if a.out:
        out = Path(a.out)
        write_atomic(out, text)
        print(f"wrote {out}", file=sys.stderr)
    else:
        print(text, end="")
    return 0


def cmd_bench(a: argparse.Namespace) -> int:
    return a.bench_fn(a)


def cmd_serve(a: argparse.Namespace) -> int:
    from .box.serve import run

    args = a.sglang_args[1:] if a.sglang_args[:1] == ["--"] else a.sglang_args
    return run(args, table=a.table, profile=a.profile, dry_run=a.dry_run)


def cmd_qualify(a: argparse.Namespace) -> int:
    from .qualify.run import run

    return run(a)


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The CLI's parser. Every verb is listed with its help; the verbs whose arguments come from their own
    modules (qualify, bench and each benchmark) get them only where argv names that verb, so a command imports
    only what it needs (argv None: every verb's, for a parser that parses anything)."""
    words = None if argv is None else [w for w in argv if not w.startswith("-")]  # the verb, then bench's name

    def parsed(verb: str) -> bool:  # no option of the top-level parser takes a value: the first word is the verb
        return words is None or words[:1] == [verb]

    ap = Parser(prog="sglang-blackwell", description=__doc__)
    ap.add_argument("--version", action="version", version=f"sglang-blackwell {__version__}")
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    p = sub.add_parser("build", help="patched wheels + build manifest for a base")
    p.add_argument("--base", help="base line (default: the one base.toml marked default)")
    p.add_argument("--out", default="dist", type=path_arg, help="output directory (default: dist)")
    add_python_version(p, "only wheels for this CPython version, e.g. 3.12 (default: all pinned)")
    p.add_argument("--report", action="store_true", help="print the patch report afterwards")
    p.add_argument("--aot", metavar="ARCHS",
                   help="also prebuild FlashInfer's fused all-reduce modules into the flashinfer wheel's AOT slots "
                        "for these archs, e.g. 12.0a or 12.0a,9.0a (nvcc, minutes per module, cached); a module "
                        "built only for 12.0a does not run on other GPUs")
    p.add_argument("--aot-modules", metavar="NAMES", help="with --aot: which modules (default: trtllm_comm,norm)")
    p.add_argument("--aot-python", metavar="PATH",
                   help="with --aot: interpreter with torch, apache-tvm-ffi and ninja to run FlashInfer's JIT "
                        "specs (default: this one)")
    p.set_defaults(fn=cmd_build)

    p = sub.add_parser("check", help="series apply with zero fuzz, headers valid, series and files agree; "
                       "--upstream: drift report against upstream's newest releases",
                       description="Without --upstream: every series applies to its pinned upstream with zero "
                       "fuzz, headers are valid, labels are locked (exit 1 on any problem). With --upstream "
                       "latest: asks PyPI for the newest sglang / flashinfer-python releases and tries the newest "
                       "base's series on them; per patch: applies, needs refresh, conflicts (file + hunk), already "
                       "upstream, partly upstream (exit 1 on drift, 2 when PyPI cannot be reached).")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--base")
    g.add_argument("--all", action="store_true", help="every base")
    p.add_argument("--upstream", metavar="SPEC",
                   help="'latest', or NAME==VERSION[,NAME==VERSION] (e.g. sglang==0.5.24): the releases to try "
                        "the series on (default base: the newest)")
    p.add_argument("--json", action="store_true", help="with --upstream: print the report as JSON")
    p.set_defaults(fn=cmd_check)

    p = sub.add_parser("checkout", help="upstream tree as a git repo with one commit per patch")
    p.add_argument("--base")
    p.add_argument("--package", required=True, help="sglang or flashinfer")
    p.add_argument("dir", type=path_arg)
    p.set_defaults(fn=cmd_checkout)

    p = sub.add_parser("export", help="write a checkout's commits back as the series")
    p.add_argument("dir", type=path_arg)
    p.add_argument("--to", type=path_arg, help="series directory (default: where the checkout came from)")
    p.set_defaults(fn=cmd_export)

    p = sub.add_parser("install", help="pip install the patched stack (or --upstream to roll back)")
    p.add_argument("--base")
    p.add_argument("--dist", default="dist", type=path_arg)
    add_interpreter(p, "interpreter whose environment to install into (default: this one)", renamed=True,
                    default=sys.executable)
    p.add_argument("--upstream", action="store_true", help="reinstall the unpatched pinned wheels (rollback)")
    p.add_argument("--no-deps", action="store_true", help="only our wheels, no dependencies or runtime pins")
    p.add_argument("--dry-run", action="store_true", help="print the pip commands, write and change nothing")
    p.set_defaults(fn=cmd_install)

    p = sub.add_parser("bundle", help="offline wheelhouse: patched wheels, kernel, missing deps, manifest, install.sh",
                       description="Write everything a GPU machine without network needs to install the patched "
                       "stack on top of an existing torch: the patched wheels, the kernel wheel (optionally "
                       "stripped), the dependency wheels the target lacks, optional prebuilt FlashInfer JIT "
                       "modules, a manifest with the sha256 of every file and install.sh, which verifies it "
                       "before installing. See benchmark/lab/README.md.")
    p.add_argument("--base")
    add_python_version(p, "target CPython MAJOR.MINOR (default: this interpreter's)")
    p.add_argument("--out", default="bundle", type=path_arg,
                   help="bundle directory, replaced as a whole (default: bundle)")
    p.add_argument("--strip", help="kernel wheel parts to remove, e.g. fa3,sm100,flashmla (kernel_parts.toml)")
    p.add_argument("--installed", type=path_arg,
                   help="the target's `pip list --format=freeze`: carry only what it lacks")
    p.add_argument("--deps", type=path_arg, help="pinned dependency list (name==version lines), e.g. "
                   "benchmark/lab/bundle-deps-0.5.14-py312.txt; without it (and with --installed) the "
                   "dependencies are resolved automatically from Requires-Dist")
    p.add_argument("--exclude", help="distributions never carried, comma-separated")
    p.add_argument("--jit-archs", help="prebuild FlashInfer JIT modules for these archs, e.g. 9.0a (needs nvcc)")
    p.add_argument("--jit-modules", help="which (default: trtllm_comm,norm)")
    p.add_argument("--jit-python", help="interpreter of a venv with the target's torch + FlashInfer's deps to "
                   "build them with")
    p.add_argument("--jit-cache", help="import prebuilt modules from DIR/<name>/<name>.so (SASS checked, sources "
                   "unchecked: marked imported)")
    p.add_argument("--chunk-mib", type=positive_float_arg,
                   help="split into chunk directories c1, c2, ... of at most N MiB")
    p.add_argument("--kernel-wheel", type=path_arg,
                   help="use this kernel wheel file instead of fetching the base's pin")
    p.add_argument("--no-kernel", action="store_true", help="carry no kernel wheel")
    p.add_argument("--index-url", help="package index for dependency downloads (pip --index-url)")
    p.add_argument("--find-links", action="append", help="pip --find-links for dependency downloads (repeatable)")
    p.set_defaults(fn=cmd_bundle)

    p = sub.add_parser("lock", help="hashed dependency locks per base x Python (patches/<base>/locks/py3XY.txt)",
                       description="Resolve everything the package index serves that a base's patched wheels need "
                       "on CPython X.Y / Linux x86_64 with pip (run by that interpreter), and write it in pip's "
                       "--require-hashes format, which install and bundle use. --check: no network, exit 1 when a "
                       "lock is missing or stale against base.toml / lock.toml.")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--base")
    g.add_argument("--all", action="store_true", help="every base")
    add_python_version(p, "one CPython MAJOR.MINOR (default: every Python the base's wheels support)",
                       interpreter="with --python-version: the interpreter pip resolves in (default: pythonX.Y on "
                                   "PATH)")
    p.add_argument("--index-url", default="https://pypi.org/simple",
                   help="the index to resolve against (default: PyPI); this machine's pip configuration is ignored")
    p.add_argument("--check", action="store_true", help="only say which locks are missing or stale (no network)")
    p.set_defaults(fn=cmd_lock)

    p = sub.add_parser("index", help="PEP 503 simple index of the built wheels")
    p.add_argument("dir", type=path_arg)
    p.add_argument("--dist", action="append", type=path_arg,
                   help="directory of wheels (default: dist); repeat for several, in order of precedence")
    p.add_argument("--recursive", action="store_true", help="also wheels in subdirectories of --dist")
    p.add_argument("--keep-first", action="store_true",
                   help="same file name, other bytes: publish the first one listed instead of failing")
    p.add_argument("--url-template", help="link wheels at this URL instead of copying them: {file} = wheel name, "
                                          "{dir} = its directory's name (e.g. a release tag)")
    p.add_argument("--simple-at-root", action="store_true",
                   help="DIR itself is the index root (pip --extra-index-url DIR), not DIR/simple")
    p.set_defaults(fn=cmd_index)

    p = sub.add_parser("nccl", help="NCCL tuning applied at every interpreter start of an environment",
                       description="show: the NCCL variables a fresh interpreter gets and where each comes "
                       "from; install: write the managed block (sitecustomize.py, or a .pth hook where a "
                       "system sitecustomize shadows it); uninstall: restore the files byte for byte")
    p.add_argument("action", choices=["show", "install", "uninstall"])
    p.add_argument("--profile", help="profile name or 'auto' (install default: auto, resolved and recorded)")
    add_interpreter(p, "interpreter of the target environment (default: this one)")
    p.add_argument("--hook", default="auto", choices=["auto", "sitecustomize", "pth"],
                   help="install: where the block goes (default: sitecustomize unless shadowed, then pth)")
    p.add_argument("--format", default="text", choices=["text", "json", "nccl-conf"],
                   help="show: output format; nccl-conf prints the profile as an NCCL_CONF_FILE")
    p.add_argument("--profiles", type=path_arg, help="profiles file (default: the packaged nccl_profiles.toml)")
    p.add_argument("--nccl-conf", metavar="PATH", type=path_arg,
                   help="install: also write the profile into this NCCL config file as a managed block, for NCCL "
                        "programs not started by Python (NCCL reads it where NCCL_CONF_FILE names it; default: "
                        "the file an earlier install wrote); uninstall: remove the block from this file (default: "
                        "from every file the startup block names or NCCL reads)")
    p.set_defaults(fn=cmd_nccl)

    p = sub.add_parser("doctor", help="what works on this box and why not, each failing item with its fix")
    p.add_argument("--json", action="store_true", help="print the doctor receipt (JSON) instead of text")
    p.add_argument("--out", help="also write the receipt to this file (benchmark/results/doctor-<box>.json)")
    add_interpreter(p, "interpreter whose NCCL startup hook to inspect (default: this one)")
    p.add_argument("--tp", type=int, help="tensor-parallel size for the all-reduce plan (default: GPU count)")
    p.set_defaults(fn=cmd_doctor)

    p = sub.add_parser("serve", help="launch sglang with the tuned all-reduce knobs and NCCL profile",
                       description="sglang-blackwell serve [--table T] [--profile P] [--dry-run] -- <sglang args>")
    p.add_argument("--table", help="all-reduce dispatch table (default: the one `bench allreduce --tune` wrote)")
    p.add_argument("--profile", help="NCCL profile (default: the table's, else auto for this topology)")
    p.add_argument("--dry-run", action="store_true", help="print the plan and the command, start nothing")
    p.add_argument("sglang_args", nargs=argparse.REMAINDER, help="-- then python -m sglang.launch_server arguments")
    p.set_defaults(fn=cmd_serve)

    p = sub.add_parser("image", help="serving image and workflow support: facts, drift check, labels, verify",
                       description="facts: the default base, bases and pinned CUDA image (for workflows); check: no "
                       "drift between base.toml and docker/ + .github/workflows (--release: also a digest-pinned "
                       "CUDA image and locked labels); labels: OCI labels from a build manifest; verify: an "
                       "installed environment matches the build manifest")
    p.add_argument("action", choices=["facts", "check", "labels", "verify"])
    p.add_argument("--base", help="labels/verify: base line (default: the default base)")
    p.add_argument("--dist", default="dist", help="labels/verify: where the build manifest is (default: dist)")
    p.add_argument("--get", metavar="KEY", help="facts: print one fact (default_base, bases, cuda_image, ...)")
    p.add_argument("--github-output", action="store_true", help="facts: key=value lines for $GITHUB_OUTPUT")
    p.add_argument("--release", action="store_true", help="check: what a release needs as well")
    p.add_argument("--tag", help="check --release: the git tag being released (must be v<package version>)")
    p.add_argument("--format", default="lines", choices=["lines", "json"], help="labels: key=value lines or JSON")
    add_interpreter(p, "verify: interpreter of the environment to verify")
    p.add_argument("--nccl-profile", help="verify: the profile the NCCL startup block must apply")
    p.add_argument("--aot", metavar="ARCHS", help="verify: FlashInfer AOT modules must exist for these archs")
    p.add_argument("--skip-cuda-wheels", action="store_true",
                   help="verify: do not require the CUDA runtime wheels (torch, kernel): CPU test mode")
    p.set_defaults(fn=cmd_image)

    p = sub.add_parser("label", help="the local version label rule: LABEL.lock per base (lock / status)")
    p.add_argument("action", choices=["lock", "status"])
    g = p.add_mutually_exclusive_group()
    g.add_argument("--base")
    g.add_argument("--all", action="store_true", help="every base")
    p.set_defaults(fn=cmd_label)

    p = sub.add_parser("changelog", help="patch series changes between git refs or between base lines (Markdown)")
    p.add_argument("--from", dest="from_ref", metavar="REF",
                   help="old git ref (default: the tag before --to; none: everything is new)")
    p.add_argument("--to", metavar="REF", help="new git ref (default: the working tree)")
    p.add_argument("--bases", nargs=2, metavar=("OLD", "NEW"), help="compare two base lines instead of refs")
    p.add_argument("--out", help="write to this file instead of stdout")
    p.set_defaults(fn=cmd_changelog)

    p = sub.add_parser("report", help="print the patch report of a base, or the README's patch table")
    p.add_argument("--base")
    p.add_argument("--table", action="store_true",
                   help="the patch table of every base (carried patch or 'absorbed since'), as markdown")
    p.add_argument("--update", metavar="FILE", help="rewrite the patch-table block in FILE (README.md)")
    p.set_defaults(fn=cmd_report)

    p = sub.add_parser("qualify", help="doctor, GPU tests, bench allreduce (+ bench eagle3): one receipt to send")
    if parsed("qualify"):
        from .qualify.run import add_arguments as add_qualify_arguments

        add_qualify_arguments(p)
    p.set_defaults(fn=cmd_qualify)

    p = sub.add_parser("bench", help="regression benchmarks with JSON receipts (see benchmark/README.md)")
    if parsed("bench"):
        from .bench import add_parsers as add_bench_parsers

        add_bench_parsers(p.add_subparsers(dest="bench", required=True, metavar="BENCHMARK"),
                          None if words is None else words[1:2])
    p.set_defaults(fn=cmd_bench)
    return ap


def main(argv: list[str] | None = None) -> int:
    a = build_parser(sys.argv[1:] if argv is None else argv).parse_args(argv)
    try:
        rc = a.fn(a)
        for line in getattr(a, "deprecations", []):
            print(line, file=sys.stderr)
        return rc
    except UserError as e:
        print(f"sglang-blackwell {a.cmd}: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print(f"sglang-blackwell {a.cmd}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # the last resort: every known bad input is a UserError where it happens
        if os.environ.get(DEBUG_ENV) == "1":
            raise
        return unexpected(a.cmd, e, sys.argv if argv is None else ["sglang-blackwell", *argv])


def unexpected(cmd: str, e: BaseException, argv: list[str]) -> int:
    """An exception no code path turned into a UserError: one line that names what was at fault (the file, for a
    filesystem error) and where it was raised, and the full report for a bug report in a file. A filesystem error
    naming its file is the user's machine (exit 2); anything else is a bug of ours (exit 70)."""
    import traceback

    frames = traceback.extract_tb(e.__traceback__)
    at = f"{Path(frames[-1].filename).name}:{frames[-1].lineno} in {frames[-1].name}" if frames else "?"
    report = _crash_report(cmd, e, argv)
    if isinstance(e, OSError) and e.filename:
        what = f"{e.filename}: {e.strerror or e}"
        if e.filename2:
            what += f" ({e.filename2})"
        print(f"sglang-blackwell {cmd}: error: {what} (unexpected {type(e).__name__} at {at}; details: {report})",
              file=sys.stderr)
        return 2
    print(f"sglang-blackwell {cmd}: internal error: {type(e).__name__}: {_one_line(e)} (unexpected "
          f"{type(e).__name__} at {at}); this is a bug of "
          f"sglang-blackwell {__version__}: please report it with {report}"
          + (f" ({DEBUG_ENV}=1 prints the traceback)" if report.startswith("/") else ""), file=sys.stderr)
    return EXIT_INTERNAL


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text if len(text) <= 300 else text[:297] + "..."


def _crash_report(cmd: str, e: BaseException, argv: list[str]) -> str:
    """Write what a bug report needs (version, command line, Python, platform, traceback) to a file of its own;
    its path, or where it could not be written."""
    import platform
    import tempfile
    import time
    import traceback

    text = (f"sglang-blackwell {__version__} crash report\ncommand: {' '.join(argv)}\n"
            f"python: {sys.version.split()[0]} ({sys.executable})\nplatform: {platform.platform()}\n"
            f"time: {time.strftime('%Y-%m-%dT%H:%M:%S%z')}\n\n"
            + "".join(traceback.format_exception(type(e), e, e.__traceback__)))
    try:
        fd, path = tempfile.mkstemp(prefix=f"sglang-blackwell-{cmd}-crash-", suffix=".txt")
        with os.fdopen(fd, "w") as f:
            f.write(text)
    except OSError as err:
        return f"no report file ({err.strerror}): rerun with {DEBUG_ENV}=1 for the traceback"
    return path


if __name__ == "__main__":
    sys.exit(main())
