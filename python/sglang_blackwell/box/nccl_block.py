"""The managed block's bytes: the startup block (Python), the NCCL config-file block and the pth hook's .pth
file, each between the BEGIN and END marker lines with a META line of JSON (profile, hook, and the two flags that
let uninstall remove exactly what install added); found in a file's bytes (a damaged block is an error naming the
fix), put in place of an earlier one or appended after the user's bytes, and taken out again. Bytes in, bytes
out: putting a block into a file is nccl_edit.py's.
The startup block only touches os.environ (os is already imported at that point): no torch, NVML or CUDA.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from ..errors import UserError
from . import nccl_conf as conf
from .nccl import APPLIED_ENV, CONF_WAS_ENV, KILL_SWITCH, OFF_VALUES
from .nccl_target import HOOK_MODULE

BEGIN = b"# >>> sglang-blackwell nccl >>>"
END = b"# <<< sglang-blackwell nccl <<<"
META = b"# sglang-blackwell-nccl: "

_BEGIN_RE = re.compile(rb"(?m)^" + re.escape(BEGIN))
_END_RE = re.compile(rb"(?m)^" + re.escape(END) + rb"[^\n]*(?:\n|$)")


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


def render_pth_block(meta: dict[str, Any]) -> bytes:
    """The .pth file of the pth hook: comment lines (site skips them) around the line that imports the module."""
    lines = [BEGIN.decode() + " (managed: `sglang-blackwell nccl uninstall` removes it; edits here are lost)",
             _meta_line(meta), f"import {HOOK_MODULE}", END.decode()]
    return ("\n".join(lines) + "\n").encode("ascii")


# what a .pth file of ours looked like before it was a managed block: still recognised, replaced, removed
LEGACY_PTH = (f"# sglang-blackwell nccl hook (managed; `sglang-blackwell nccl uninstall` removes it)\n"
              f"import {HOOK_MODULE}\n").encode()


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
