"""How the installed sglang reads one of its boolean environment switches (SGLANG_ENABLE_SPLITKV_VERIFY, ...), so
that doctor says what the server will do with the value it sees, not what we would make of it.

sglang's `envs` (srt/environ.py): `EnvBool.parse` lowercases the value, nothing stripped, and takes
true/1/yes/y as on and false/0/no/n as off (0.5.9, 0.5.14, 0.5.23 alike); `EnvField.get` gives an unset switch its
default and any other value the default too, with a warning. So `off` and `" 0"` leave a switch that defaults to
on, on, and `n` turns it off.

The rule is read from the installed sglang's own srt/environ.py: its `EnvBool.parse`, with `ast` (nothing of sglang
is imported or run: importing it pulls in transformers). Where that file cannot be read or its parse has another
shape, the rule is the base line's the installed version belongs to (base.toml [serving] bool_env_true and
bool_env_false, recorded from the same source). A switch's default: its `EnvBool(<default>)` in the same file,
else the caller's (what our patch that adds it sets).
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..errors import UserError
from ..patchset.bases import Base, list_bases, serving_line

ENVIRON_PY = Path("srt") / "environ.py"
STR_METHODS = frozenset({"lower", "upper", "casefold", "strip", "lstrip", "rstrip"})  # what a parse may apply
MAX_SOURCE_BYTES = 4 << 20  # environ.py is ~100 KB; a larger file is not sglang's


@dataclass(frozen=True)
class BoolRule:
    true: tuple[str, ...]
    false: tuple[str, ...]
    transforms: tuple[str, ...]  # str methods applied to the value first, in order ("lower",)
    source: str  # where it was read: the installed environ.py, or the base line's data

    def parse(self, value: str) -> bool | None:
        """on / off as sglang reads `value`; None: not a value it reads (it keeps the default, with a warning)."""
        for m in self.transforms:
            value = getattr(value, m)()
        return True if value in self.true else False if value in self.false else None

    def text(self) -> str:
        how = ", ".join(f"{m}()" for m in self.transforms) or "as written"
        return f"{'/'.join(self.true)} on, {'/'.join(self.false)} off, the value taken {how}"


@dataclass(frozen=True)
class Reading:
    name: str
    value: str | None  # as set (None: unset)
    on: bool  # what sglang does
    understood: bool  # False: a value sglang does not read (it warns and keeps the default)
    default: bool

    def text(self) -> str:
        """What doctor says it saw: `SGLANG_X='n' (off)`, `SGLANG_X unset (default on)`, ..."""
        state = "on" if self.on else "off"
        if self.value is None:
            return f"{self.name} unset (default {state})"
        if not self.understood:
            return f"{self.name}={self.value!r}, not a value sglang reads: it warns and keeps the default, {state}"
        return f"{self.name}={self.value!r} ({state})"


def _source(root: Path) -> ast.Module | None:
    path = root / ENVIRON_PY
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_SOURCE_BYTES + 1)
        if len(data) > MAX_SOURCE_BYTES:
            return None
        return ast.parse(data, filename=str(path))
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _strings(node: ast.expr) -> tuple[str, ...] | None:
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)) and all(
            isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
        return tuple(e.value for e in node.elts)  # type: ignore[attr-defined]
    return None


def rule_from_source(tree: ast.Module, source: str) -> BoolRule | None:
    """EnvBool.parse of an environ.py, if it has the shape sglang's has: `value = value.<str method>()` steps, then
    `if value in [...]: return True` and `... return False`, then a raise; None for anything else."""
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "EnvBool"), None)
    fn = next((n for n in (cls.body if cls else []) if isinstance(n, ast.FunctionDef) and n.name == "parse"), None)
    if fn is None or len(fn.args.args) != 2:
        return None
    var = fn.args.args[1].arg
    transforms: list[str] = []
    found: dict[bool, tuple[str, ...]] = {}
    for st in fn.body:
        if isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant):
            continue  # a docstring
        if (isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name)
                and st.targets[0].id == var and isinstance(st.value, ast.Call) and not st.value.args
                and isinstance(st.value.func, ast.Attribute) and st.value.func.attr in STR_METHODS
                and isinstance(st.value.func.value, ast.Name) and st.value.func.value.id == var and not found):
            transforms.append(st.value.func.attr)
            continue
        if (isinstance(st, ast.If) and not st.orelse and isinstance(st.test, ast.Compare)
                and isinstance(st.test.left, ast.Name) and st.test.left.id == var and len(st.test.ops) == 1
                and isinstance(st.test.ops[0], ast.In) and (values := _strings(st.test.comparators[0])) is not None
                and len(st.body) == 1 and isinstance(st.body[0], ast.Return)
                and isinstance(st.body[0].value, ast.Constant) and isinstance(st.body[0].value.value, bool)
                and st.body[0].value.value not in found):
            found[st.body[0].value.value] = values
            continue
        if isinstance(st, ast.Raise) and len(found) == 2:
            return BoolRule(true=found[True], false=found[False], transforms=tuple(transforms), source=source)
        return None
    return None


def defaults_from_source(tree: ast.Module) -> dict[str, bool]:
    """`NAME = EnvBool(<True|False>)` (or EnvBoolWithAlias) anywhere in the file: the switches' defaults."""
    out: dict[str, bool] = {}
    for n in ast.walk(tree):
        if (isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
                and isinstance(n.value, ast.Call) and isinstance(n.value.func, ast.Name)
                and n.value.func.id.startswith("EnvBool") and n.value.args
                and isinstance(n.value.args[0], ast.Constant) and isinstance(n.value.args[0].value, bool)):
            out[n.targets[0].id] = n.value.args[0].value
    return out


def rule_of_line(base: Base) -> BoolRule:
    s = base.serving
    return BoolRule(true=s.bool_env_true, false=s.bool_env_false, transforms=("lower",),
                    source=f"base {base.name}'s recorded rule (base.toml [serving])")


@dataclass(frozen=True)
class SglangEnv:
    """The installed sglang's rule and the defaults its environ.py declares."""

    rule: BoolRule
    defaults: dict[str, bool]

    def read(self, name: str, default: bool, environ: Mapping[str, str]) -> Reading:
        d = self.defaults.get(name, default)
        value = environ.get(name)
        if value is None:
            return Reading(name, None, d, True, d)
        got = self.rule.parse(value)
        return Reading(name, value, d if got is None else got, got is not None, d)


def installed(root: Path | None, version: str | None) -> SglangEnv:
    """The rule of the sglang at `root` (its package directory), else of the base line of `version` (else the
    default base's)."""
    tree = _source(root) if root is not None else None
    rule = rule_from_source(tree, str(root / ENVIRON_PY)) if tree is not None and root is not None else None
    if rule is None:
        try:
            bases = list_bases()
            line = serving_line(version, bases) if version else next(b for b in bases if b.default)
        except UserError:  # a version that is not PEP 440: the default base's rule
            line = next(b for b in list_bases() if b.default)
        rule = rule_of_line(line)
    return SglangEnv(rule, defaults_from_source(tree) if tree is not None else {})
