"""Our environment switches (SGLANG_BLACKWELL_*), read by one parser that says what it accepts:

    on:  1, true, on, yes        off: 0, false, off, no        (any case; spaces around the value ignored)
    unset or empty: the switch's default (SWITCHES)

Anything else is bad input, never a guess: `cli.main` checks every switch of SWITCHES before a command runs (exit 2,
one line naming the variable, its value and what it accepts), so `on(name)` reads a value already known good. The
NCCL startup block (box/nccl_block.py) runs in every Python process and cannot refuse anything: it is rendered from
the same OFF table and counts a value outside it as on; the CLI names such a value as the error it is.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from .errors import UserError

ON = ("1", "true", "on", "yes")
OFF = ("0", "false", "off", "no")  # this order: the NCCL startup block is rendered from it (installed blocks match)

# every switch of ours the CLI reads: name -> (default, what on means)
SWITCHES: dict[str, tuple[bool, str]] = {
    "SGLANG_BLACKWELL_OFFLINE": (False, "never download: a cold cache is an error"),
    "SGLANG_BLACKWELL_DEBUG": (False, "an unexpected exception prints its traceback instead of a crash file"),
    "SGLANG_BLACKWELL_NCCL": (True, "the managed NCCL startup block applies its profile (off: it sets nothing)"),
}


def accepted() -> str:
    return f"{', '.join(ON)} (on) or {', '.join(OFF)} (off), any case; unset or empty: the default"


def parse(name: str, value: str | None, default: bool) -> bool:
    """The switch `name` set to `value` (None: unset); a UserError naming it for a value it does not accept."""
    v = (value or "").strip().lower()
    if not v:
        return default
    if v in ON:
        return True
    if v in OFF:
        return False
    raise UserError(f"{name}={value!r}: not a switch value: expected {accepted()} ({'on' if default else 'off'})")


def on(name: str, environ: Mapping[str, str] | None = None) -> bool:
    """Whether the switch of SWITCHES is on in `environ` (default: this process's environment)."""
    env = os.environ if environ is None else environ
    return parse(name, env.get(name), SWITCHES[name][0])


def check_all(environ: Mapping[str, str] | None = None) -> None:
    """Every switch of SWITCHES holds a value the parser accepts; else the UserError of the first that does not."""
    for name in SWITCHES:
        on(name, environ)
