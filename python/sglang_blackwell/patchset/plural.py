"""A count and its noun in the right number, for every "N things" the CLI prints: `1 patch`, `6 patches`."""

from __future__ import annotations

import re

_SIBILANT = re.compile(r"(s|x|z|ch|sh)$")
_CONSONANT_Y = re.compile(r"[^aeiou]y$")


def plural(noun: str) -> str:
    """English's regular plural: patch -> patches, dependency -> dependencies, file -> files, key -> keys."""
    if _SIBILANT.search(noun):
        return noun + "es"
    if _CONSONANT_Y.search(noun):
        return noun[:-1] + "ies"
    return noun + "s"


def counted(n: int, noun: str, many: str | None = None) -> str:
    """`n noun`, the noun plural unless n is 1; `many` for a plural the rule gets wrong (counted(2, "child",
    "children"))."""
    return f"{n} {noun if n == 1 else many or plural(noun)}"
