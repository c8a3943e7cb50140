"""TOML in and out: the package's one tomllib import (tomli before Python 3.11) and a writer for plain data."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

TOMLDecodeError = tomllib.TOMLDecodeError
loads = tomllib.loads


def load_file(path: Path, what: str = "") -> dict[str, Any]:
    """A TOML file's data, or a UserError naming the file: unreadable, not UTF-8, not TOML (with tomllib's line)."""
    from .errors import UserError
    from .paths import read_text

    text = read_text(path, what)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise UserError(f"{what + ' ' if what else ''}{path}: not valid TOML: {e}") from None


def _toml_key(k: str) -> str:
    return k if k and all(c.isalnum() or c in "-_" for c in k) and k.isascii() else quote(k)

def quote(s: str) -> str:
    """`s` as a TOML basic string, quotes included ("..."): every quote, backslash and control character escaped."""
    out = []
    for ch in s:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append({"\n": "\\n", "\t": "\\t", "\r": "\\r"}.get(ch, f"\\u{ord(ch):04x}"))
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'

def _toml_value(v: Any, where: str) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if v != v or v in (float("inf"), float("-inf")):
            raise ValueError(f"{where}: {v} has no TOML form here")
        return repr(v)
    if isinstance(v, str):
        return quote(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x, where) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{_toml_key(k)} = {_toml_value(x, where)}" for k, x in v.items()) + " }"
    raise ValueError(f"{where}: {type(v).__name__} has no TOML form")


def dumps(data: dict[str, Any], header: str | None = None) -> str:
    """Plain data (a parsed config) as TOML, tables as [a.b] sections, after an optional `# header` line;
    checked by parsing it back (ValueError when the data has no TOML form or does not round-trip)."""
    lines: list[str] = [f"# {header}"] if header else []

    def table(d: dict[str, Any], path: list[str]) -> None:
        if path:
            lines.extend(["", "[" + ".".join(_toml_key(p) for p in path) + "]"])
        for k, v in d.items():
            if not isinstance(v, dict):
                lines.append(f"{_toml_key(k)} = {_toml_value(v, '.'.join([*path, k]))}")
        for k, v in d.items():
            if isinstance(v, dict):
                table(v, [*path, k])

    table(data, [])
    text = "\n".join(lines).lstrip("\n") + "\n"
    if tomllib.loads(text) != data:
        raise ValueError("TOML round trip changed the config")
    return text
