"""The local version label rule: one label, one set of inputs.

A patched wheel is `<upstream version>+<local_label>` (sglang-0.5.9+sm120.1). Two different wheels must never
carry the same version, or pip caches, indexes and bug reports mix them up. So patches/<base>/LABEL.lock records,
for every label a base has had, a digest of everything its wheels are made from: per package the upstream
files (name + sha256), the requirement rewrites and the patch series (names + bytes). The rule, checked by
`sglang-blackwell check` and the release workflow:

  - the base's current local_label is recorded, with exactly the current inputs;
  - a recorded label is never re-recorded with other inputs, and the current label is the newest one.

So changing, adding or dropping a patch (or re-pinning an upstream file) fails `check` until local_label is
bumped (sm120.1 -> sm120.2) and `sglang-blackwell label lock` records the new label.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..errors import UserError
from ..paths import write_atomic
from ..tomlio import load_file
from .bases import LOCAL_LABEL_RE, Base, series_for

LOCK_FILE = "LABEL.lock"
HEADER = """\
# sglang-blackwell label lock for base {base}: what the wheels of each local version label are made from.
# Written by `sglang-blackwell label lock`, checked by `sglang-blackwell check`. Never edit a recorded label:
# when patches or upstream pins change, bump local_label in base.toml (sm120.N -> sm120.N+1) and run
# `sglang-blackwell label lock --base {base}`.
"""


def label_number(label: str) -> int:
    return int(label.rsplit(".", 1)[1])


def current_inputs(base: Base) -> dict[str, str]:
    """{"inputs": digest of everything, <package>: digest of that package's series}."""
    out: dict[str, str] = {}
    whole = hashlib.sha256()
    for pkg in sorted(base.patched, key=lambda p: p.package):
        series = series_for(base, pkg.package)
        out[pkg.package] = series.sha256
        facts = {"distribution": pkg.distribution, "version": pkg.version,
                 "files": sorted((f.filename, f.sha256) for f in pkg.files),
                 "requires_rewrite": sorted(pkg.requires_rewrite.items()), "series": series.sha256}
        whole.update(json.dumps({pkg.package: facts}, sort_keys=True).encode())
    return {"inputs": whole.hexdigest(), **out}


def lock_path(base: Base) -> Path:
    return base.dir / LOCK_FILE


def read_lock(base: Base) -> dict[str, dict[str, str]]:
    path = lock_path(base)
    if not path.exists() and not path.is_symlink():
        return {}
    data = load_file(path)
    labels = data.get("labels", {})
    if not isinstance(labels, dict) or set(data) - {"labels"}:
        raise UserError(f"{path}: expected only [labels.\"sm120.N\"] tables")
    for label, rec in labels.items():
        if not LOCAL_LABEL_RE.match(label):
            raise UserError(f"{path}: [labels.{label!r}]: {label!r} is not a local label like sm120.N")
        if not isinstance(rec, dict) or not all(isinstance(v, str) for v in rec.values()) or "inputs" not in rec:
            raise UserError(f"{path}: [labels.\"{label}\"] must be a table of digests (strings) with 'inputs'")
    return labels


def _changed(old: dict[str, str], new: dict[str, str]) -> str:
    pkgs = [k for k in new if k != "inputs" and old.get(k) != new[k]]
    return (f"the {', '.join(pkgs)} series changed" if pkgs else "upstream pins or requirement rewrites changed")


def lock_problems(base: Base) -> list[str]:
    path = lock_path(base)
    try:
        labels = read_lock(base)
    except UserError as e:
        return [str(e)]
    fix = f"bump local_label in {base.dir / 'base.toml'} and run `sglang-blackwell label lock --base {base.name}`"
    if not labels:
        return [f"{path}: missing or empty: run `sglang-blackwell label lock --base {base.name}`"]
    now = current_inputs(base)
    rec = labels.get(base.local_label)
    if rec is None:
        return [f"{path}: local_label {base.local_label} is not recorded: run "
                f"`sglang-blackwell label lock --base {base.name}`"]
    probs = []
    if rec.get("inputs") != now["inputs"]:
        probs.append(f"base {base.name}: wheels labelled +{base.local_label} were made from other inputs "
                     f"({_changed(rec, now)} since {base.local_label} was recorded in {path}): {fix}")
    newest = max(labels, key=label_number)
    if newest != base.local_label:
        probs.append(f"base {base.name}: local_label {base.local_label} is older than the recorded {newest}: "
                     "labels only go up")
    return probs


def write_lock(base: Base) -> str:
    """Record the current label with the current inputs. Refuses to re-record a label with other inputs, or a
    label below the newest recorded one. Returns what happened."""
    labels = read_lock(base)
    now = current_inputs(base)
    rec = labels.get(base.local_label)
    if rec is not None:
        if rec.get("inputs") == now["inputs"]:
            return f"{lock_path(base)}: {base.local_label} already recorded with these inputs"
        raise UserError(f"{lock_path(base)}: {base.local_label} was recorded with other inputs "
                        f"({_changed(rec, now)}): bump local_label in base.toml first")
    if labels and label_number(base.local_label) <= max(map(label_number, labels)):
        raise UserError(f"{lock_path(base)}: local_label {base.local_label} is not above the recorded "
                        f"{max(labels, key=label_number)}")
    labels[base.local_label] = now
    body = HEADER.format(base=base.name)
    for label in sorted(labels, key=label_number):
        body += f'\n[labels."{label}"]\n' + "".join(f'{k} = "{v}"\n' for k, v in sorted(labels[label].items()))
    path = lock_path(base)
    write_atomic(path, body)
    return f"{path}: recorded {base.local_label}"
