"""A fake patches/<base>/base.toml for the tests, rendered from the few facts a test chooses: its patched packages
with their upstream wheels, its runtime pins, its label and CUDA. Every section is one `[base]`, `[[patched]]`
(+ `[[patched.files]]`) or `[[runtime]]` block after a blank line, keys in the order of the real bases."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class WheelPin:
    """One `[[patched.files]]` entry: the upstream wheel a patched package is built from."""

    filename: str
    url: str
    sha256: str
    size: int


def wheel_pin(whl: Path, base_url: str) -> WheelPin:
    """The pin of the wheel file `whl`, served as `base_url`/<its name>."""
    data = whl.read_bytes()
    return WheelPin(whl.name, f"{base_url}/{whl.name}", hashlib.sha256(data).hexdigest(), len(data))


@dataclass(frozen=True)
class Patched:
    """One `[[patched]]` package."""

    package: str
    distribution: str
    version: str
    files: Sequence[WheelPin]
    requires_rewrite: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Runtime:
    """One `[[runtime]]` pin; `files` are its inline `{ filename, url?, sha256 }` tables (none: no files key)."""

    name: str
    version: str
    requirement: str
    index_url: str
    files: Sequence[Mapping[str, str]] = ()


def _str(s: str) -> str:
    return json.dumps(s)  # a TOML basic string, for the plain text tests use


def _inline(d: Mapping[str, str], quote_keys: bool = False) -> str:
    return "{ " + ", ".join(f"{_str(k) if quote_keys else k} = {_str(v)}" for k, v in d.items()) + " }"


def render_base(name: str = "9.9.9", patched: Sequence[Patched] = (), runtime: Sequence[Runtime] = (), *,
                label: str = "sm120.7", cuda: str = "13.0", role: str = "test base", default: bool = True) -> str:
    """The text of base `name`'s base.toml."""
    out = [f"[base]\nname = {_str(name)}\n" + ("default = true\n" if default else "")
           + f"role = {_str(role)}\nlocal_label = {_str(label)}\ncuda = {_str(cuda)}\n"]
    for p in patched:
        block = (f"[[patched]]\npackage = {_str(p.package)}\ndistribution = {_str(p.distribution)}\n"
                 f"version = {_str(p.version)}\n")
        if p.requires_rewrite:
            block += f"requires_rewrite = {_inline(p.requires_rewrite, quote_keys=True)}\n"
        out.append(block)
        out += [f"[[patched.files]]\nfilename = {_str(f.filename)}\nurl = {_str(f.url)}\nsha256 = {_str(f.sha256)}\n"
                f"size = {f.size}\n" for f in p.files]
    for r in runtime:
        block = (f"[[runtime]]\nname = {_str(r.name)}\nversion = {_str(r.version)}\n"
                 f"requirement = {_str(r.requirement)}\nindex_url = {_str(r.index_url)}\n")
        if r.files:
            block += "files = [" + ", ".join(_inline(f) for f in r.files) + "]\n"
        out.append(block)
    return "\n".join(out)
