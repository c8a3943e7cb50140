"""qualify's plan: every input checked and every step's configuration decided before anything is written."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..box.topology import Topology
from ..errors import UserError
from ..limits import tp_problem
from ..paths import repo_root

STEPS = ("doctor", "gpu-tests", "allreduce", "eagle3")
DEFAULT_TEMPLATE = "benchmark/kimi-k2.5-8xpcie.toml"  # the target box: used with --target/--draft alone
RESERVED_ARGS = {  # set by qualify itself; passing them through --<step>-args would contradict the plan
    "allreduce": ("--tp", "--out", "--table", "--from-receipt", "--list-backends"),
    "eagle3": ("--config", "--out", "--from-runs", "--attach"),
    "gpu-tests": ("--junitxml", "--junit-xml"),
}

Progress = Callable[[str], None]


@dataclass
class Eagle3Plan:
    config_path: Path  # the config as given or the template
    raw: dict[str, Any]  # what will run (model paths / tp / prompts rewritten where derived)
    derived: bool  # True: qualify writes raw as a new TOML into the output directory
    tp: int
    name: str
    why: str  # where the config came from, for the receipt


@dataclass
class Plan:
    out: Path
    pack: Path | None
    skip: dict[str, str]  # step -> why (from --skip)
    fail_fast: bool
    tp: int | None  # --tp as given
    gpus: int
    topology: Topology
    checkout: Path | None
    eagle3: Eagle3Plan | None
    lab_pair: Path | None
    gpu_tests: list[str] | None  # --gpu-tests as given
    repeats: int | None
    extra: dict[str, list[str]]  # step -> extra arguments
    python: str
    echo: bool
    options: dict[str, Any]
    progress: Progress = field(default=lambda msg: None)
    versions: dict[str, Any] | None = None  # the stack's versions once a step has recorded them (doctor)
    warnings: list[str] = field(default_factory=list)  # said at the start, kept in the receipt
    pack_found: tuple[int, ...] | None = None  # the --pack file as it was when the run began (None: absent)


def parse_skip(text: str) -> dict[str, str]:
    names = [n.strip() for n in (text or "").split(",") if n.strip()]
    unknown = [n for n in names if n not in STEPS]
    if unknown:
        raise UserError(f"--skip: unknown step {unknown[0]!r} (steps: {', '.join(STEPS)})")
    return {n: "--skip" for n in names}


def _split_args(opt: str, text: str, step: str) -> list[str]:
    try:
        args = shlex.split(text or "")
    except ValueError as e:
        raise UserError(f"{opt}: cannot split {text!r}: {e}") from None
    for a in args:
        if a.split("=", 1)[0] in RESERVED_ARGS.get(step, ()):
            raise UserError(f"{opt}: {a.split('=', 1)[0]} is set by qualify itself; "
                            f"see `sglang-blackwell qualify --help`")
    return args


def _model_dir(opt: str, value: str) -> Path:
    p = Path(value).expanduser()
    if not p.is_dir():
        raise UserError(f"{opt} {value}: no such directory (give the local model directory; Hugging Face ids "
                        "go into a --config)")
    if not (p / "config.json").is_file():
        raise UserError(f"{opt} {value}: not a model directory (no config.json)")
    return p.resolve()


def _looks_local(path: str) -> bool:
    return path.startswith(("/", "./", "../", "~"))


def _checkout() -> Path | None:
    """The sglang-blackwell checkout this code runs from, else the current directory if it is one."""
    root = repo_root()
    if root is not None and (root / "test" / "gpu").is_dir():
        return root
    cwd = Path.cwd()
    if (cwd / "test" / "gpu").is_dir() and (cwd / "benchmark").is_dir():
        return cwd
    return root


def plan_eagle3(a: argparse.Namespace, checkout: Path | None, gpus: int) -> Eagle3Plan | None:
    """The bench eagle3 config to run, validated now (None: no model paths given, the step is skipped)."""
    from ..bench.eagle3.config import load_config, parse_config

    if not (a.config or a.target or a.draft):
        return None
    target = _model_dir("--target", a.target) if a.target else None
    draft = _model_dir("--draft", a.draft) if a.draft else None
    if a.config:
        path = Path(a.config).expanduser().resolve()
        why = f"--config {a.config}" + (" with --target/--draft" if target or draft else "")
    else:
        if not (target and draft):
            raise UserError("bench eagle3 needs both --target PATH and --draft PATH (or a --config)")
        if checkout is None or not (checkout / DEFAULT_TEMPLATE).is_file():
            raise UserError(f"--target/--draft without --config use {DEFAULT_TEMPLATE} of a sglang-blackwell "
                            "checkout, and none is here: run from a checkout or pass --config FILE")
        path = checkout / DEFAULT_TEMPLATE
        why = f"{DEFAULT_TEMPLATE} (the target box's flags and arms) with --target/--draft"
    cfg = load_config(path)  # ConfigError (a UserError) names the file and key
    raw = json.loads(json.dumps(cfg.raw))  # deep copy
    derived = False
    if target:
        raw["model"]["target"] = str(target)
        derived = True
    if draft:
        raw["model"]["draft"] = str(draft)
        derived = True
    tp = cfg.server.tp
    if a.tp is not None and a.tp != tp:
        tp = raw["server"]["tp"] = a.tp
        why += f", --tp {a.tp}"
        derived = True
    elif not a.config and gpus and gpus != tp:
        tp = raw["server"]["tp"] = gpus  # the template on a box with another GPU count: all of them
        why += f", TP={gpus} (every GPU here)"
        derived = True
    for key in ("target", "draft"):
        v = raw["model"].get(key)
        if isinstance(v, str) and _looks_local(v) and not Path(v).expanduser().is_dir():
            raise UserError(f"{path}: [model] {key} = {v!r}: no such directory"
                            + ("" if target or draft else " (override it with --target/--draft)"))
    if gpus and tp > gpus:
        raise UserError(f"bench eagle3 at TP={tp} ({'--tp' if a.tp else path}) needs {tp} GPUs; "
                        f"this box has {gpus} (pass --tp {gpus})")
    if derived:  # the rewritten config lives elsewhere: its prompt file path becomes absolute
        if cfg.workload.prompts_path is not None:  # a grid config makes its prompts (workload.contexts)
            raw["workload"]["prompts"] = str(cfg.workload.prompts_path)
        raw["description"] = (cfg.description + " " if cfg.description else "") + "[qualify: " + why + "]"
        parse_config(raw, path)  # validate what will be written, now
    return Eagle3Plan(config_path=path, raw=raw, derived=derived, tp=tp, name=cfg.name, why=why)


def file_identity(path: Path) -> tuple[int, ...] | None:
    """What tells that `path` is still the very file seen before (device, inode, size, mtime); None: absent."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def default_out(now: dt.datetime | None = None, environ: dict[str, str] | None = None) -> Path:
    """Where a qualification goes without --out: $XDG_STATE_HOME/sglang-blackwell/qualify/qualify-<UTC time>/
    (~/.local/state by default): never inside a checkout, where it would lie untracked beside the repository's
    committed receipts (commit one there by giving --out benchmark/results/...)."""
    env = os.environ if environ is None else environ
    stamp = (now or dt.datetime.now(dt.timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
    state = env.get("XDG_STATE_HOME") or ""
    base = Path(state) if os.path.isabs(state) else Path(env.get("HOME") or Path.home()) / ".local" / "state"
    return base / "sglang-blackwell" / "qualify" / f"qualify-{stamp}"


def make_plan(a: argparse.Namespace, *, topology: Any = None) -> Plan:
    """Check every input; raise UserError on the first bad one. Writes nothing."""
    from ..box.topology import detect

    skip = parse_skip(a.skip)
    if len(skip) == len(STEPS):
        raise UserError(f"--skip {a.skip}: every step skipped, nothing to qualify")
    if a.tp is not None and a.tp < 1:
        raise UserError(f"--tp must be >= 1, got {a.tp}")
    if a.tp is not None and (why := tp_problem(a.tp)) is not None:
        raise UserError(f"--tp: {why} (limits.MAX_TP), got {a.tp}")
    if a.repeats is not None and a.repeats < 1:
        raise UserError(f"--repeats must be >= 1, got {a.repeats}")
    extra = {"gpu-tests": _split_args("--pytest-args", a.pytest_args, "gpu-tests"),
             "allreduce": _split_args("--allreduce-args", a.allreduce_args, "allreduce"),
             "eagle3": _split_args("--eagle3-args", a.eagle3_args, "eagle3")}
    out = Path(a.out) if a.out else default_out()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"--out {out}: exists and is not an empty directory (a qualification gets its own)")
    pack = None
    if a.pack:
        pack = Path(a.pack)
        if not pack.name.endswith((".tar.gz", ".tgz")):
            raise UserError(f"--pack {a.pack}: expected a .tar.gz (or .tgz) file name")
        if not pack.parent.is_dir():
            raise UserError(f"--pack {a.pack}: directory {pack.parent} does not exist")
        if pack.resolve().is_relative_to(out.resolve()):
            raise UserError(f"--pack {a.pack}: must not be inside --out {out}")
        if pack.is_symlink():
            raise UserError(f"--pack {a.pack}: is a symbolic link (to {os.readlink(pack)}); name a file, not a link "
                            "(the pack replaces what is there)")
        if pack.exists() and not pack.is_file():
            raise UserError(f"--pack {a.pack}: exists and is not a file")
        if not os.access(pack.parent, os.W_OK | os.X_OK):
            raise UserError(f"--pack {a.pack}: cannot write in {pack.parent}")
    lab_pair = None
    if a.lab_pair:
        lab_pair = Path(a.lab_pair).expanduser().resolve()
        for sub in ("target", "draft"):
            if not (lab_pair / sub / "config.json").is_file():
                raise UserError(f"--lab-pair {a.lab_pair}: no {sub}/config.json (generate the pair: python3 "
                                f"benchmark/models/gen_lab_pair.py --out {a.lab_pair} --device cuda)")
    warnings = []
    if lab_pair:
        from ..box.stackinfo import dist_facts
        from .gpu_suite_receipt import BASE as LAB_BASE

        sg = dist_facts("sglang")
        if sg and not sg["version"].startswith(LAB_BASE + "+") and sg["version"] != LAB_BASE:
            warnings.append(f"--lab-pair: the lab-line suite is written for sglang {LAB_BASE} (its server flags); "
                            f"this environment has sglang {sg['version']}: expect its server launches to fail")
    topo = topology if topology is not None else detect()
    gpus = topo.gpu_count
    if a.tp is not None and gpus and a.tp > gpus:
        raise UserError(f"--tp {a.tp}: this box has {gpus} GPU(s)")
    checkout = _checkout()
    gpu_tests = [t.strip() for t in a.gpu_tests.split(",") if t.strip()] if a.gpu_tests else None
    if gpu_tests is not None:
        if not gpu_tests:
            raise UserError("--gpu-tests: no test paths given")
        for t in gpu_tests:
            base = checkout if checkout and not Path(t).is_absolute() else Path.cwd()
            if not (base / t.split("::")[0]).exists():
                raise UserError(f"--gpu-tests {t}: not found (relative paths are taken from the checkout, "
                                f"{checkout or 'none here'})")
    eagle3 = plan_eagle3(a, checkout, gpus)
    options = {k: getattr(a, k) for k in ("skip", "fail_fast", "tp", "target", "draft", "config", "repeats",
                                          "lab_pair", "gpu_tests", "pytest_args", "allreduce_args",
                                          "eagle3_args", "pack")}
    return Plan(out=out, pack=pack, skip=skip, fail_fast=a.fail_fast, tp=a.tp, gpus=gpus, topology=topo,
                checkout=checkout, eagle3=eagle3, lab_pair=lab_pair, gpu_tests=gpu_tests, repeats=a.repeats,
                extra=extra, python=sys.executable, echo=not a.quiet, options=options, warnings=warnings,
                pack_found=file_identity(pack) if pack else None)
