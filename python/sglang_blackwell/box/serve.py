"""`sglang-blackwell serve [--table T] [--profile P] [--dry-run] -- <sglang launch_server args>`

Launches `python -m sglang.launch_server` with the all-reduce dispatch the tuner measured for this box (the
per-topology table `bench allreduce --tune` writes) turned into the patched server's upstream-style knobs (P7:
env vars, fusion / symm-mem flags), the NCCL profile for the topology, and the recommended flags for the
detected topology and TP size (on SM12x, a speculative launch gets the attention backend its receipts measured:
box/attention_backend.py). It prints what it chose and why before it starts the server. What the user set
(flags on the command line, variables in the environment) always wins. A --host beyond loopback without
--api-key is refused unless --allow-unauthenticated (box/exposure.py).
"""

from __future__ import annotations

import importlib.metadata as md
import os
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..patchset.bases import Base, list_bases, serving_line
from . import attention_backend, exposure, sglang_argv
from .allreduce_table import SYMM_MEM_FLAG, default_table_path, knobs_from_table, load_table, topology_key
from .topology import Topology


@dataclass
class ServePlan:
    argv: list[str]
    env: dict[str, str]  # what serve adds to the environment (never overrides the user's)
    added_flags: list[str]
    why: list[str] = field(default_factory=list)
    line: str = ""
    tp: int = 1

    def command_line(self) -> str:
        """The launch as a shell line, the values of --api-key / --admin-api-key masked (it is printed)."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        return (env + " " if env else "") + shlex.join(sglang_argv.mask_keys(self.argv))


NOT_INSTALLED = "sglang is not installed in this environment (sglang-blackwell install)"


def sglang_line(version: str | None, lines: list[Base] | None = None) -> Base:
    """Which base line's flags an installed sglang speaks; without sglang, the default base's (what
    `sglang-blackwell install` puts there): a dry run plans for it, a launch refuses (run())."""
    if version is None:
        return next(b for b in (lines if lines is not None else list_bases()) if b.default)
    return serving_line(version, lines)


def fusion_flag_groups(lines: list[Base]) -> list[tuple[str, ...]]:
    """Every line's fusion on / off flag sequences (a flag and its value, e.g. --...-backend trtllm)."""
    groups = {g for b in lines for g in (b.serving.fusion_on_flags, b.serving.fusion_off_flags) if g}
    return sorted(groups)


def tp_size(args: list[str]) -> int:
    """The TP size sglang will run with these arguments (the last TP flag, after merging a --config file)."""
    return sglang_argv.read(args).tp


def plan(sglang_args: list[str], *, topology: Topology, table_path: Path | None, profile: str | None,
         environ: dict[str, str], sglang_version: str | None, python: str = sys.executable,
         allow_unauthenticated: bool = False) -> ServePlan:
    from .nccl import load_profiles, resolve

    parsed = sglang_argv.read(sglang_args)  # bad input first, whatever is installed
    access = exposure.check(parsed, allow_unauthenticated=allow_unauthenticated)
    lines = list_bases()
    line = sglang_line(sglang_version, lines).name
    groups = fusion_flag_groups(lines)
    fusion_flags = {g[0] for g in groups}
    tp = parsed.tp
    stack = f"sglang {sglang_version}" if sglang_version else "sglang not installed"
    why: list[str] = [f"{stack} (flags of the {line} line), {parsed.tp_why()}, {topology.summary()}"]
    if sglang_version is None:
        why.append(f"sglang is not installed in the environment of {python}: planned for the default base line "
                   f"{line} (what `sglang-blackwell install` installs there); only a launch needs it")
    if parsed.config:
        why.append(f"--config {parsed.config}: its settings read as sglang merges them (the command line wins)")
    why += access
    env: dict[str, str] = {}
    flags: list[str] = []
    given = parsed.tokens  # what sglang parses: the command line with the config file's arguments in front
    user_fusion = any(a.split("=")[0] in fusion_flags for a in given)
    user_symm = SYMM_MEM_FLAG in given

    knobs: dict[str, Any] = {"env": {}, "server_args": {}, "nccl_profile": None}
    if topology.gpu_count == 0:
        why.append("no GPU detected: no all-reduce tuning applied")
    elif table_path is not None and table_path.exists():
        knobs = knobs_from_table(load_table(table_path), topology_key(topology, tp))
        why += [f"table {table_path}:"] + [f"  {w}" for w in knobs["why"]]
    else:
        why.append(f"no all-reduce table at {table_path} (run `sglang-blackwell bench allreduce --tune`): "
                   "upstream dispatch defaults")

    for k, v in {**knobs.get("env", {}), **knobs.get("env_by_line", {}).get(line, {})}.items():
        if k in environ:
            why.append(f"{k}: keeping your {environ[k]} (table: {v})")
        else:
            env[k] = str(v)
    table_flags = knobs.get("server_args", {}).get(line, [])
    for f in list(table_flags):
        if f.startswith("--") and ((f.split("=")[0] in fusion_flags and user_fusion)
                                   or (f == SYMM_MEM_FLAG and user_symm)):
            why.append(f"{f}: you set the fusion / symm-mem flags yourself; keeping yours")
            group = next((g for g in groups if g[0] == f), (f,))  # the flag with its value(s)
            i = table_flags.index(f)
            if tuple(table_flags[i:i + len(group)]) == group:
                del table_flags[i:i + len(group)]
            else:
                del table_flags[i]
    flags += table_flags

    # recommended flags for the topology: custom all-reduce never runs on > 2 PCIe-only GPUs upstream
    if topology.pcie_only and tp > 2 and "--disable-custom-all-reduce" not in given:
        flags.append("--disable-custom-all-reduce")
        why.append("--disable-custom-all-reduce: sglang's custom all-reduce does not run on more than two "
                   "PCIe-only GPUs (this states it instead of a start-up warning)")

    # the attention backend the speculative receipts measured (P8 / P11 are Triton kernels), unless the user chose
    choice = attention_backend.choose(parsed, topology)
    flags += choice.flags
    why.append(choice.why)

    # NCCL: the profile the table recommends, else the one for this topology; setdefault semantics
    requested = profile or knobs.get("nccl_profile") or "auto"
    res = resolve(requested, topology, load_profiles())
    kept = []
    for k, v in res.profile.env.items():
        if k in environ:
            kept.append(k)
        else:
            env.setdefault(k, v)
    why.append(f"NCCL profile {res.profile.name} ({res.reason})"
               + (f"; keeping your {', '.join(kept)}" if kept else ""))
    argv = [python, "-m", "sglang.launch_server", *sglang_args, *flags]
    return ServePlan(argv=argv, env=env, added_flags=flags, why=why, line=line, tp=tp)


def installed_sglang_version() -> str | None:
    try:
        return md.version("sglang")
    except md.PackageNotFoundError:
        return None


def run(sglang_args: list[str], *, table: str | None, profile: str | None, dry_run: bool,
        allow_unauthenticated: bool = False) -> int:
    from .topology import detect

    table_path = Path(table) if table else default_table_path()
    if table and not table_path.exists():
        raise UserError(f"--table {table}: no such file")
    version = installed_sglang_version()
    p = plan(sglang_args, topology=detect(), table_path=table_path, profile=profile, environ=dict(os.environ),
             sglang_version=version, allow_unauthenticated=allow_unauthenticated)
    if version is None and not dry_run:  # the plan is still checked first: bad arguments are named before this
        raise UserError(f"{NOT_INSTALLED}; --dry-run prints the plan without it")
    print("sglang-blackwell serve" + (" --dry-run (nothing started):" if dry_run else ":"), file=sys.stderr)
    for w in p.why:
        print(f"  {w}", file=sys.stderr)
    print(f"  env added: {' '.join(f'{k}={v}' for k, v in sorted(p.env.items())) or '(none)'}", file=sys.stderr)
    print(f"  flags added: {shlex.join(p.added_flags) or '(none)'}", file=sys.stderr)
    print(f"  command: {p.command_line()}", file=sys.stderr, flush=True)
    if dry_run:
        return 0
    os.execvpe(p.argv[0], p.argv, {**os.environ, **p.env})
    return 0  # not reached
