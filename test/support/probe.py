"""Run a probe script against chosen upstream trees in a fresh interpreter (module-level state of the code
under test, e.g. `_is_sm120_supported`, is computed at import time, so every scenario needs its own process).

The probe prints one JSON object on its last stdout line; `run_probe` returns it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

SUPPORT = Path(__file__).resolve().parent
SHIMS = SUPPORT / "shims"


def run_probe(trees: list[Path], code: str, *, env: dict[str, str] | None = None, timeout: int = 240) -> dict:
    # the CPU test environment has neither torchvision nor sgl_kernel: import-only stand-ins (shims/)
    path = [str(t) for t in trees] + [str(SUPPORT.parent), str(SHIMS)]
    full_env = dict(os.environ)
    full_env.pop("PYTHONDONTWRITEBYTECODE", None)  # trees are private: compile each module once per session
    full_env.update(env or {})
    full_env["PYTHONPATH"] = os.pathsep.join(path)
    full_env.setdefault("SGLANG_BLACKWELL_TEST", "1")
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                       env=full_env, timeout=timeout)
    lines = [ln for ln in r.stdout.strip().splitlines() if ln.startswith("{")]
    if r.returncode != 0 or not lines:
        raise ProbeError(f"probe exited {r.returncode}\n--- stdout\n{r.stdout[-3000:]}\n--- stderr\n"
                         f"{r.stderr[-6000:]}")
    return json.loads(lines[-1])


class ProbeError(RuntimeError):
    pass
