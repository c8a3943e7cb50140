"""sglang-blackwell: one subcommand per job (see README)."""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from . import __version__, envswitch
from .errors import UserError
from .paths import path_arg

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


# Each verb's handler lives next to what it drives, as cmd_<verb> in <folder>/commands.py; a loader per folder
# imports that module when one of its verbs runs, so parsing (and --help) loads none of them.
def _patchset() -> ModuleType:
    from .patchset import commands

    return commands


def _artifacts() -> ModuleType:
    from .artifacts import commands

    return commands


def _box() -> ModuleType:
    from .box import commands

    return commands


def _release() -> ModuleType:
    from .release import commands

    return commands


def cmd_bench(a: argparse.Namespace) -> int:
    return a.bench_fn(a)


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

    from .httpclient import Limits  # the client's default deadlines, in the help of the verbs that read an index

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
    p.set_defaults(fn=lambda a: _artifacts().cmd_build(a))

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
    p.add_argument("--request-timeouts", metavar="FIRST,IDLE,TOTAL",
                   help="with --upstream: deadlines in seconds of every read of the index (its first byte, the "
                        "longest wait between two bytes, the whole answer) and TOTAL of every download (default "
                        f"{Limits().text()}, as bench eagle3)")
    p.set_defaults(fn=lambda a: _patchset().cmd_check(a))

    p = sub.add_parser("checkout", help="upstream tree as a git repo with one commit per patch")
    p.add_argument("--base")
    p.add_argument("--package", required=True, help="sglang or flashinfer")
    p.add_argument("dir", type=path_arg)
    p.set_defaults(fn=lambda a: _patchset().cmd_checkout(a))

    p = sub.add_parser("export", help="write a checkout's commits back as the series")
    p.add_argument("dir", type=path_arg)
    p.add_argument("--to", type=path_arg, help="series directory (default: where the checkout came from)")
    p.set_defaults(fn=lambda a: _patchset().cmd_export(a))

    p = sub.add_parser("install", help="pip install the patched stack (or --upstream to roll back)")
    p.add_argument("--base")
    p.add_argument("--dist", default="dist", type=path_arg)
    add_interpreter(p, "interpreter whose environment to install into (default: this one)", renamed=True,
                    default=sys.executable)
    p.add_argument("--upstream", action="store_true", help="reinstall the unpatched pinned wheels (rollback)")
    p.add_argument("--no-deps", action="store_true", help="only our wheels, no dependencies or runtime pins")
    p.add_argument("--dry-run", action="store_true", help="print the pip commands, write and change nothing")
    p.set_defaults(fn=lambda a: _artifacts().cmd_install(a))

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
    p.set_defaults(fn=lambda a: _artifacts().cmd_bundle(a))

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
    p.set_defaults(fn=lambda a: _artifacts().cmd_lock(a))

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
    p.set_defaults(fn=lambda a: _artifacts().cmd_index(a))

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
    p.set_defaults(fn=lambda a: _box().cmd_nccl(a))

    p = sub.add_parser("doctor", help="what works on this box and why not, each failing item with its fix")
    p.add_argument("--json", action="store_true", help="print the doctor receipt (JSON) instead of text")
    p.add_argument("--out", help="also write the receipt to this file (benchmark/results/doctor-<box>.json)")
    add_interpreter(p, "interpreter whose NCCL startup hook to inspect (default: this one)")
    p.add_argument("--tp", type=int, help="tensor-parallel size for the all-reduce plan (default: GPU count)")
    p.set_defaults(fn=lambda a: _box().cmd_doctor(a))

    p = sub.add_parser("serve", help="launch sglang with the tuned all-reduce knobs and NCCL profile",
                       description="sglang-blackwell serve [--table T] [--profile P] [--dry-run] "
                                   "[--allow-unauthenticated] -- <sglang args>")
    p.add_argument("--table", help="all-reduce dispatch table (default: the one `bench allreduce --tune` wrote)")
    p.add_argument("--profile", help="NCCL profile (default: the table's, else auto for this topology)")
    p.add_argument("--dry-run", action="store_true", help="print the plan and the command, start nothing")
    p.add_argument("--allow-unauthenticated", action="store_true",
                   help="start a server on a --host beyond loopback without --api-key (refused otherwise): "
                        "anyone who reaches the port can use it")
    p.add_argument("sglang_args", nargs=argparse.REMAINDER, help="-- then python -m sglang.launch_server arguments")
    p.set_defaults(fn=lambda a: _box().cmd_serve(a))

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
    p.set_defaults(fn=lambda a: _release().cmd_image(a))

    p = sub.add_parser("label", help="the local version label rule: LABEL.lock per base (lock / status)")
    p.add_argument("action", choices=["lock", "status"])
    g = p.add_mutually_exclusive_group()
    g.add_argument("--base")
    g.add_argument("--all", action="store_true", help="every base")
    p.set_defaults(fn=lambda a: _patchset().cmd_label(a))

    p = sub.add_parser("changelog", help="patch series changes between git refs or between base lines (Markdown)")
    p.add_argument("--from", dest="from_ref", metavar="REF",
                   help="old git ref (default: the tag before --to; none: everything is new)")
    p.add_argument("--to", metavar="REF", help="new git ref (default: the working tree)")
    p.add_argument("--bases", nargs=2, metavar=("OLD", "NEW"), help="compare two base lines instead of refs")
    p.add_argument("--out", help="write to this file instead of stdout")
    p.set_defaults(fn=lambda a: _release().cmd_changelog(a))

    p = sub.add_parser("report", help="print the patch report of a base, or the README's patch table")
    p.add_argument("--base")
    p.add_argument("--table", action="store_true",
                   help="the patch table of every base (carried patch or 'absorbed since'), as markdown")
    p.add_argument("--update", metavar="FILE", help="rewrite the patch-table block in FILE (README.md)")
    p.set_defaults(fn=lambda a: _patchset().cmd_report(a))

    p = sub.add_parser("base", help="re-pin one component of a base line from the package index (base bump)")
    base_sub = p.add_subparsers(dest="base_cmd", required=True, metavar="ACTION")
    b = base_sub.add_parser("bump", help="re-pin a [[patched]] or [[runtime]] entry of base.toml from the index, "
                            "verified (sha256, size); --write rewrites it")
    if parsed("base"):
        from .patchset.base_bump import DESCRIPTION
        from .patchset.base_bump import add_arguments as add_bump_arguments

        b.description = DESCRIPTION
        add_bump_arguments(b)
    b.set_defaults(fn=lambda a: _patchset().cmd_base_bump(a))

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
        envswitch.check_all()  # a switch set to a value it does not accept: exit 2 before anything runs
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
        if _debug():
            raise
        return unexpected(a.cmd, e, sys.argv if argv is None else ["sglang-blackwell", *argv])


def _debug() -> bool:
    try:
        return envswitch.on(DEBUG_ENV)
    except UserError:  # checked before the command ran; changed since: no traceback
        return False


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
