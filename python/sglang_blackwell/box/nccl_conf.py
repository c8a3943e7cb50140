"""NCCL's own config files, read exactly as NCCL reads them: which files, in which order, and what each line
sets. `nccl show` and `doctor` report from here; the managed block in such a file is nccl_hook.py's.

NCCL's rules, from src/misc/param.cc (initEnvFunc / setEnvFile; src/os/linux.cc ncclOsSetEnv from 2.29) of
NVIDIA/nccl, read at the tags v2.22.3-1 .. v2.30.7-1 and master 5067397 (2026-06-11):
  files      $NCCL_CONF_FILE when set and non-empty (NCCL >= 2.23; a missing file is not replaced by another),
             else <home>/.nccl.conf; then /etc/nccl.conf, always. <home> is getpwuid(getuid())->pw_dir up to
             2.29 and $HOME from 2.30 (unset: no user file).
  lines      up to 2.29 getline(): only the '\\n' is removed, so a CRLF line's value keeps its '\\r'. From 2.30
             fgets() into 4096 bytes: '\\n' then one '\\r' removed, and a line of 4096 bytes or more is read
             as several pieces. A NUL byte ends the line (C strings).
  comments   a '#' in the first column (NCCL >= 2.26; before, such a line is read like any other). Nothing else
             is a comment: no inline comments, and an indented '#' line is an assignment if it has an '='.
  '='        the name is everything before the first '=', the value everything after it, byte for byte: no
             whitespace trimmed, no quotes, no escapes (`NCCL_PROTO = LL` sets "NCCL_PROTO " to " LL"). Name
             and value are cut at 1023 bytes. A line without '=' is skipped; an empty name is refused by
             setenv(); an empty value is set (empty) and so blocks the same name in a later file.
  precedence setenv(name, value, overwrite=0): the environment wins over both files, the user's file wins over
             /etc/nccl.conf, and within one file the first line for a name wins.
NCCL reads the files once per process, at its first use (communicator init, ncclGetUniqueId), into that
process's environment, so its child processes inherit the values. An NCCL_ENV_PLUGIN may change all of this.
test/unit/box/test_nccl_conf.py checks this model against the real libnccl.so.2 of two releases.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..paths import NotReadable, read_bounded

ETC_CONF = Path("/etc/nccl.conf")
CONF_ENV = "NCCL_CONF_FILE"
NAME_MAX = 1023  # envVar[1024] / envValue[1024]
FGETS_CHUNK = 4095  # char line[4096]: fgets reads at most 4095 bytes
NEWEST = (2, 30, 7)  # the newest release these rules were read at
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_CONF_BYTES = 1 << 20  # read at most this much of a config file (NCCL's own are a few lines)


@dataclass(frozen=True)
class Rules:
    """How one NCCL release reads its config files."""
    version: tuple[int, int, int]
    source: str  # where the version came from, for the reader

    @property
    def conf_file_env(self) -> bool:
        return self.version >= (2, 23, 0)

    @property
    def hash_comments(self) -> bool:
        return self.version >= (2, 26, 0)

    @property
    def fgets(self) -> bool:  # 4096-byte pieces, '\r' stripped
        return self.version >= (2, 30, 0)

    @property
    def home_from_env(self) -> bool:
        return self.version >= (2, 30, 0)

    @property
    def label(self) -> str:
        return f"NCCL {'.'.join(map(str, self.version))}"

    def to_dict(self) -> dict[str, Any]:
        return {"version": ".".join(map(str, self.version)), "source": self.source,
                "hash_comments": self.hash_comments, "strips_cr": self.fgets,
                "home": "$HOME" if self.home_from_env else "the passwd entry of the user"}


def rules_for(version: str | None, source: str = "") -> Rules:
    """The rules of NCCL `version` ("2.28.9", "2.28.9-1"); unknown or None: the newest known release's."""
    m = re.match(r"^\s*(\d+)\.(\d+)\.(\d+)", version or "")
    if not m:
        why = f"NCCL version {version!r} not understood" if version else "no NCCL found to ask"
        return Rules(NEWEST, f"{why}: the newest release known here")
    return Rules(tuple(int(x) for x in m.groups()), source or "given")  # type: ignore[arg-type]


@dataclass(frozen=True)
class Entry:
    """One assignment NCCL makes from a file line (before precedence is applied)."""
    name: str
    value: str
    line: int  # 1-based line number in the file
    offset: int  # byte offset of that line's start


@dataclass
class ConfFile:
    path: Path
    role: str  # "NCCL_CONF_FILE", "~/.nccl.conf" or "/etc/nccl.conf"
    exists: bool = False
    error: str | None = None  # it cannot be opened or read (NCCL cannot either)
    unread: str | None = None  # we did not read it, and why: a FIFO (reading would wait or take its data), too big
    entries: list[Entry] = field(default_factory=list)  # every assignment, in file order
    hazards: list[str] = field(default_factory=list)  # lines that do not do what they look like
    data: bytes = b""
    managed: tuple[int, int] | None = None  # byte range of a sglang-blackwell managed block in it


    @property
    def values(self) -> dict[str, Entry]:
        """What this file alone sets: the first line for each name wins."""
        out: dict[str, Entry] = {}
        for e in self.entries:
            out.setdefault(e.name, e)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"path": str(self.path), "role": self.role, "exists": self.exists, "error": self.error,
                "unread": self.unread,
                "values": {k: e.value for k, e in self.values.items()}, "hazards": list(self.hazards),
                "managed_block": self.managed is not None}


def _decode(b: bytes) -> str:
    return b.decode("utf-8", "surrogateescape")  # as os.environ decodes the environment


def _lines(data: bytes, rules: Rules) -> list[tuple[int, int, bytes, bool]]:
    """(line number, offset, bytes as setEnvFile sees them after its end-of-line handling, whether a '\r'
    was removed)."""
    out = []
    pos, number = 0, 0
    while pos < len(data):
        nl = data.find(b"\n", pos)
        end = len(data) if nl < 0 else nl + 1
        number += 1
        if rules.fgets:  # fgets: pieces of at most FGETS_CHUNK bytes
            while pos < end:
                piece = data[pos:min(end, pos + FGETS_CHUNK)]
                s = piece.split(b"\0", 1)[0]  # strlen()
                if s.endswith(b"\n"):
                    s = s[:-1]
                cr = s.endswith(b"\r")
                out.append((number, pos, s[:-1] if cr else s, cr))
                pos += len(piece)
        else:  # getline: the whole line; line[read-1] == '\n' removed
            raw = data[pos:end]
            if raw.endswith(b"\n"):
                raw = raw[:-1]
            out.append((number, pos, raw.split(b"\0", 1)[0], False))
            pos = end
    return out


def parse(data: bytes | str, rules: Rules | None = None) -> tuple[list[Entry], list[str]]:
    """Every assignment NCCL makes from this file's bytes, in order, and the lines that do not do what they
    look like (a name NCCL never reads because of spaces, a value with a carriage return, ...)."""
    rules = rules or rules_for(None)
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogateescape")
    entries: list[Entry] = []
    hazards: list[str] = []
    seen: dict[str, int] = {}
    for number, offset, s, cr in _lines(data, rules):
        where = f"line {number}"
        if rules.hash_comments and s.startswith(b"#"):
            continue
        if b"=" not in s:
            if s.strip() and not s.lstrip().startswith(b"#"):
                hazards.append(f"{where}: no '=': NCCL skips it")
            continue
        name_b, value_b = s.split(b"=", 1)
        name_b, value_b = name_b[:NAME_MAX], value_b[:NAME_MAX]
        if not name_b:
            hazards.append(f"{where}: empty name: NCCL skips it")
            continue
        name, value = _decode(name_b), _decode(value_b)
        if name.lstrip().startswith("#"):
            if not rules.hash_comments:
                hazards.append(f"{where}: a comment with '=' sets the variable {name!r} in NCCL < 2.26 "
                               "(harmless, nothing reads it)")
            else:
                hazards.append(f"{where}: only a '#' in the first column starts a comment: NCCL sets the "
                               f"variable {name!r}, which nothing reads")
        elif name != name.strip() and ENV_NAME_RE.match(name.strip()):
            hazards.append(f"{where}: NCCL sets {name!r} (spaces included), not {name.strip()}: no space "
                           "around '='")
        elif not ENV_NAME_RE.match(name):
            hazards.append(f"{where}: {name!r} is not a variable name NCCL reads")
        elif cr and ENV_NAME_RE.match(name):
            hazards.append(f"{where}: a CRLF line end: NCCL >= 2.30 drops the carriage return, NCCL < 2.30 keeps "
                           f"it in {name}'s value (save the file with LF line ends)")
        elif value != value.strip():
            hazards.append(f"{where}: {name}={value!r}: the value keeps its "
                           + ("carriage return (a CRLF file; NCCL < 2.30 does not strip it)"
                              if value.endswith("\r") else "spaces (NCCL trims nothing)"))
        if name in seen:
            hazards.append(f"{where}: {name} again: NCCL keeps the first one (line {seen[name]})")
        else:
            seen[name] = number
        entries.append(Entry(name, value, number, offset))
    return entries, hazards


def read(path: Path, role: str, rules: Rules | None = None) -> ConfFile:
    """The file as NCCL reads it, read without blocking and at most MAX_CONF_BYTES (paths.read_bounded): a FIFO or
    socket is not read (opening it would wait for a writer, reading it would take the data NCCL is meant to get),
    nor a file larger than the bound; `unread` says so, in one line. A regular file or a character device
    (/dev/null, the documented way to switch the files off) is read."""
    cf = ConfFile(Path(path), role)
    try:
        cf.data = read_bounded(path, MAX_CONF_BYTES, devices=True)
    except FileNotFoundError:
        return cf
    except NotReadable as e:
        cf.exists = True
        if str(e).startswith("a directory"):
            cf.error = "Is a directory"
        else:
            cf.unread = f"{e}: not read" + (" (NCCL would wait on it for a writer)" if "FIFO" in str(e) else "")
        return cf
    except OSError as e:
        cf.error = e.strerror or str(e)
        cf.exists = os.path.lexists(path)  # False for a name too long to look up, too
        return cf
    cf.exists = True
    cf.entries, cf.hazards = parse(cf.data, rules)
    return cf


def home_dir(environ: dict[str, str], rules: Rules) -> str | None:
    if rules.home_from_env:
        return environ.get("HOME")
    import pwd

    try:
        return pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:
        return None


def files_read(environ: dict[str, str], rules: Rules | None = None) -> list[tuple[Path, str]]:
    """(path, role) of the files NCCL reads in a process with this environment, in reading order (for a
    name set in both, the first one read wins)."""
    # NCCL's order (NVIDIA/nccl src/misc/param.cc, initEnvFunc): `userFile = getenv("NCCL_CONF_FILE")`; if set
    # and non-empty setEnvFile(userFile), else setEnvFile("<home>/.nccl.conf"); then setEnvFile("/etc/nccl.conf").
    # setEnvFile sets each name with overwrite off, so the first file read wins, and the environment over both.
    # NCCL's user guide says the same of the files (env.html: "set statically in /etc/nccl.conf ... or in
    # ${NCCL_CONF_FILE} (since 2.23)"). So NCCL_CONF_FILE *replaces* ~/.nccl.conf: at most two files are read.
    rules = rules or rules_for(None)
    out: list[tuple[Path, str]] = []
    named = environ.get(CONF_ENV, "") if rules.conf_file_env else ""
    if named:
        out.append((Path(named[:NAME_MAX]), CONF_ENV))
    else:
        home = home_dir(environ, rules)
        if home:
            out.append((Path(f"{home}/.nccl.conf"[:NAME_MAX]), "~/.nccl.conf"))
    out.append((ETC_CONF, str(ETC_CONF)))
    return out


def read_all(environ: dict[str, str], rules: Rules | None = None) -> list[ConfFile]:
    return [read(p, role, rules) for p, role in files_read(environ, rules)]


def from_files(files: list[ConfFile], environ: dict[str, str]) -> dict[str, tuple[Entry, ConfFile]]:
    """name -> (entry, file) for what NCCL takes from the files in a process with this environment: names
    already in the environment are left alone, the first file and the first line win."""
    out: dict[str, tuple[Entry, ConfFile]] = {}
    for cf in files:
        for name, e in cf.values.items():
            if name not in environ and name not in out:
                out[name] = (e, cf)
    return out


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Do both paths name one file (the comparison the startup block makes: realpath)."""
    return os.path.realpath(a) == os.path.realpath(b)
