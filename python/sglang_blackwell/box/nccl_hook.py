"""The managed block that applies an NCCL profile at interpreter start in a target Python environment.

Where it goes (found by running the target interpreter, never by guessing):
  sitecustomize  <site-packages>/sitecustomize.py, appended as a delimited block; every existing byte is kept.
  pth            where another sitecustomize comes first on sys.path (Debian/Ubuntu system Pythons ship
                 /usr/lib/python3.X/sitecustomize.py, which shadows a venv's own), a `.pth` file in
                 site-packages imports a small module holding the same block. site runs .pth files before
                 sitecustomize, in every interpreter, including spawned TP workers.
  nccl-conf      (`install --nccl-conf PATH`, next to one of the two above) the profile also goes into an NCCL
                 config file as the same kind of delimited block, for NCCL programs not started by Python;
                 NCCL reads it where NCCL_CONF_FILE names it. The startup block then records the path: it
                 applies the profile only while NCCL would read that file (NCCL_CONF_FILE unset or naming it),
                 and its kill switch also points NCCL_CONF_FILE at /dev/null.
The block only touches os.environ (os is already imported at that point): no torch, NVML or CUDA.
Every file that holds a block (sitecustomize.py, the pth hook's module and .pth file, an NCCL config file) is
edited by one path: put_block / strip_block, under an exclusive lock on its directory, through a temp file +
os.replace; the user's bytes around the block are kept as they are, and uninstall removes exactly what install
added (the newline it put before the block stays only where the user's own lines follow it, so they still run).
Before a byte is written: a symlinked file is written through (the link stays), a dangling one, a read-only
file, a directory where the file should be, and a Python file Python cannot compile are refused; an install
whose fresh interpreter does not get the profile puts every file back as it was (a Journal of what was
written), so a failed install leaves nothing.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import __version__
from ..errors import UserError
from . import nccl_conf as conf
from .nccl import APPLIED_ENV, CONF_WAS_ENV, KILL_SWITCH, OFF_VALUES, Resolution

BEGIN = b"# >>> sglang-blackwell nccl >>>"
END = b"# <<< sglang-blackwell nccl <<<"
META = b"# sglang-blackwell-nccl: "
HOOK_MODULE = "_sglang_blackwell_nccl"
PTH_FILE = "sglang_blackwell_nccl.pth"
SITECUSTOMIZE = "sitecustomize.py"
HOOKS = ("sitecustomize", "pth")
CONF_HOOK = "nccl-conf"
LOCK_TIMEOUT_S = 60.0

_BEGIN_RE = re.compile(rb"(?m)^" + re.escape(BEGIN))
_END_RE = re.compile(rb"(?m)^" + re.escape(END) + rb"[^\n]*(?:\n|$)")

# Runs inside the target interpreter: where its site-packages is, which sitecustomize its startup imports, and
# the NCCL variables a fresh process of it ends up with.
PROBE = r"""
import json, os, sys, sysconfig
from importlib.machinery import PathFinder
purelib = sysconfig.get_paths()["purelib"]
norm = lambda p: os.path.normcase(os.path.realpath(p))
path = [p for p in sys.path if p]  # '' is the -c script directory, added after startup
spec = PathFinder.find_spec("sitecustomize", path)
loaded = sys.modules.get("sitecustomize")
def nccl():  # the NCCL wheel of this environment (torch's CUDA builds load it), for its config-file rules
    try:
        from importlib.metadata import version
    except ImportError:
        return None
    for dist in ("nvidia-nccl-cu13", "nvidia-nccl-cu12"):
        try:
            return [dist, version(dist)]
        except Exception:
            pass
    return None
print("SGLB-PROBE " + json.dumps({
    "executable": sys.executable,
    "version": "%d.%d.%d" % sys.version_info[:3],
    "prefix": sys.prefix,
    "base_prefix": sys.base_prefix,
    "purelib": purelib,
    "purelib_on_path": norm(purelib) in {norm(p) for p in path},
    "sitecustomize": spec.origin if spec else None,
    "sitecustomize_loaded": getattr(loaded, "__file__", None),
    "no_site": bool(sys.flags.no_site),
    "environ": {k: v for k, v in os.environ.items() if k.startswith(("NCCL_", "SGLANG_BLACKWELL_"))},
    "nccl": nccl(),
}))
"""


@dataclass
class Target:
    python: str  # as given
    executable: str
    version: str
    prefix: str
    purelib: Path
    purelib_on_path: bool
    sitecustomize: str | None  # the file `import sitecustomize` resolves to at startup
    environ: dict[str, str]  # NCCL_* / SGLANG_BLACKWELL_* of a fresh interpreter (its managed block ran)
    nccl: tuple[str, str] | None = None  # (distribution, version) of its NCCL wheel
    startup_errors: tuple[str, ...] = ()  # what its startup printed about a failing sitecustomize or .pth file

    @property
    def conf_rules(self) -> conf.Rules:
        """How this environment's NCCL reads its config files."""
        if self.nccl:
            return conf.rules_for(self.nccl[1], f"{self.nccl[0]} in this environment")
        return conf.rules_for(None)

    @property
    def sitecustomize_path(self) -> Path:
        return self.purelib / SITECUSTOMIZE

    @property
    def module_path(self) -> Path:
        return self.purelib / f"{HOOK_MODULE}.py"

    @property
    def pth_path(self) -> Path:
        return self.purelib / PTH_FILE

    @property
    def shadow(self) -> str | None:
        """The sitecustomize that startup imports instead of this environment's own, if any."""
        if not self.sitecustomize:
            return None
        if _same(Path(self.sitecustomize).parent, self.purelib):
            return None
        return self.sitecustomize

    def to_dict(self) -> dict[str, Any]:
        return {"python": self.python, "executable": self.executable, "version": self.version,
                "prefix": self.prefix, "site_packages": str(self.purelib),
                "sitecustomize": self.sitecustomize, "shadowed_by": self.shadow}


def _same(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def probe(python: str | None = None, environ: dict[str, str] | None = None) -> Target:
    """Run the target interpreter (default: this one) and ask it."""
    exe = python or sys.executable
    try:
        r = subprocess.run([exe, "-B", "-c", PROBE], capture_output=True, text=True, timeout=120,
                           env=dict(os.environ if environ is None else environ))
    except FileNotFoundError:
        raise UserError(f"--python {exe}: no such interpreter") from None
    except PermissionError:
        raise UserError(f"--python {exe}: not executable") from None
    except subprocess.TimeoutExpired:
        raise UserError(f"--python {exe}: did not answer within 120 s") from None
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("SGLB-PROBE ")), None)
    if r.returncode != 0 or line is None:
        tail = (r.stderr or r.stdout).strip().splitlines()[-3:]
        raise UserError(f"--python {exe}: could not run it as a Python interpreter (exit {r.returncode}): "
                        + " | ".join(tail))
    d = json.loads(line[len("SGLB-PROBE "):])
    if d["no_site"]:
        raise UserError(f"--python {exe}: runs without the site module (-S), so no startup hook can apply")
    errors = _startup_errors(r.stderr)
    return Target(python=exe, executable=d["executable"], version=d["version"], prefix=d["prefix"],
                  purelib=Path(d["purelib"]), purelib_on_path=d["purelib_on_path"],
                  sitecustomize=d["sitecustomize"], environ=d["environ"],
                  nccl=tuple(d["nccl"]) if d.get("nccl") else None, startup_errors=errors)


def _startup_errors(stderr: str) -> tuple[str, ...]:
    """site's reports of a sitecustomize or .pth line that raised (it goes on starting), one line each."""
    lines = stderr.splitlines()
    out = []
    for i, ln in enumerate(lines):
        if ln.startswith(("Error in sitecustomize", "Error processing line")):
            last = next((x.strip() for x in lines[i + 1:i + 40] if x and not x.startswith((" ", "Traceback"))),
                        "")
            out.append(f"{ln.strip()} {last}".strip())
    return tuple(out)


# ---- the block ------------------------------------------------------------------------------------------
def _meta_line(meta: dict[str, Any]) -> str:
    # no '=' even inside strings: NCCL < 2.26 reads '#' lines of a config file like any other line
    return META.decode() + json.dumps(meta, sort_keys=True).replace("=", "\\u003d")


def render_block(meta: dict[str, Any], env: dict[str, str], conf_path: str | None = None) -> bytes:
    """The startup block (Python). conf_path: the NCCL config file that holds the same profile (NCCL-config
    mode): the profile then applies only while NCCL would read that file, and the kill switch points
    NCCL_CONF_FILE away from it, so that NCCL in this process and its children skips it too."""
    off = ", ".join(repr(v) for v in OFF_VALUES)
    head = [
        BEGIN.decode() + " (managed: `sglang-blackwell nccl uninstall` removes it; edits here are lost)",
        _meta_line(meta),
        "def _sglang_blackwell_nccl(environ):",
        f"    # NCCL profile {meta['profile']!r}: values already set win; {KILL_SWITCH}=0 disables it",
    ]
    if conf_path is None:
        gate = [f"    if environ.get({KILL_SWITCH!r}, '').strip().lower() in ({off}):",
                "        return"]
    else:
        gate = [
            f"    # {conf_path!r} holds it for every NCCL program: NCCL_CONF_FILE naming another file turns it",
            "    # off here too; the kill switch points NCCL_CONF_FILE at /dev/null where it named that file",
            f"    conf, real = {conf_path!r}, __import__('os').path.realpath",
            f"    named, home = environ.get({conf.CONF_ENV!r}, ''), environ.get('HOME', '')",
            "    read = named or (home + '/.nccl.conf' if home else '')",
            "    ours = bool(read) and real(read) == real(conf)",
            f"    if environ.get({KILL_SWITCH!r}, '').strip().lower() in ({off}):",
            "        if ours:",
            f"            environ[{CONF_WAS_ENV!r}] = named",
            f"            environ[{conf.CONF_ENV!r}] = '/dev/null'",
            "        return",
            "    if named and not ours:",
            "        return",
        ]
    body = [
        f"    applied = [k for k in environ.get({APPLIED_ENV!r}, '').split(',') if k]",
        "    for key, value in (",
        *[f"        ({k!r}, {v!r})," for k, v in env.items()],
        "    ):",
        "        if key not in environ:",
        "            environ.setdefault(key, value)",
        "            applied.append(key)",
        "    if applied:",
        f"        environ[{APPLIED_ENV!r}] = ','.join(dict.fromkeys(applied))",
        "",
        "",
        "_sglang_blackwell_nccl(__import__('os').environ)",
        "del _sglang_blackwell_nccl",
        END.decode(),
    ]
    return ("\n".join(head + gate + body) + "\n").encode("ascii")


def render_conf_block(meta: dict[str, Any], conf_text: str) -> bytes:
    """The block for an NCCL config file: markers and meta as comments, then the profile's NAME=value lines
    (nccl.nccl_conf). Lines above the block win over it (NCCL keeps a name's first line)."""
    lines = [
        BEGIN.decode() + " (managed: `sglang-blackwell nccl uninstall` removes it; edits here are lost)",
        _meta_line(meta),
        "# lines above this block win over it; variables set in the environment win over the whole file;",
        "# off for every process: point NCCL_CONF_FILE at /dev/null (in Python processes also: the kill switch",
        f"# {KILL_SWITCH} set to 0)",
        *conf_text.rstrip("\n").split("\n"),
        END.decode(),
    ]
    return ("\n".join(lines) + "\n").encode("ascii")


@dataclass
class Block:
    start: int
    end: int
    meta: dict[str, Any]


def find_block(data: bytes, where: str) -> Block | None:
    starts = [m.start() for m in _BEGIN_RE.finditer(data)]
    ends = [m.end() for m in _END_RE.finditer(data)]
    if not starts and not ends:
        return None
    if len(starts) != 1 or len(ends) != 1 or ends[0] <= starts[0]:
        raise UserError(f"{where}: the sglang-blackwell managed block is damaged ({len(starts)} begin and "
                        f"{len(ends)} end marker(s)); remove the lines between '{BEGIN.decode()}' and "
                        f"'{END.decode()}' by hand, then install again")
    body = data[starts[0]:ends[0]]
    meta_line = next((ln for ln in body.split(b"\n") if ln.startswith(META)), None)
    try:
        meta = json.loads(meta_line[len(META):]) if meta_line else None
    except ValueError:
        meta = None
    if not isinstance(meta, dict) or "profile" not in meta:
        raise UserError(f"{where}: the sglang-blackwell managed block has no readable "
                        f"'{META.decode().strip()}' line; remove the block by hand, then install again")
    return Block(starts[0], ends[0], meta)


def without_block(data: bytes, block: Block) -> bytes:
    """data without the block: exactly the bytes install added. The newline install put before the block (the
    file did not end with one: joined_newline) goes too, unless the user's own bytes follow the block and need it
    to stay on a line of their own (`A = 1` + our block + `B = 2` must not become `A = 1B = 2`)."""
    start, rest = block.start, data[block.end:]
    if block.meta.get("joined_newline") and start > 0 and data[start - 1:start] == b"\n" \
            and (not rest or rest.startswith((b"\n", b"\r\n"))):
        start -= 1
    return data[:start] + rest


def with_block(data: bytes | None, block_bytes_for, where: str) -> bytes:
    """data (None: no file yet) with the managed block replaced in place, or appended.
    block_bytes_for(joined_newline, created_file) -> the block; both flags are kept from an existing block so
    that uninstall can restore the original bytes."""
    if data is None:
        return block_bytes_for(False, True)
    old = find_block(data, where)
    if old is not None:
        new_block = block_bytes_for(bool(old.meta.get("joined_newline")), bool(old.meta.get("created_file")))
        return data[:old.start] + new_block + data[old.end:]
    joined = bool(data) and not data.endswith(b"\n")
    return data + (b"\n" if joined else b"") + block_bytes_for(joined, False)


# ---- files ------------------------------------------------------------------------------------------------
@contextmanager
def locked(directory: Path, timeout: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """Exclusive flock on the directory itself (no lock file is left behind)."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise UserError(f"{directory}: another sglang-blackwell nccl install/uninstall holds the "
                                    f"lock for more than {timeout:.0f} s") from None
                time.sleep(0.02)
        yield
    finally:
        os.close(fd)  # releases the lock


@contextmanager
def locked_all(directories: list[Path]) -> Iterator[None]:
    """locked() on each distinct directory, always in the same order (no deadlock between two installs)."""
    unique = {os.path.realpath(d): d for d in directories}
    with contextlib.ExitStack() as stack:
        for key in sorted(unique):
            stack.enter_context(locked(unique[key]))
        yield


def _check_writable(directory: Path, hint: str = "Run as the environment's owner, or pass --python for an "
                                                 "environment you can write") -> None:
    try:
        fd, tmp = tempfile.mkstemp(prefix=".sglang-blackwell-", suffix=".probe", dir=directory)
    except OSError as e:
        why = "read-only file system" if e.errno == errno.EROFS else (e.strerror or str(e))
        raise UserError(f"{directory}: cannot write there ({why}); nothing was changed. {hint}") from None
    os.close(fd)
    os.unlink(tmp)


def real_file(path: Path) -> Path:
    """The file an edit of `path` changes: itself, or the file its symlink (chain) names: written through, so
    the link stays a link. A dangling link or a loop is an error: there is nothing to write through to."""
    if not path.is_symlink():
        return path
    real = Path(os.path.realpath(path))
    if not real.exists():
        raise UserError(f"{path}: a symlink to {real}, which does not exist (or a symlink loop); nothing was "
                        "changed (point the link at a file, or remove it)")
    return real


def editable(path: Path) -> Path:
    """real_file(path), checked before anything is written: a regular file (or none yet) we may change."""
    real = real_file(path)
    if real.exists() or real.is_symlink():
        if not real.is_file():
            raise UserError(f"{path}: is not a regular file (a directory?); nothing was changed")
        st = real.stat()
        if not st.st_mode & 0o222 or not os.access(real, os.W_OK):
            mode = oct(st.st_mode & 0o777)[2:]
            raise UserError(f"{path}{' -> ' + str(real) if real != path else ''}: is read-only (mode {mode}); "
                            "nothing was changed (make it writable, e.g. chmod u+w, to let sglang-blackwell edit it)")
    if real.parent != path.parent:
        _check_writable(real.parent, "Run as the owner of that directory")
    return real


_COMPILE = r"""
import json, sys
try:
    compile(sys.stdin.buffer.read(), "<file>", "exec", dont_inherit=True)
    print(json.dumps(None))
except SyntaxError as e:
    print(json.dumps("a syntax error at line %s: %s" % (e.lineno, e.msg)))
except ValueError as e:
    print(json.dumps("not Python source: %s" % e))
"""


def python_problem(data: bytes, python: str | None = None) -> str | None:
    """Why Python cannot run this source (None: it compiles), as the interpreter `python` (default: this one)
    compiles it: the target environment's Python may know syntax this one does not. Honours a coding cookie, as
    the import does."""
    if python and os.path.realpath(python) != os.path.realpath(sys.executable):
        try:
            r = subprocess.run([python, "-B", "-c", _COMPILE], input=data, capture_output=True, timeout=120)
            return json.loads(r.stdout.decode().strip().splitlines()[-1])
        except (OSError, ValueError, IndexError, subprocess.TimeoutExpired) as e:
            raise UserError(f"--python {python}: cannot ask it to compile a file ({e})") from None
    try:
        compile(data, "<file>", "exec", dont_inherit=True)
    except SyntaxError as e:
        return f"a syntax error at line {e.lineno}: {e.msg}"
    except ValueError as e:  # null bytes (Python < 3.12)
        return f"not Python source: {e}"
    return None


class Journal:
    """The bytes (or absence) of every file before this install changed it, to put them back on failure."""

    def __init__(self) -> None:
        self.saved: dict[Path, tuple[bytes | None, int | None]] = {}

    def save(self, path: Path) -> None:
        real = real_file(path)
        if real in self.saved:
            return
        data = _read(real)
        self.saved[real] = (data, real.stat().st_mode & 0o7777 if data is not None else None)

    def undo(self) -> list[str]:
        """Restore; what could not be restored (empty: everything is as it was)."""
        failed = []
        for real, (data, mode) in reversed(list(self.saved.items())):
            try:
                if data is None:
                    if real.exists():
                        _remove(real)
                elif _read(real) != data:
                    _write_atomic(real, data, mode)
            except (OSError, UserError) as e:
                failed.append(f"{real} ({e})")
        self.saved.clear()
        return failed


def _write_atomic(path: Path, data: bytes, mode: int | None = None, journal: Journal | None = None) -> None:
    """Write through a symlink (real_file), keeping the file's mode; a failure changes nothing."""
    if journal is not None:
        journal.save(path)
    real = real_file(path)
    if mode is None:
        mode = real.stat().st_mode & 0o7777 if real.exists() else 0o666 & ~_umask()
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{real.name}.", suffix=".tmp", dir=real.parent)
    except OSError as e:
        raise UserError(f"{path}: cannot write it ({os.strerror(e.errno) if e.errno else e}); nothing was "
                        "changed") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, real)
    except OSError as e:
        raise UserError(f"{path}: cannot write it ({os.strerror(e.errno) if e.errno else e})") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    _drop_bytecode(real)


def _remove(path: Path, journal: Journal | None = None) -> None:
    if journal is not None:
        journal.save(path)
    try:
        path.unlink()
    except OSError as e:
        raise UserError(f"{path}: cannot remove it ({os.strerror(e.errno) if e.errno else e})") from None
    _drop_bytecode(path)


def _drop_bytecode(path: Path) -> None:
    """Stale-proof: a rewrite within the same second with the same size would otherwise reuse the old .pyc."""
    if path.suffix != ".py":
        return
    for pyc in (path.parent / "__pycache__").glob(f"{path.stem}.*.pyc"):
        with contextlib.suppress(OSError):
            pyc.unlink()


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None  # (a dangling symlink too: editable() refuses to write through it)
    except OSError as e:
        raise UserError(f"{path}: cannot read: {e.strerror}") from None


def put_block(path: Path, block_for, journal: Journal | None = None, python: str | None = None) -> bool:
    """The one way a managed block goes into a file (sitecustomize.py, the pth hook's files, an NCCL config file):
    replaced in place or appended after the user's bytes (with_block), written atomically when the bytes change,
    through a symlink. Checked first (editable; a .py file the target's Python, `python`, cannot compile is
    refused: a block in it could never run). True: written."""
    editable(path)
    data = _read(path)
    new = with_block(data, block_for, str(path))
    if new == data:
        return False
    if path.suffix == ".py":
        why = python_problem(data, python) if data is not None else None
        if why is None:
            why = python_problem(new, python)
        if why:
            raise UserError(f"{path}: {why}: Python cannot run this file, so a block in it could never run either; "
                            "nothing was changed (fix the file first)")
    _write_atomic(path, new, journal=journal)
    return True


def strip_block(path: Path, data: bytes | None = None, journal: Journal | None = None) -> str | None:
    """The one way a managed block leaves a file: the bytes install added are removed (without_block), the rest
    kept; a file install created and that now holds nothing else is removed (never a symlink: it is written
    through). "removed", "written", or None (no block)."""
    data = _read(path) if data is None else data
    if data is None:
        return None
    b = find_block(data, str(path))
    if b is None:
        return None
    editable(path)
    rest = without_block(data, b)
    if b.meta.get("created_file") and not rest and not path.is_symlink():
        _remove(path, journal)
        return "removed"
    _write_atomic(path, rest, journal=journal)
    return "written"


# ---- what is installed ------------------------------------------------------------------------------------
@dataclass
class Installed:
    hook: str  # "sitecustomize", "pth" or "nccl-conf"
    path: Path  # the file holding the block
    meta: dict[str, Any]
    active: bool  # does interpreter startup run it? (nccl-conf: does NCCL read the file here?)
    why_inactive: str = ""

    @property
    def profile(self) -> str:
        return self.meta["profile"]

    @property
    def env(self) -> dict[str, str]:
        return {k: v for k, v in self.meta.get("env", [])}

    @property
    def nccl_conf(self) -> str | None:
        """The NCCL config file a startup block names (NCCL-config mode)."""
        return self.meta.get("nccl_conf") if self.hook in HOOKS else None

    def to_dict(self) -> dict[str, Any]:
        return {"hook": self.hook, "path": str(self.path), "active": self.active,
                "why_inactive": self.why_inactive, "profile": self.profile,
                "requested": self.meta.get("requested"), "class": self.meta.get("class"),
                "topology": self.meta.get("topology"), "env": self.env, "nccl_conf": self.nccl_conf}


def installed(target: Target, rules: conf.Rules | None = None) -> list[Installed]:
    """Managed blocks: the startup blocks in the target's site-packages (normally zero or one), then the NCCL
    config-file blocks, in the files a startup block names and in the files NCCL reads in a fresh
    interpreter of the target."""
    out = []
    sc = _read(target.sitecustomize_path)
    if sc is not None:
        b = find_block(sc, str(target.sitecustomize_path))
        if b is not None:
            why = ""
            if target.shadow:
                why = f"{target.shadow} comes first on sys.path, so this sitecustomize.py never runs"
            out.append(Installed("sitecustomize", target.sitecustomize_path, b.meta, not why, why))
    mod = _read(target.module_path)
    if mod is not None:
        b = find_block(mod, str(target.module_path))
        if b is not None:
            why = "" if target.pth_path.exists() else f"{target.pth_path.name} is missing: nothing imports it"
            if not target.purelib_on_path:
                why = f"{target.purelib} is not on sys.path"
            out.append(Installed("pth", target.module_path, b.meta, not why, why))
    return out + _conf_blocks(target, [b.nccl_conf for b in out if b.nccl_conf], rules or target.conf_rules)


def _conf_blocks(target: Target, recorded: list[str], rules: conf.Rules) -> list[Installed]:
    env = target.environ
    reads = [p for p, _ in conf.files_read(env, rules)]
    out = []
    for path in dict.fromkeys([*map(Path, recorded), *reads]):
        try:
            data = _read(path)
        except UserError:
            continue  # unreadable here: state() reports it with the file
        b = find_block(data, str(path)) if data is not None else None
        if b is None:
            continue
        active = any(conf.same_file(path, r) for r in reads)
        why = "" if active else _conf_unread_why(path, env)
        out.append(Installed(CONF_HOOK, path, b.meta, active, why))
    return out


def _conf_unread_why(path: Path, env: dict[str, str]) -> str:
    named = env.get(conf.CONF_ENV, "")
    if CONF_WAS_ENV in env:
        return (f"{KILL_SWITCH}={env.get(KILL_SWITCH)}: the startup block pointed {conf.CONF_ENV} at {named} "
                "(the profile is off)")
    if named:
        return f"{conf.CONF_ENV} names {named}: NCCL reads that file instead (the profile is off)"
    return (f"{conf.CONF_ENV} is not set here: NCCL reads ~/.nccl.conf instead, so NCCL programs not started by "
            f"this environment's Python do not get the profile (set {conf.CONF_ENV}={path} for every process: "
            "docs/nccl-and-doctor.md)")


def conf_mode_off(conf_path: str | None, environ: dict[str, str]) -> str | None:
    """Why a startup block in NCCL-config mode applies nothing in a process with this environment, where the
    reason is the user's NCCL_CONF_FILE (naming another file turns the profile off for every process)."""
    named = environ.get(conf.CONF_ENV, "")
    if not conf_path or not named or CONF_WAS_ENV in environ or conf.same_file(named, conf_path):
        return None
    return (f"{conf.CONF_ENV}={named} names another file than {conf_path}: NCCL reads that one, and the startup "
            "block applies nothing (the profile is off in every process that gets this environment)")


# ---- install / uninstall ----------------------------------------------------------------------------------
@dataclass
class Change:
    hook: str
    written: list[Path]
    removed: list[Path]
    message: str
    env: list = field(default_factory=list)  # install: EnvRows of a fresh interpreter right after writing
    problems: list[str] = field(default_factory=list)
    nccl_conf: Path | None = None  # install: the NCCL config file written
    conf_env: list = field(default_factory=list)  # install: (name, value, where) NCCL takes from that file
    notes: list[str] = field(default_factory=list)  # install: how NCCL_CONF_FILE reaches other programs


def _check_site(target: Target) -> None:
    site = target.purelib
    if not site.is_dir():
        raise UserError(f"{site}: the site-packages directory of {target.executable} does not exist; nothing "
                        "was changed (create it, e.g. by installing any package into that environment)")
    if not target.purelib_on_path:
        raise UserError(f"{site}: not on sys.path of {target.executable}, so no hook there would run; "
                        "nothing was changed")


def conf_target(path: str | os.PathLike, opt: str = "--nccl-conf") -> Path:
    """An NCCL config file we may write: absolute, in an existing directory, not a directory itself, and not
    /etc/nccl.conf (NCCL reads it in every process after the user's file: a profile there could not be
    switched off)."""
    p = Path(os.path.abspath(os.path.expanduser(os.fspath(path))))
    if conf.same_file(p, conf.ETC_CONF):
        raise UserError(f"{opt} {path}: NCCL reads {conf.ETC_CONF} in every process, after the user's file, so a "
                        f"profile there could not be switched off; use a file of ours named by {conf.CONF_ENV} "
                        "(e.g. /etc/sglang-blackwell/nccl.conf)")
    if len(str(p)) > conf.NAME_MAX:
        raise UserError(f"{opt} {path}: longer than the {conf.NAME_MAX} characters NCCL reads of {conf.CONF_ENV}")
    if p.is_dir():
        raise UserError(f"{opt} {path}: is a directory (give the config file's path)")
    if not p.parent.is_dir():
        raise UserError(f"{opt} {path}: directory {p.parent} does not exist; nothing was changed (create it "
                        "first)")
    return p


def choose_hook(target: Target, hook: str = "auto") -> tuple[str, str]:
    """(hook, reason)."""
    if hook not in ("auto", *HOOKS):
        raise UserError(f"--hook {hook}: must be auto, sitecustomize or pth")
    shadow = target.shadow
    if hook == "sitecustomize" and shadow:
        raise UserError(f"--hook sitecustomize: {shadow} shadows {target.sitecustomize_path}, which would "
                        "never run; use --hook pth (the default picks it)")
    if hook == "pth" or (hook == "auto" and shadow):
        why = (f"{shadow} shadows this environment's sitecustomize.py (a system Python's, e.g. Debian/Ubuntu)"
               if shadow else "requested with --hook pth")
        return "pth", why
    return "sitecustomize", "no other sitecustomize comes first on sys.path"


def conf_hints(path: Path) -> list[str]:
    """How NCCL_CONF_FILE gets to programs not started by Python: the user's choice, never written by us."""
    return [f"{conf.CONF_ENV} does not name {path} here. NCCL programs not started by this environment's Python "
            f"(nccl-tests, other runtimes) read the file only where {conf.CONF_ENV} names it, e.g.:",
            f"  image (Dockerfile):   ENV {conf.CONF_ENV}={path}",
            f"  every login shell:    echo 'export {conf.CONF_ENV}={path}' | sudo tee "
            "/etc/profile.d/sglang-blackwell-nccl.sh",
            f"  every PAM session:    add the line {conf.CONF_ENV}={path} to /etc/environment",
            f"off for every process: {conf.CONF_ENV}=/dev/null (Python processes also honour {KILL_SWITCH}=0)"]


def render_pth_block(meta: dict[str, Any]) -> bytes:
    """The .pth file of the pth hook: comment lines (site skips them) around the line that imports the module."""
    lines = [BEGIN.decode() + " (managed: `sglang-blackwell nccl uninstall` removes it; edits here are lost)",
             _meta_line(meta), f"import {HOOK_MODULE}", END.decode()]
    return ("\n".join(lines) + "\n").encode("ascii")


# what a .pth file of ours looked like before it was a managed block: still recognised, replaced, removed
LEGACY_PTH = (f"# sglang-blackwell nccl hook (managed; `sglang-blackwell nccl uninstall` removes it)\n"
              f"import {HOOK_MODULE}\n").encode()


def install(target: Target, res: Resolution, hook: str = "auto",
            environ: dict[str, str] | None = None, nccl_conf: str | os.PathLike | None = None) -> Change:
    """Write the block for `res` (replacing any earlier one), then, still under the lock, start a fresh
    interpreter of the target and check that it gets the profile; when it does not, every file is put back as
    it was and the install is refused (UserError). environ: the user's environment for that check (default:
    this process's, minus what a managed block set). nccl_conf: also write the profile into this NCCL config
    file (default: the file an earlier install recorded, if any)."""
    from .nccl import effective_env, kill_switch_engaged, user_environ
    from .nccl import nccl_conf as render_conf

    _check_site(target)
    chosen, why = choose_hook(target, hook)
    rules = target.conf_rules
    earlier = next((b.nccl_conf for b in installed(target, rules) if b.nccl_conf), None)
    conf_path = conf_target(nccl_conf) if nccl_conf else None
    kept = False
    if conf_path is None and earlier:
        conf_path, kept = conf_target(earlier, "the NCCL config file of the earlier install,"), True
    moved_from = (Path(earlier) if earlier and conf_path and not conf.same_file(earlier, conf_path)
                  and Path(earlier).parent.is_dir() else None)
    meta_base = {"schema": 1, "hook": chosen, "profile": res.profile.name, "requested": res.requested,
                 "class": res.topology_class, "topology": res.topology,
                 "env": [[k, v] for k, v in res.profile.env.items()],
                 "tool": f"sglang-blackwell {__version__}"}
    py_meta = dict(meta_base, **({"nccl_conf": str(conf_path)} if conf_path else {}))
    conf_body = render_conf(res.profile, res.requested)

    def block_for(joined: bool, created: bool) -> bytes:
        return render_block(dict(py_meta, joined_newline=joined, created_file=created), res.profile.env,
                            str(conf_path) if conf_path else None)

    def conf_block_for(joined: bool, created: bool) -> bytes:
        return render_conf_block(dict(meta_base, hook=CONF_HOOK, joined_newline=joined, created_file=created),
                                 conf_body)

    def pth_block_for(joined: bool, created: bool) -> bytes:
        return render_pth_block(dict(py_meta, joined_newline=joined, created_file=created))

    site = target.purelib
    conf_dirs = [p.parent for p in (conf_path, moved_from) if p is not None]
    journal = Journal()
    with locked_all([site, *conf_dirs]):
        _check_writable(site)
        for d in conf_dirs:
            _check_writable(d, "Run as the owner of that directory, or pass --nccl-conf with a path you can write")
        written: list[Path] = []
        removed: list[Path] = []
        sc_path, mod_path, pth_path = target.sitecustomize_path, target.module_path, target.pth_path
        try:
            # every file is checked before the first one is written (a refusal changes nothing)
            for path in (conf_path, sc_path) if chosen == "sitecustomize" else (conf_path, mod_path, pth_path):
                if path is not None:
                    editable(path)
            sc = _read(sc_path)
            if conf_path is not None and put_block(conf_path, conf_block_for, journal):
                written.append(conf_path)
            if moved_from is not None:
                r = strip_block(moved_from, journal=journal)
                (removed if r == "removed" else written).extend([moved_from] if r else [])
            if chosen == "sitecustomize":
                if put_block(sc_path, block_for, journal, target.executable):
                    written.append(sc_path)
                removed += _remove_pth_hook(target, journal)
                where = str(sc_path)
            else:
                if put_block(mod_path, block_for, journal, target.executable):
                    written.append(mod_path)
                if _read(pth_path) == LEGACY_PTH:
                    _remove(pth_path, journal)
                if put_block(pth_path, pth_block_for, journal):
                    written.append(pth_path)
                if sc is not None:  # an earlier install into a sitecustomize.py that does not (or no longer) run
                    r = strip_block(sc_path, sc, journal)
                    (removed if r == "removed" else written).extend([sc_path] if r else [])
                where = f"{pth_path} -> {mod_path}"
            user = user_environ(environ)
            after = probe(target.python, user)
            fresh = after.environ
            conf_file = conf.read(conf_path, "--nccl-conf", rules) if conf_path else None
            off = conf_mode_off(str(conf_path) if conf_path else None, user)
            missing = [k for k in res.profile.env if k not in fresh]
            if not off and missing and not kill_switch_engaged(fresh):
                said = f"; its startup reports: {' | '.join(after.startup_errors)}" if after.startup_errors else ""
                raise UserError(f"{where}: a fresh {target.executable} did not get {missing} with the block "
                                f"written: its startup does not run it{said} (try --hook pth); nothing was changed")
            unread = [f"{k}={v}" for k, v in res.profile.env.items()
                      if conf_file is not None and k not in conf_file.values]
            if unread:
                raise UserError(f"{conf_path}: NCCL would not read {', '.join(unread)} from it (NCCL reads each line "
                                "byte for byte); nothing was changed")
        except BaseException as e:
            failed = journal.undo()
            if failed and isinstance(e, UserError):
                raise UserError(f"{e}; BUT these could not be restored: {', '.join(failed)}") from None
            raise
    rows = effective_env(fresh, user, block_env=res.profile.env, hook=chosen, files=[])
    problems: list[str] = []
    notes = [f"note: {off}"] if off else []
    msg = f"installed profile {res.profile.name} ({res.reason}) via {chosen}: {where}; {why}"
    conf_env = []
    if conf_file is not None:
        msg += f"\nNCCL config file {conf_path}" + (" (kept from the earlier install)" if kept else "")
        vals = conf_file.values
        for k, v in res.profile.env.items():
            e = vals[k]
            if e.value != v:
                notes.append(f"note: {conf_path} line {e.line}, above the block, sets {k}={e.value!r}: NCCL keeps "
                             "that one (your lines win)")
            conf_env.append((k, e.value, f"line {e.line}"))
        if not conf.same_file(user.get(conf.CONF_ENV) or os.devnull, conf_path):
            notes += conf_hints(conf_path)
    return Change(chosen, written, removed, msg, [r for r in rows if r.key in res.profile.env], problems,
                  conf_path, conf_env, notes)


def _remove_pth_hook(target: Target, journal: Journal | None = None) -> list[Path]:
    """Take the pth hook out: our block out of the .pth file and the module (strip_block), an old-style .pth file
    of ours removed."""
    gone = []
    pth = _read(target.pth_path)
    if pth == LEGACY_PTH:
        editable(target.pth_path)
        _remove(target.pth_path, journal)
        gone.append(target.pth_path)
    elif pth is not None and strip_block(target.pth_path, pth, journal) == "removed":
        gone.append(target.pth_path)
    if strip_block(target.module_path, journal=journal) == "removed":
        gone.append(target.module_path)
    return gone


def uninstall(target: Target, nccl_conf: str | os.PathLike | None = None) -> Change:
    """Remove every managed block: the startup block, and the NCCL config-file block (in `nccl_conf`, else
    in the file the startup block names and in the files NCCL reads here). Nothing is changed unless every file
    can be (a failure midway puts back what was already changed)."""
    site = target.purelib
    site_ok = site.is_dir()
    blocks = installed(target) if site_ok else _conf_blocks(target, [], target.conf_rules)
    confs = ([Path(os.path.abspath(os.path.expanduser(os.fspath(nccl_conf))))] if nccl_conf
             else [b.path for b in blocks if b.hook == CONF_HOOK])
    confs = [p for p in confs if p.parent.is_dir()]
    if not site_ok and not confs:
        return Change("", [], [], f"{site}: no site-packages directory, nothing installed")
    with locked_all([*([site] if site_ok else []), *(p.parent for p in confs)]):
        sc = _read(target.sitecustomize_path) if site_ok else None
        has_sc = sc is not None and find_block(sc, str(target.sitecustomize_path)) is not None
        mod = _read(target.module_path) if site_ok else None
        pth = _read(target.pth_path) if site_ok else None
        has_pth = site_ok and (pth == LEGACY_PTH or (pth is not None and find_block(pth, str(target.pth_path))
                                                     is not None)
                               or (mod is not None and find_block(mod, str(target.module_path)) is not None))
        conf_data = {p: d for p in confs if (d := _read(p)) is not None and find_block(d, str(p)) is not None}
        if not has_sc and not has_pth and not conf_data:
            where = " or ".join(map(str, [site, *confs]))
            return Change("", [], [], f"no sglang-blackwell NCCL block in {where}; nothing to do")
        if has_sc or has_pth:
            _check_writable(site)
        for p in conf_data:
            _check_writable(p.parent, "Run as the owner of that directory")
        for p in [*conf_data, *([target.sitecustomize_path] if has_sc else []),
                  *([target.pth_path, target.module_path] if has_pth else [])]:
            if p.exists() or p.is_symlink():
                editable(p)
        written, removed = [], []
        journal = Journal()
        try:
            for p, d in conf_data.items():
                r = strip_block(p, d, journal)
                (removed if r == "removed" else written).append(p)
            if has_sc:
                r = strip_block(target.sitecustomize_path, sc, journal)
                (removed if r == "removed" else written).append(target.sitecustomize_path)
            if site_ok:
                gone = _remove_pth_hook(target, journal)
                removed += gone
                written += [q for q in (target.pth_path, target.module_path)
                            if has_pth and q not in gone and real_file(q) in journal.saved]
        except BaseException as e:
            failed = journal.undo()
            if failed and isinstance(e, UserError):
                raise UserError(f"{e}; BUT these could not be restored: {', '.join(failed)}") from None
            raise
    parts = [f"restored {p}" for p in written] + [f"removed {p}" for p in removed]
    return Change("", written, removed, "; ".join(parts))


# ---- state: what `nccl show` and `doctor` report ----------------------------------------------------------
def state(python: str | None = None, *, profiles: dict | None = None, requested: str | None = None,
          topology=None, environ: dict[str, str] | None = None, nccl_version: str | None = None) -> dict[str, Any]:
    """Everything about NCCL tuning in the target environment, as plain data:
    target, installed blocks (and whether they run / still fit the hardware), NCCL's config files as that
    environment's NCCL reads them (nccl_version: that NCCL's version, default: the environment's NCCL wheel),
    the variables a fresh interpreter gets with their sources, and (requested) what a profile would set."""
    from .nccl import effective_env, kill_switch_engaged, load_profiles, resolve, user_environ

    profiles = profiles if profiles is not None else load_profiles()
    user = user_environ(environ)
    target = probe(python, user)
    rules = conf.rules_for(nccl_version, "the NCCL in use") if nccl_version else target.conf_rules
    files = conf.read_all(target.environ, rules)
    hazards = []
    for cf in files:
        try:
            b = find_block(cf.data, str(cf.path)) if cf.data else None
        except UserError as e:
            hazards.append(str(e))
            b = None
        cf.managed = (b.start, b.end) if b else None
        hazards += [f"{cf.path}: {h}" for h in cf.hazards]
        if cf.error:
            hazards.append(f"{cf.path}: NCCL cannot read it either ({cf.error}): it is skipped")
    every = installed(target, rules)
    blocks = [b for b in every if b.hook in HOOKS]
    conf_blocks = [b for b in every if b.hook == CONF_HOOK]
    active = next((b for b in blocks if b.active), None)
    res = None
    if requested or topology is not None:
        from .topology import detect

        topology = topology if topology is not None else detect(cuda=False)
        res = resolve(requested or "auto", topology, profiles)
    extra = list(res.profile.env) if res else []
    rows = effective_env(target.environ, user, block_env=active.env if active else None,
                         hook=active.hook if active else None, extra_keys=extra, files=files)
    problems = [f"managed block in {b.path} is inactive: {b.why_inactive} (fix: sglang-blackwell nccl install"
                f"{' --python ' + python if python else ''})" for b in blocks if not b.active]
    if len(blocks) > 1:
        problems.append(f"{len(blocks)} managed blocks found ({', '.join(str(b.path) for b in blocks)}); "
                        "fix: sglang-blackwell nccl install (keeps one)")
    off = conf_mode_off(active.nccl_conf, target.environ) if active else None
    if active and active.env and not off:
        missing = [k for k in active.env if k not in target.environ]
        if missing and not kill_switch_engaged(target.environ):
            problems.append(f"the block in {active.path} ran, yet a fresh interpreter lacks {missing}")
    conf_fix = None
    if hazards:
        conf_fix = ("edit the lines named: NCCL reads each line byte for byte (no spaces around '=', LF line "
                    "ends, the first line for a name wins)")
    for b in conf_blocks:
        if b.active and conf.same_file(b.path, conf.ETC_CONF):
            problems.append(f"a profile block in {conf.ETC_CONF}: NCCL reads it in every process, so it cannot be "
                            "switched off (fix: sglang-blackwell nccl uninstall, which removes it, then install "
                            "--nccl-conf <a file of ours named by NCCL_CONF_FILE>)")
        elif not b.active and not off and CONF_WAS_ENV not in target.environ \
                and not target.environ.get(conf.CONF_ENV):
            problems.append(f"NCCL config block in {b.path} is not read here: {b.why_inactive}")
            conf_fix = (f"set {conf.CONF_ENV}={b.path} for every process (image: ENV; a box: /etc/environment or "
                        "/etc/profile.d; see docs/nccl-and-doctor.md)")
    return {
        "target": target.to_dict(),
        "installed": [b.to_dict() for b in blocks],
        "active": active.to_dict() if active else None,
        "kill_switch": {"variable": KILL_SWITCH, "value": target.environ.get(KILL_SWITCH),
                        "engaged": kill_switch_engaged(target.environ)},
        "env": [r.to_dict() for r in rows],
        "nccl_conf": {"rules": dict(rules.to_dict(), label=rules.label), "files": [cf.to_dict() for cf in files],
                      "blocks": [b.to_dict() for b in conf_blocks], "hazards": hazards, "off": off,
                      "fix": conf_fix},
        "profile": ({"requested": res.requested, "name": res.profile.name, "reason": res.reason,
                     "class": res.topology_class, "topology": res.topology, "env": dict(res.profile.env),
                     "fits": res.profile.fits_class(res.topology_class),
                     "debug_knobs": res.profile.debug_knobs, "provenance": res.profile.provenance}
                    if res else None),
        "problems": problems,
    }
