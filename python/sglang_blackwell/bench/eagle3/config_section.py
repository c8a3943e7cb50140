"""The reader every part of a benchmark config is parsed with: `Section`, one TOML table whose unknown keys are
errors and whose typed getters name `file: [section] key` on every error; `ConfigError`, the one-line error they
raise; `read_text`, a file the config names (or the config itself) as UTF-8 text."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ...errors import UserError

INT_MAX = 2**31 - 1  # an integer key without a limit of its own: beyond it, a typo (a 310-digit number)
NUM_MAX = 1e9  # the same for a number (seconds, ratios): a timeout of 31 years, a ratio of a billion


def shown(v: object) -> str:
    """A value as an error shows it: at most 40 characters."""
    text = repr(v)
    return text if len(text) <= 40 else f"{text[:24]}...({len(text)} characters)"


class ConfigError(UserError):
    """A bad benchmark config: the message names the file and the key, in one line (a key or value with a line
    break or another control character in it is shown escaped)."""

    def __init__(self, message: str):
        super().__init__(one_line(message))


def one_line(text: str) -> str:
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


def read_text(path: Path, where: str | None = None) -> str:
    """The UTF-8 text of a file the config names (or the config itself); ConfigError naming it otherwise."""
    at = f"{where}: {path}" if where else str(path)
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{at}: not UTF-8 text (byte {e.start}: {e.reason})") from None
    except OSError as e:
        raise ConfigError(f"{at}: cannot read ({e.strerror or e})") from None


class Section:
    """One TOML table with typed getters that name `file: [section] key` on every error."""

    def __init__(self, path: Path, name: str, data: Any, allowed: set[str]):
        self.path, self.name = path, name
        if not isinstance(data, dict):
            raise self.error(None, f"must be a table, got {type(data).__name__}")
        self.data = data
        unknown = sorted(set(data) - allowed)
        if unknown:
            raise self.error(unknown[0], f"unknown key (allowed: {', '.join(sorted(allowed))})")

    def where(self, key: str | None) -> str:
        sec = f"[{self.name}]" if self.name else "top level"
        return f"{self.path}: {sec}" + (f" {key}" if key else "")

    def error(self, key: str | None, msg: str) -> ConfigError:
        return ConfigError(f"{self.where(key)}: {msg}")

    def has(self, key: str) -> bool:
        return key in self.data

    def get(self, key: str, default: Any, required: bool) -> Any:
        """The key's value as written (unchecked), or `default` when it is absent and not required."""
        if key not in self.data:
            if required:
                raise self.error(key, "missing (required)")
            return default
        return self.data[key]

    def str_(self, key: str, default: str | None = None, *, required: bool = False) -> str | None:
        v = self.get(key, default, required)
        if v is not None and (not isinstance(v, str) or not v):
            raise self.error(key, f"expected a non-empty string, got {v!r}")
        return v

    def bool_(self, key: str, default: bool) -> bool:
        v = self.get(key, default, False)
        if not isinstance(v, bool):
            raise self.error(key, f"expected true or false, got {v!r}")
        return v

    def int_(self, key: str, default: int | None = None, *, required: bool = False, min_: int = 1,
             max_: int = INT_MAX) -> int:
        v = self.get(key, default, required)
        if isinstance(v, bool) or not isinstance(v, int) or not min_ <= v <= max_:
            raise self.error(key, f"expected an integer from {min_} to {max_}, got {shown(v)}")
        return v

    def num(self, key: str, default: float | None = None, *, required: bool = False,
            min_: float = 0.0, max_: float = NUM_MAX) -> float | None:
        v = self.get(key, default, required)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not min_ <= v <= max_:
            raise self.error(key, f"expected a finite number from {min_:g} to {max_:g}, got {shown(v)}")
        return float(v)

    def str_list(self, key: str, default: list[str] | None = None, *,
                 required: bool = False) -> tuple[str, ...]:
        v = self.get(key, default if default is not None else [], required)
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise self.error(key, f"expected a list of strings, got {v!r}")
        return tuple(v)

    def env(self, key: str) -> dict[str, str]:
        v = self.get(key, {}, False)
        if not isinstance(v, dict):
            raise self.error(key, f"expected a table of NAME = \"value\", got {v!r}")
        for k, x in v.items():
            if not isinstance(x, str):
                raise self.error(f"{key}.{k}", f"expected a string value (TOML: {k} = \"1\"), got {x!r}")
        return dict(v)
