"""Where things live: the patch tree, the download cache, the build output."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from .errors import UserError

PACKAGE_DIR = Path(__file__).resolve().parent
NAME_MAX, PATH_MAX = 255, 4095  # Linux: bytes per path component, per path


def repo_root() -> Path | None:
    """The sglang-blackwell checkout this code runs from, if any (editable install or source tree)."""
    for parent in PACKAGE_DIR.parents:
        if (parent / "patches").is_dir() and (parent / "pyproject.toml").is_file():
            return parent
    return None


def patches_dir() -> Path:
    """The patch tree: $SGLANG_BLACKWELL_PATCHES, else the checkout's patches/, else the copy in the wheel."""
    env = os.environ.get("SGLANG_BLACKWELL_PATCHES")
    if env:
        return Path(env).resolve()
    root = repo_root()
    if root is not None:
        return root / "patches"
    return PACKAGE_DIR / "_data" / "patches"


def cache_dir() -> Path:
    """Download cache for pinned upstream artifacts ($SGLANG_BLACKWELL_CACHE or ~/.cache/sglang-blackwell)."""
    env = os.environ.get("SGLANG_BLACKWELL_CACHE")
    if env:
        return Path(env).expanduser().resolve()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return (base / "sglang-blackwell").resolve()


def path_arg(text: str) -> str:
    """type= of arguments that name a file or directory: an empty string names nothing (and would mean '.'), and a
    path the kernel refuses to look up (ENAMETOOLONG) is refused here, by name."""
    import argparse

    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path names no file")
    raw = os.fsencode(text)
    if len(raw) > PATH_MAX or any(len(part) > NAME_MAX for part in raw.split(b"/")):
        raise argparse.ArgumentTypeError(f"{text[:40]}...: longer than a path can be ({NAME_MAX} bytes a component, "
                                         f"{PATH_MAX} in all)")
    return text


def os_reason(e: OSError) -> str:
    """An OSError as the words a user reads ("No such file or directory", "Is a directory", ...)."""
    return e.strerror or str(e)


def read_bytes(path: Path, what: str = "") -> bytes:
    """The file's bytes, or a UserError naming it (`what` first, e.g. "--deps"): missing, a directory, unreadable."""
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise UserError(f"{what + ' ' if what else ''}{path}: cannot read it: {os_reason(e)}") from None


def read_text(path: Path, what: str = "") -> str:
    """The file as UTF-8 text, or a UserError naming it (as read_bytes, and where it is not UTF-8: the byte)."""
    data = read_bytes(path, what)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise UserError(f"{what + ' ' if what else ''}{path}:{line}: not UTF-8 text (byte {data[e.start]:#04x} "
                        f"at offset {e.start})") from None


def read_json(path: Path, what: str = "") -> Any:
    """A JSON file's data, or a UserError naming it (unreadable, not UTF-8, not JSON: line and column)."""
    text = read_text(path, what)
    try:
        return json.loads(text)
    except ValueError as e:
        where = f":{e.lineno}:{e.colno}" if isinstance(e, json.JSONDecodeError) else ""
        raise UserError(f"{what + ' ' if what else ''}{path}{where}: not valid JSON "
                        f"({e.msg if isinstance(e, json.JSONDecodeError) else e})") from None


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


def write_atomic(path: Path, data: str | bytes) -> Path:
    """Write `data` to `path` through a private temporary sibling and a rename: a reader sees the old file or the
    whole new one, never half of it, and a failure leaves no temporary file behind. The file keeps its mode
    (a new one gets the umask's)."""
    if path.is_dir():
        raise UserError(f"{path}: is a directory, not a file; nothing was written")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        mode = path.stat().st_mode & 0o7777 if path.exists() else 0o666 & ~_umask()
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:
        raise UserError(f"{path}: cannot write it ({os_reason(e)}); nothing was written") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except OSError as e:
        raise UserError(f"{path}: cannot write it ({os_reason(e)}); nothing was written") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def output_problem(path: Path, *, directory: bool = False) -> str | None:
    """Why `path` cannot be written as a file (directory=True: used or made as a directory), checked before the
    work that produces it; None when it can. Names what is in the way."""
    if directory:
        if path.exists() and not path.is_dir():
            return "not a directory"
    elif path.is_dir():
        return "is a directory (give a file name)"
    probe = path if directory else path.parent
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    if not probe.is_dir():
        return f"{probe} is not a directory"
    if not os.access(probe, os.W_OK | os.X_OK):  # write_atomic writes a sibling, then renames
        return f"cannot write in {probe}"
    return None


def marked_block(path: Path, begin: str, end: str) -> str | None:
    """What a text file holds between its `begin` and `end` markers (the generated README blocks), without the
    newlines around it; None when it has no such block or cannot be read as UTF-8 text."""
    try:
        text = path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    if begin not in text or end not in text:
        return None
    return text.split(begin, 1)[1].split(end, 1)[0].strip("\n")


def replace_marked_block(path: Path, body: str, begin: str, end: str, what: str = "--update") -> bool:
    """Rewrite the one `begin` ... `end` block of a text file with `body` (atomically; a symlinked file stays a
    link and the file it names is rewritten); returns whether the file changed. A UserError naming `what` and the
    file: unreadable, not UTF-8, not exactly one block, not writable."""
    text = read_text(path, what)
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        raise UserError(f"{what} {path}: needs exactly one {begin} ... {end} block")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    new = f"{head}{begin}\n{body}\n{end}{tail}"
    if new == text:
        return False
    target = path.resolve()
    problem = output_problem(target)
    if problem:
        raise UserError(f"{what} {path}: {problem}")
    write_atomic(target, new)
    return True



class NotReadable(Exception):
    """A file read_bounded does not read: a FIFO or socket (reading would wait for a writer, or take the data its
    reader is meant to get), a directory, or more bytes than the bound. The message says which, in a few words."""


def read_bounded(path: str | os.PathLike, limit: int, *, devices: bool = False) -> bytes:
    """A file's bytes, never blocking and never more than `limit` of them: a regular file (and, with `devices`, a
    character device such as /dev/null, read until it has nothing more now). OSError as opening it gives
    (FileNotFoundError: absent); NotReadable for a FIFO, socket, directory, or a file larger than `limit`."""
    import stat

    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if stat.S_ISFIFO(st.st_mode) or stat.S_ISSOCK(st.st_mode):
            raise NotReadable(f"{'a FIFO' if stat.S_ISFIFO(st.st_mode) else 'a socket'}, not a regular file")
        if stat.S_ISDIR(st.st_mode):
            raise NotReadable("a directory, not a file")
        if not (stat.S_ISREG(st.st_mode) or devices and stat.S_ISCHR(st.st_mode)):
            raise NotReadable("not a regular file")
        if st.st_size > limit:
            raise NotReadable(f"{st.st_size} bytes, more than {limit}")
        chunks, size = [], 0
        while size <= limit:
            try:
                chunk = os.read(fd, limit + 1 - size)
            except BlockingIOError:  # a device with nothing to give now
                break
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise NotReadable(f"more than {limit} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)
