"""What a base adds to the resolution of its locks (lock.py): patches/<base>/locks/lock.toml, and the constraint
files it names.

  [constraints]            # pip constraint files per Python (paths relative to lock.toml), e.g. the lab's
  "3.12" = "../../../benchmark/lab/bundle-deps-0.5.14-py312.txt"   # proven list, so `bundle --deps` agrees
  [not_lockable]           # constraint lines a consistent resolution cannot take: left out of the resolution;
  cuda-tile = "why"        # the constrained pin is recorded with its hash (`lock-not-lockable`) for bundle only
  [unsupported]            # Pythons the pinned wheels name but the index cannot complete with wheels: no lock,
  "3.13" = "why"           # and install / bundle say why

A constraint file is a requirement file (requirement_lines.py) without hashes; its exact pins (`name==version`)
are what the resolution takes from it, a later file's pin of a name winning.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import canonicalize_name

from ..errors import UserError
from ..patchset.bases import Base
from ..tomlio import load_file
from .deps import Target
from .requirement_lines import read_requirement_lines

RECIPE = "lock.toml"


@dataclass(frozen=True)
class Recipe:
    """A base's lock.toml (path None: it has none)."""

    path: Path | None
    constraints: dict[str, list[str]]  # python -> paths relative to lock.toml
    not_lockable: dict[str, str]  # canonical name -> why
    unsupported: dict[str, str] = field(default_factory=dict)  # python -> why there is no lock

    def constraint_files(self, python: str) -> list[Path]:
        assert self.path is not None or not self.constraints.get(python)
        return [(self.path.parent / p).resolve() for p in self.constraints.get(python, [])] if self.path else []


def load_recipe(base: Base) -> Recipe:
    path = base.dir / "locks" / RECIPE
    if not path.exists():
        return Recipe(None, {}, {}, {})
    data = load_file(path)
    unknown = sorted(set(data) - {"constraints", "not_lockable", "unsupported"})
    if unknown:
        raise UserError(f"{path}: unknown table(s) {unknown} (known: constraints, not_lockable, unsupported)")
    cons: dict[str, list[str]] = {}
    for py, v in data.get("constraints", {}).items():
        Target(py).version_tuple  # noqa: B018 - validates MAJOR.MINOR
        files = [v] if isinstance(v, str) else v
        if not isinstance(files, list) or not all(isinstance(f, str) and f for f in files):
            raise UserError(f"{path}: constraints.{py!r}: expected a path or a list of paths")
        cons[py] = files
    nl = {}
    for k, why in data.get("not_lockable", {}).items():
        if not isinstance(why, str) or not why.strip():
            raise UserError(f"{path}: not_lockable.{k}: say why (a non-empty string)")
        nl[canonicalize_name(k)] = why.strip()
    unsupported = {}
    for py, why in data.get("unsupported", {}).items():
        Target(py).version_tuple  # noqa: B018 - validates MAJOR.MINOR
        if not isinstance(why, str) or not why.strip():
            raise UserError(f"{path}: unsupported.{py!r}: say why (a non-empty string)")
        unsupported[py] = why.strip()
    return Recipe(path, cons, nl, unsupported)


def constraint_pins(files: list[Path]) -> dict[str, tuple[str, Path, int]]:
    """name -> (exact version, file, line) of every exact pin of the constraint files (other lines: not pins)."""
    out: dict[str, tuple[str, Path, int]] = {}
    for f in files:
        for r in read_requirement_lines(f, "constraint file"):
            version = r.pinned_version
            if version is not None:
                out[r.name] = (version, f, r.number)
    return out
