"""The target Python environment of the NCCL startup hook, found by running its interpreter, never by guessing:
its site-packages, the sitecustomize its startup imports (another one may shadow the environment's own), the
NCCL variables a fresh process of it ends up with, its NCCL wheel, and what its startup reports about a failing
sitecustomize or .pth file. Where the hook's files go in it: sitecustomize.py, or the pth hook's module and
.pth file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import procs
from ..errors import UserError
from . import nccl_conf as conf

HOOK_MODULE = "_sglang_blackwell_nccl"
PTH_FILE = "sglang_blackwell_nccl.pth"
SITECUSTOMIZE = "sitecustomize.py"

# Runs inside the target interpreter: where its site-packages is, which sitecustomize its startup imports, and
# the NCCL variables a fresh process of it ends up with.
PROBE = r"""
import json, os, sys, sysconfig
from importlib.machinery import PathFinder
purelib = sysconfig.get_paths()["purelib"]
norm = lambda p: os.path.normcase(os.path.realpath(p))
path = [p for p in sys.path if p]  # '' is the -c script directory, added after startup
spec = PathFinder.find_spec("sitecustomize", path)
loaded = sys.modules.get("sitecustomize")
def nccl():  # the NCCL wheel of this environment (torch's CUDA builds load it), for its config-file rules
    try:
        from importlib.metadata import version
    except ImportError:
        return None
    for dist in ("nvidia-nccl-cu13", "nvidia-nccl-cu12"):
        try:
            return [dist, version(dist)]
        except Exception:
            pass
    return None
print("SGLB-PROBE " + json.dumps({
    "executable": sys.executable,
    "version": "%d.%d.%d" % sys.version_info[:3],
    "prefix": sys.prefix,
    "base_prefix": sys.base_prefix,
    "purelib": purelib,
    "purelib_on_path": norm(purelib) in {norm(p) for p in path},
    "sitecustomize": spec.origin if spec else None,
    "sitecustomize_loaded": getattr(loaded, "__file__", None),
    "no_site": bool(sys.flags.no_site),
    "environ": {k: v for k, v in os.environ.items() if k.startswith(("NCCL_", "SGLANG_BLACKWELL_"))},
    "home": os.environ.get("HOME"),
    "nccl": nccl(),
}))
"""


@dataclass
class Target:
    python: str  # as given
    executable: str
    version: str
    prefix: str
    purelib: Path
    purelib_on_path: bool
    sitecustomize: str | None  # the file `import sitecustomize` resolves to at startup
    environ: dict[str, str]  # NCCL_* / SGLANG_BLACKWELL_* of a fresh interpreter (its managed block ran)
    nccl: tuple[str, str] | None = None  # (distribution, version) of its NCCL wheel
    startup_errors: tuple[str, ...] = ()  # what its startup printed about a failing sitecustomize or .pth file
    home: str | None = None  # its $HOME: where NCCL >= 2.30 looks for ~/.nccl.conf (older: the passwd entry's)

    @property
    def conf_environ(self) -> dict[str, str]:
        """What NCCL's choice of config files reads in a fresh interpreter: NCCL_CONF_FILE and HOME."""
        return {**self.environ, "HOME": self.home} if self.home is not None else dict(self.environ)

    @property
    def conf_rules(self) -> conf.Rules:
        """How this environment's NCCL reads its config files."""
        if self.nccl:
            return conf.rules_for(self.nccl[1], f"{self.nccl[0]} in this environment")
        return conf.rules_for(None)

    @property
    def sitecustomize_path(self) -> Path:
        return self.purelib / SITECUSTOMIZE

    @property
    def module_path(self) -> Path:
        return self.purelib / f"{HOOK_MODULE}.py"

    @property
    def pth_path(self) -> Path:
        return self.purelib / PTH_FILE

    @property
    def shadow(self) -> str | None:
        """The sitecustomize that startup imports instead of this environment's own, if any."""
        if not self.sitecustomize:
            return None
        if _same(Path(self.sitecustomize).parent, self.purelib):
            return None
        return self.sitecustomize

    def to_dict(self) -> dict[str, Any]:
        return {"python": self.python, "executable": self.executable, "version": self.version,
                "prefix": self.prefix, "site_packages": str(self.purelib),
                "sitecustomize": self.sitecustomize, "shadowed_by": self.shadow}


def _same(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def probe(python: str | None = None, environ: dict[str, str] | None = None) -> Target:
    """Run the target interpreter (default: this one) and ask it."""
    exe = python or sys.executable
    try:
        r = procs.run([exe, "-B", "-c", PROBE], capture_output=True, text=True, timeout=120,
                      env=dict(os.environ if environ is None else environ))
    except FileNotFoundError:
        raise UserError(f"--python {exe}: no such interpreter") from None
    except PermissionError:
        raise UserError(f"--python {exe}: not executable") from None
    except subprocess.TimeoutExpired:
        raise UserError(f"--python {exe}: did not answer within 120 s") from None
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("SGLB-PROBE ")), None)
    if r.returncode != 0 or line is None:
        tail = (r.stderr or r.stdout).strip().splitlines()[-3:]
        raise UserError(f"--python {exe}: could not run it as a Python interpreter (exit {r.returncode}): "
                        + " | ".join(tail))
    d = json.loads(line[len("SGLB-PROBE "):])
    if d["no_site"]:
        raise UserError(f"--python {exe}: runs without the site module (-S), so no startup hook can apply")
    errors = _startup_errors(r.stderr)
    return Target(python=exe, executable=d["executable"], version=d["version"], prefix=d["prefix"],
                  purelib=Path(d["purelib"]), purelib_on_path=d["purelib_on_path"],
                  sitecustomize=d["sitecustomize"], environ=d["environ"], home=d.get("home"),
                  nccl=tuple(d["nccl"]) if d.get("nccl") else None, startup_errors=errors)


def _startup_errors(stderr: str) -> tuple[str, ...]:
    """site's reports of a sitecustomize or .pth line that raised (it goes on starting), one line each."""
    lines = stderr.splitlines()
    out = []
    for i, ln in enumerate(lines):
        if ln.startswith(("Error in sitecustomize", "Error processing line")):
            last = next((x.strip() for x in lines[i + 1:i + 40] if x and not x.startswith((" ", "Traceback"))),
                        "")
            out.append(f"{ln.strip()} {last}".strip())
    return tuple(out)

