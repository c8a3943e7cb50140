"""What is installed in a target environment: the managed startup blocks in its site-packages (sitecustomize.py,
the pth hook's module), then the NCCL config-file blocks, in the files a startup block names and in the files NCCL
reads in a fresh interpreter of the target; for each, its profile and whether it runs (a shadowing sitecustomize,
a missing .pth file, site-packages off sys.path; for a config file: whether NCCL reads it here)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import UserError
from . import nccl_conf as conf
from .nccl_block import find_block
from .nccl_conf_mode import conf_unread_why
from .nccl_edit import read_or_none
from .nccl_target import Target

HOOKS = ("sitecustomize", "pth")
CONF_HOOK = "nccl-conf"


@dataclass
class Installed:
    hook: str  # "sitecustomize", "pth" or "nccl-conf"
    path: Path  # the file holding the block
    meta: dict[str, Any]
    active: bool  # does interpreter startup run it? (nccl-conf: does NCCL read the file here?)
    why_inactive: str = ""

    @property
    def profile(self) -> str:
        return self.meta["profile"]

    @property
    def env(self) -> dict[str, str]:
        return {k: v for k, v in self.meta.get("env", [])}

    @property
    def nccl_conf(self) -> str | None:
        """The NCCL config file a startup block names (NCCL-config mode)."""
        return self.meta.get("nccl_conf") if self.hook in HOOKS else None

    def to_dict(self) -> dict[str, Any]:
        return {"hook": self.hook, "path": str(self.path), "active": self.active,
                "why_inactive": self.why_inactive, "profile": self.profile,
                "requested": self.meta.get("requested"), "class": self.meta.get("class"),
                "topology": self.meta.get("topology"), "env": self.env, "nccl_conf": self.nccl_conf}


def installed(target: Target, rules: conf.Rules | None = None) -> list[Installed]:
    """Managed blocks: the startup blocks in the target's site-packages (normally zero or one), then the NCCL
    config-file blocks, in the files a startup block names and in the files NCCL reads in a fresh
    interpreter of the target."""
    out = []
    sc = read_or_none(target.sitecustomize_path)
    if sc is not None:
        b = find_block(sc, str(target.sitecustomize_path))
        if b is not None:
            why = ""
            if target.shadow:
                why = f"{target.shadow} comes first on sys.path, so this sitecustomize.py never runs"
            out.append(Installed("sitecustomize", target.sitecustomize_path, b.meta, not why, why))
    mod = read_or_none(target.module_path)
    if mod is not None:
        b = find_block(mod, str(target.module_path))
        if b is not None:
            why = "" if target.pth_path.exists() else f"{target.pth_path.name} is missing: nothing imports it"
            if not target.purelib_on_path:
                why = f"{target.purelib} is not on sys.path"
            out.append(Installed("pth", target.module_path, b.meta, not why, why))
    return out + conf_file_blocks(target, [b.nccl_conf for b in out if b.nccl_conf], rules or target.conf_rules)


def conf_file_blocks(target: Target, recorded: list[str], rules: conf.Rules) -> list[Installed]:
    """The NCCL config-file blocks in the files `recorded` (named by startup blocks) and in the files NCCL reads
    in a fresh interpreter of the target."""
    env = target.conf_environ
    reads = [p for p, _ in conf.files_read(env, rules)]
    out = []
    for path in dict.fromkeys([*map(Path, recorded), *reads]):
        try:
            data = read_or_none(path)
        except UserError:
            continue  # unreadable here: state() reports it with the file
        b = find_block(data, str(path)) if data is not None else None
        if b is None:
            continue
        active = any(conf.same_file(path, r) for r in reads)
        why = "" if active else conf_unread_why(path, env)
        out.append(Installed(CONF_HOOK, path, b.meta, active, why))
    return out

