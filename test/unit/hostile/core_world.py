"""A small world for the core hostile cases, made without the network: a patch tree with one base (9.9.9: a
tiny sglang wheel and one patch, label locked), the upstream wheel already in the download cache, and helpers
to break pieces of it. Every case runs the real CLI in a fresh process against it (support/hostile.py), with
SGLANG_BLACKWELL_PATCHES pointing here (ENV)."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from support.fake_base import Patched, WheelPin, render_base
from support.hostile import Case
from support.wheel_world import ORIGINAL, PATCH_TEMPLATE, gate_patch, make_wheel

BASE = "9.9.9"
WHEEL = "sglang-0.0.1-py3-none-any.whl"
PATCH = "0001-gate-accepts-12.patch"
ENV = {"SGLANG_BLACKWELL_PATCHES": "{tmp}/patches", "SGLANG_BLACKWELL_CACHE": "{tmp}/cache"}


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def base_dir(tmp: Path) -> Path:
    return tmp / "patches" / BASE


def base_toml(tmp: Path) -> Path:
    return base_dir(tmp) / "base.toml"


def series_dir(tmp: Path) -> Path:
    return base_dir(tmp) / "sglang"


def cached_wheel(tmp: Path) -> Path:
    return tmp / "cache" / "artifacts" / WHEEL


def make(tmp: Path, *, lock: bool = True) -> Path:
    """The world in `tmp`; returns the base directory."""
    src = make_wheel(tmp / WHEEL, "sglang", "0.0.1", {"sglang/__init__.py": b"", "sglang/gate.py": ORIGINAL})
    data = src.read_bytes()
    cache = cached_wheel(tmp)
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_bytes(data)
    src.unlink()
    d = base_dir(tmp)
    (d / "sglang").mkdir(parents=True)
    (d / "base.toml").write_text(render_base(BASE, [Patched(
        "sglang", "sglang", "0.0.1", [WheelPin(WHEEL, f"https://example.invalid/{WHEEL}", sha256(data), len(data))])]))
    (d / "sglang" / PATCH).write_text(gate_patch())
    (d / "sglang" / "series").write_text(f"# test series\n{PATCH}\n")
    if lock:
        relock(tmp)
    return d


def relock(tmp: Path) -> None:
    """Record the base's current inputs under its label (what `label lock` does), whatever was recorded."""
    from sglang_blackwell.patchset.bases import load_base
    from sglang_blackwell.patchset.labellock import lock_path, write_lock

    lock_path(load_base(base_dir(tmp))).unlink(missing_ok=True)
    write_lock(load_base(base_dir(tmp)))


def edit_toml(tmp: Path, old: str, new: str, count: int = 1) -> None:
    p = base_toml(tmp)
    text = p.read_text()
    assert old in text, f"{old!r} not in base.toml"
    p.write_text(text.replace(old, new, count))


def set_toml(tmp: Path, key: str, value: str) -> None:
    """Replace the first `key = ...` line of base.toml (value is TOML text)."""
    p = base_toml(tmp)
    text, n = re.subn(rf"(?m)^{re.escape(key)} = .*$", f"{key} = {value}", p.read_text(), count=1)
    assert n == 1, f"no {key} line in base.toml"
    p.write_text(text)


def patch_with(subject: str = "gate: accept 12", fields: dict[str, str | None] | None = None,
               path: str = "python/sglang/gate.py", body: str = "The gate forgot SM12x; accept it.") -> str:
    """The world's patch with DEP-3 fields changed (None drops a field) or its file path changed."""
    text = gate_patch()
    for k, v in (fields or {}).items():
        if v is None:
            text = re.sub(rf"(?m)^{re.escape(k)}: .*\n", "", text, count=1)
        else:
            text = re.sub(rf"(?m)^{re.escape(k)}: .*$", f"{k}: {v}", text, count=1)
    if path != "python/sglang/gate.py":
        text = text.replace("python/sglang/gate.py", path)
    if body != "The gate forgot SM12x; accept it.":
        text = text.replace("The gate forgot SM12x; accept it.", body)
    return text.replace("Subject: [PATCH] gate: accept 12", f"Subject: [PATCH] {subject}")


def write_patch(tmp: Path, text: str | bytes, name: str = PATCH) -> Path:
    p = series_dir(tmp) / name
    p.write_bytes(text.encode() if isinstance(text, str) else text)
    return p


def manifest(dist: Path) -> dict:
    return json.loads((dist / f"manifest-{BASE}.json").read_text())


def case(id: str, item: str, argv: list[str], **kw) -> Case:
    """A hostile case in this world: its environment (ENV) under the case's own variables."""
    return Case(id, item, argv, env=dict(ENV, **kw.pop("env", {})), **kw)


def world(*steps):
    """setup: the world, then each step(tmp) in order."""
    def setup(tmp: Path) -> None:
        make(tmp)
        for s in steps:
            s(tmp)
    return setup


__all__ = ["BASE", "ENV", "PATCH", "PATCH_TEMPLATE", "WHEEL", "base_dir", "base_toml", "cached_wheel",
           "case", "edit_toml", "make", "manifest", "patch_with", "relock", "series_dir", "set_toml", "sha256",
           "world", "write_patch"]
