"""Which interpreter runs the server launcher of `bench eagle3` (issue 24 item 5).

The default launcher, `python3 -m sglang.launch_server`, names no environment, and the first `python3` on PATH is
often not the one sglang is installed in (a venv whose CLI runs by its path, a system python3 first on PATH). So a
launcher whose first word is the bare `python3` (the default's, given or not) is resolved, in this order:
1. the interpreter running bench eagle3 (sys.executable), if it finds the launcher's module (`-m M`; a launcher
   without `-m` needs `sglang`) in the server's environment;
2. else the first `python3` on the server's PATH that finds it;
3. else a ConfigError (exit 2) naming every interpreter tried.
"Finds" is preflight.module_found: the interpreter asked the way `import` looks, no package code run, in every
selected arm's environment. Anything else (a path, `python3.12`, `docker run ...`) runs as written. Every launched
run records the choice (`launcher`), the receipt all of them (`launchers`; runs recorded before this: unknown).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .config import BenchConfig, default_crosscheck_python
from .config_section import ConfigError
from .preflight import module_found, python_target

BARE = "python3"  # the default launcher's first word: resolved; any other word runs as written
AS_WRITTEN = "as written in [server] launcher"
RUNNING = "the interpreter running bench eagle3 (sys.executable) finds {module}"
ON_PATH = "the first python3 on the server's PATH that finds {module} (the interpreter running bench eagle3 does not)"
UNKNOWN = "unknown (recorded before bench eagle3 recorded its launcher)"


@dataclass(frozen=True)
class Launcher:
    command: tuple[str, ...]  # the launcher as it runs: the interpreter resolved
    chosen: str  # how the interpreter was chosen
    tried: tuple[str, ...] = ()  # the interpreters asked before it, each with why it was passed over

    def record(self) -> dict[str, Any]:
        return {"command": list(self.command), "interpreter": self.command[0], "chosen": self.chosen,
                "tried": list(self.tried)}


def needed_module(launcher: tuple[str, ...]) -> str:
    """What the launcher's interpreter must find: the `-m` module it runs, else sglang itself."""
    kind, what = python_target(launcher[1:])
    return what if kind == "module" and what else "sglang"


def _path_python3s(env: dict[str, str]) -> Iterator[str]:
    """Every python3 on env's PATH, in order; a directory reached twice (/bin -> /usr/bin) once. Not the files'
    real paths: a venv's python3 links to the base interpreter, yet runs with the venv's packages."""
    dirs: set[str] = set()
    for d in env.get("PATH", os.defpath).split(os.pathsep):
        real = os.path.realpath(d or ".")
        exe = os.path.join(os.path.abspath(d or "."), BARE)
        if real not in dirs and os.path.isfile(exe) and os.access(exe, os.X_OK):
            dirs.add(real)
            yield exe


def resolve(cfg: BenchConfig, envs: list[dict[str, str]]) -> Launcher:
    """cfg's launcher with its interpreter chosen (module docstring); ConfigError naming the file and every
    interpreter tried when none finds the module. `envs`: each selected arm's server environment (the first one's
    PATH is searched)."""
    launcher = cfg.server.launcher
    if launcher[0] != BARE:
        return Launcher(tuple(launcher), AS_WRITTEN)
    module = needed_module(launcher)
    candidates = ([(sys.executable, "sys.executable")] if sys.executable else []) + \
        [(exe, "on PATH") for exe in _path_python3s(envs[0] if envs else dict(os.environ))]
    tried: list[str] = []
    seen: set[str] = set()
    for exe, where in candidates:
        if exe in seen:
            continue
        seen.add(exe)
        found = [module_found(exe, module, env) for env in envs or [dict(os.environ)]]
        if all(found):
            how = (RUNNING if where == "sys.executable" else ON_PATH).format(module=module)
            return Launcher((exe, *launcher[1:]), how, tuple(tried))
        tried.append(f"{exe} ({where}): " + ("does not start" if None in found else f"no {module}"))
    raise ConfigError(f"{cfg.path}: [server] launcher: {' '.join(launcher)}: no interpreter finds {module}: tried "
                      f"{'; '.join(tried) or 'none (no python3 on PATH)'}; install sglang into one of them, or give "
                      f"the interpreter's path as the first word of [server] launcher")


def with_launcher(cfg: BenchConfig, chosen: Launcher) -> BenchConfig:
    """cfg launching with `chosen`; a [crosscheck] without its own `python` follows the launcher's interpreter.
    The parsed config (cfg.raw) and so its hash stay what the file says."""
    out = dataclasses.replace(cfg, server=dataclasses.replace(cfg.server, launcher=chosen.command))
    x = cfg.crosscheck
    if x is not None and "python" not in (cfg.raw.get("crosscheck") or {}):
        out = dataclasses.replace(out, crosscheck=dataclasses.replace(
            x, python=default_crosscheck_python(chosen.command)))
    return out


def receipt_launchers(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every distinct launcher of the launched runs, with the runs (arm, repeat) it started; launched runs without
    one were recorded before it was (unknown)."""
    out: list[dict[str, Any]] = []
    for r in runs:
        if r.get("mode") != "launch":
            continue
        rec = r.get("launcher") or {"command": None, "interpreter": None, "chosen": UNKNOWN, "tried": []}
        key = {k: v for k, v in rec.items() if k != "runs"}
        entry = next((e for e in out if {k: v for k, v in e.items() if k != "runs"} == key), None)
        if entry is None:
            entry = {**key, "runs": []}
            out.append(entry)
        entry["runs"].append(f"{r.get('arm')} repeat {r.get('repeat')}")
    return out
