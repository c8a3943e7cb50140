"""What a launch of `bench eagle3` needs, checked before anything is launched or written (issue 18 items 1, 8):
bad input is exit 2 with one line naming the file and key, not an arm that fails and a receipt saying
"VERDICT: FAIL".

- [server] port: an explicit port (the user's choice) must be free: a server that already answers there would
  be measured instead of ours. port = 0 picks a free port per launch (server.free_port). [server] host must be
  an address of this machine.
- [model] target / draft (when a selected arm is speculative) / tokenizer (a path): a local path must exist;
  anything else must be a Hugging Face repo id (org/name), which sglang downloads or finds in its cache, as
  sglang decides (os.path.exists first, then the hub). sglang does not expand `~`.
- [server] launcher: the program must exist; for a Python interpreter, the `-m` module must be importable in
  that interpreter's environment (found the way `import` finds it, without running the package's code), and a
  script must exist.

Servers that are not ours (--attach, possibly on another machine) and --from-runs launch nothing: none of this
applies to them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

from ... import procs
from .config import BenchConfig
from .config_section import ConfigError
from .listeners import bind_problem
from .server import busy_port

# huggingface_hub's validate_repo_id: [namespace/]name of word characters, '-' and '.', no '--' or '..', <= 96
HF_REPO_ID = re.compile(r"[\w.-]+(/[\w.-]+)?")
PYTHON_NAME = re.compile(r"(python|pypy)[\d.]*")
MODULE_FINDER = r"""
import sys
parts, path = sys.argv[1].split("."), None
for i in range(len(parts)):
    spec = None
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        spec = find(".".join(parts[:i + 1]), path) if find else None
        if spec is not None:
            break
    if spec is None or (spec.submodule_search_locations is None and i < len(parts) - 1):
        sys.exit(3)
    path = spec.submodule_search_locations
"""
ENV_FOR_IMPORTS = ("PATH", "PYTHONPATH", "PYTHONHOME", "PYTHONNOUSERSITE", "PYTHONUSERBASE", "VIRTUAL_ENV")


def check_launch(cfg: BenchConfig, arms: list[str], envs: list[dict[str, str]]) -> None:
    """Raise ConfigError for the first thing a launch of `arms` would trip on (envs: each arm's server env)."""
    check_port(cfg)
    check_models(cfg, arms)
    seen: set[str] = set()
    for env in envs:
        key = json.dumps({k: env.get(k) for k in ENV_FOR_IMPORTS}, sort_keys=True)
        if key not in seen:
            seen.add(key)
            problem = launcher_problem(list(cfg.server.launcher), env)
            if problem:
                raise ConfigError(f"{cfg.path}: [server] launcher: {problem}")


def check_port(cfg: BenchConfig) -> None:
    host, port = cfg.server.host, cfg.server.port
    problem = bind_problem(host, port)
    if problem and problem[0] == "address":
        raise ConfigError(f"{cfg.path}: [server] host {host!r}: {problem[1]}: give an address of this machine "
                          "(127.0.0.1, 0.0.0.0)")
    if port:
        busy = busy_port(host, port)
        if busy:
            raise ConfigError(f"{cfg.path}: [server] port {port}: {busy}: another server would be measured "
                              "instead of ours; stop it, or set port = 0 to pick a free port per launch")


def model_problem(value: str) -> str | None:
    """Why sglang could not load `value` as a model (or tokenizer) path: None when it is a path that exists or
    could be a Hugging Face repo id."""
    if os.path.exists(value):
        return None
    if value.startswith("~"):
        return "no such file or directory (sglang does not expand ~: give the full path)"
    local = value.startswith(("/", "./", "../")) or value in (".", "..")
    if local or not HF_REPO_ID.fullmatch(value) or "--" in value or ".." in value or len(value) > 96:
        return "no such file or directory (and not a Hugging Face repo id, org/name)"
    return None


def check_models(cfg: BenchConfig, arms: list[str]) -> None:
    wanted = [("target", cfg.model.target)]
    if any(cfg.arms[a].speculative and not cfg.arms[a].draft for a in arms) and cfg.model.draft:
        wanted.append(("draft", cfg.model.draft))
    wanted += [(f"draft of arm {a}", cfg.arms[a].draft) for a in arms if cfg.arms[a].draft]
    if cfg.model.tokenizer not in ("target", "none"):
        wanted.append(("tokenizer", cfg.model.tokenizer))
    for key, value in wanted:
        problem = model_problem(value)
        if problem:
            raise ConfigError(f"{cfg.path}: [model] {key} {value!r}: {problem}")


def runs_the_server(launcher: tuple[str, ...] | list[str]) -> bool:
    """Is the launcher a Python interpreter, so that the server it starts (and the socket it listens on) is a
    process of our session? A wrapper such as `docker run` serves from processes of the container runtime."""
    return bool(PYTHON_NAME.fullmatch(Path(launcher[0]).name))


def python_target(args: tuple[str, ...] | list[str]) -> tuple[str, str | None]:
    """What an interpreter's arguments (after the program) run: ("module", name) for -m (name None when -m ends
    the list), ("command", None) for -c, ("script", path), or ("none", None) (a bare interpreter)."""
    i = 0
    while i < len(args):
        a = args[i]
        if a == "-m":
            return "module", args[i + 1] if i + 1 < len(args) else None
        if a == "-c":
            return "command", None
        if a in ("-X", "-W"):
            i += 2
            continue
        if a.startswith("-"):
            i += 1
            continue
        return "script", a
    return "none", None


def launcher_problem(launcher: list[str], env: dict[str, str]) -> str | None:
    """Why `launcher` cannot start a server in `env`; None when it looks like it can."""
    prog = launcher[0]
    exe = shutil.which(prog, path=env.get("PATH", os.defpath))
    if exe is None:
        return f"{prog}: no such program" + (" (or not executable)" if os.sep in prog else " on PATH")
    if not runs_the_server([exe]):
        return None
    kind, what = python_target(launcher[1:])
    if kind == "module":
        if what is None:
            return f"{prog} -m: no module named"
        found = module_found(exe, what, env)
        return f"no module named {what} in the environment of {exe} (is it installed there?)" if found is False \
            else None  # None: the launch itself will say what is wrong with this interpreter
    if kind == "script" and what is not None and not Path(what).is_file():
        return f"{what}: no such file (the script {prog} would run)"
    return None


def module_found(exe: str, module: str, env: dict[str, str]) -> bool | None:
    """Does interpreter `exe` find `module` in `env` the way `import` would (no package code runs)? None when the
    interpreter could not be asked (it does not start, or takes over 60 s)."""
    try:
        r = procs.run([exe, "-c", MODULE_FINDER, module], env=env, capture_output=True, text=True,
                      errors="replace", timeout=60, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if r.returncode == 3:
        return False
    return True if r.returncode == 0 else None
