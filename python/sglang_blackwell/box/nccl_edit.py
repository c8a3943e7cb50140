"""The one way a managed block goes into or out of a file: put_block / strip_block, for every file that holds one
(sitecustomize.py, the pth hook's module and .pth file, an NCCL config file), under an exclusive lock on its
directory, through a temp file + os.replace; the user's bytes around the block are kept as they are (nccl_block).
Before a byte is written: a symlinked file is written through (the link stays), a dangling one, a read-only
file, a directory where the file should be, and a Python file Python cannot compile are refused. A Journal
records each file's bytes and mode before the first change, so that a failed install or uninstall puts every
file back as it was.

Why not paths.write_atomic: this writer writes through a symlink chain (real_file) and refuses a dangling one,
takes an explicit mode (Journal.undo recreates a removed file with the mode it had), drops the file's stale
bytecode, and says "nothing was changed" in the words of the all-or-nothing install; paths.write_atomic
replaces the path it is given, keeps or derives the mode only, and creates missing parent directories.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .. import procs
from ..errors import UserError
from ..paths import NotReadable, read_bounded
from .nccl_block import find_block, with_block, without_block

LOCK_TIMEOUT_S = 60.0


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


def check_writable(directory: Path, hint: str = "Run as the environment's owner, or pass --python for an "
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
        check_writable(real.parent, "Run as the owner of that directory")
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
            r = procs.run([python, "-B", "-c", _COMPILE], input=data, capture_output=True, timeout=120)
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
        data = read_or_none(real)
        self.saved[real] = (data, real.stat().st_mode & 0o7777 if data is not None else None)

    def undo(self) -> list[str]:
        """Restore; what could not be restored (empty: everything is as it was)."""
        failed = []
        for real, (data, mode) in reversed(list(self.saved.items())):
            try:
                if data is None:
                    if real.exists():
                        remove_file(real)
                elif read_or_none(real) != data:
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


def remove_file(path: Path, journal: Journal | None = None) -> None:
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


MAX_FILE_BYTES = 64 << 20  # a sitecustomize.py, .pth or NCCL config file larger than this is not one we edit


def read_or_none(path: Path) -> bytes | None:
    """The file's bytes (None: absent), read without blocking and bounded (paths.read_bounded): a FIFO in a file's
    place, or a file of gigabytes, is a UserError naming it, not a hang."""
    try:
        return read_bounded(path, MAX_FILE_BYTES)
    except FileNotFoundError:
        return None  # (a dangling symlink too: editable() refuses to write through it)
    except NotReadable as e:
        raise UserError(f"{path}: {e}: not read") from None
    except OSError as e:
        raise UserError(f"{path}: cannot read: {e.strerror}") from None


def put_block(path: Path, block_for, journal: Journal | None = None, python: str | None = None) -> bool:
    """The one way a managed block goes into a file (sitecustomize.py, the pth hook's files, an NCCL config file):
    replaced in place or appended after the user's bytes (with_block), written atomically when the bytes change,
    through a symlink. Checked first (editable; a .py file the target's Python, `python`, cannot compile is
    refused: a block in it could never run). True: written."""
    editable(path)
    data = read_or_none(path)
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
    data = read_or_none(path) if data is None else data
    if data is None:
        return None
    b = find_block(data, str(path))
    if b is None:
        return None
    editable(path)
    rest = without_block(data, b)
    if b.meta.get("created_file") and not rest and not path.is_symlink():
        remove_file(path, journal)
        return "removed"
    _write_atomic(path, rest, journal=journal)
    return "written"

