"""Real Python environments for the NCCL-hook tests: venvs made with `python -m venv`, Debian's system Python,
and a runner for the real `sglang-blackwell` CLI in a subprocess."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEBIAN_PYTHON = Path("/usr/bin/python3")
PCIE_LL = {"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring", "NCCL_P2P_LEVEL": "SYS", "NCCL_MAX_NCHANNELS": "16",
           "NCCL_BUFFSIZE": "16777216", "NCCL_NTHREADS": "512"}


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without NCCL_* / SGLANG_BLACKWELL_* / PYTHON* (the runner may set some)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "SGLANG_BLACKWELL_", "PYTHON"))}
    env.update(extra)
    return env


def make_venv(path: Path, base_python: str | os.PathLike = sys.executable) -> Path:
    """A real venv (no pip: not needed, and fast). Returns its python."""
    base = _base_interpreter(str(base_python))
    subprocess.run([base, "-m", "venv", "--without-pip", str(path)], check=True, env=clean_env())
    return path / "bin" / "python"


def _base_interpreter(python: str) -> str:
    """venv refuses nothing, but a venv made from a venv's python links to that venv; use the real base."""
    out = subprocess.run([python, "-c", "import sys; print(sys._base_executable)"], capture_output=True,
                         text=True, check=True, env=clean_env())
    return out.stdout.strip() or python


def site_packages(python: Path) -> Path:
    out = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True, env=clean_env())
    return Path(out.stdout.strip())


def debian_python() -> tuple[Path | None, str]:
    """(Debian/Ubuntu system python, '') or (None, why it is not usable here)."""
    if not DEBIAN_PYTHON.exists():
        return None, f"{DEBIAN_PYTHON} is missing (CI installs it: apt-get install -y python3 python3-venv)"
    ver = subprocess.run([str(DEBIAN_PYTHON), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                         capture_output=True, text=True).stdout.strip()
    sc = Path(f"/usr/lib/python{ver}/sitecustomize.py")
    if not sc.exists():
        return None, f"{DEBIAN_PYTHON} (Python {ver}) has no {sc}: not a Debian/Ubuntu system Python"
    r = subprocess.run([str(DEBIAN_PYTHON), "-c", "import venv"], capture_output=True, env=clean_env())
    if r.returncode != 0:  # venvs here are made --without-pip: ensurepip (python3-venv) is not needed
        return None, f"{DEBIAN_PYTHON} lacks the venv module (apt-get install -y python3 python3-venv)"
    return DEBIAN_PYTHON, ""


def cli(*args: str, env: dict[str, str] | None = None, check: bool = True, timeout: int = 120
        ) -> subprocess.CompletedProcess:
    """Run the real CLI (this checkout's package, on PYTHONPATH) in a fresh interpreter."""
    e = dict(clean_env() if env is None else env)
    e["PYTHONPATH"] = os.pathsep.join(p for p in (e.get("PYTHONPATH"), str(REPO / "python")) if p)
    r = subprocess.run([sys.executable, "-m", "sglang_blackwell.cli", *args], capture_output=True, text=True,
                       env=e, timeout=timeout)
    if check and r.returncode != 0:
        cmd = " ".join(args)
        raise AssertionError(f"sglang-blackwell {cmd} exited {r.returncode}:\n{r.stdout}\n{r.stderr}")
    return r


ENV_DUMP = ("import json, os; "
            "print(json.dumps({k: v for k, v in os.environ.items() if k.startswith('NCCL_')}))")


def fresh_env(python: Path, env: dict[str, str] | None = None) -> dict[str, str]:
    """NCCL_* a fresh `python -c` of that environment gets."""
    out = subprocess.run([str(python), "-c", ENV_DUMP], capture_output=True, text=True, check=True,
                         env=clean_env() if env is None else env)
    return json.loads(out.stdout.strip().splitlines()[-1])


SPAWN_SCRIPT = r'''
import json, multiprocessing as mp, os, sys

def child(q):
    q.put({k: v for k, v in os.environ.items() if k.startswith("NCCL_")})

if __name__ == "__main__":
    if sys.argv[1] == "clear":  # the child must get the profile from its own startup, not by inheritance
        for k in [k for k in os.environ if k.startswith(("NCCL_", "SGLANG_BLACKWELL_NCCL_APPLIED"))]:
            del os.environ[k]
    mp.set_start_method("spawn", force=True)  # what SGLang does before starting its TP workers
    q = mp.Queue()
    p = mp.Process(target=child, args=(q,))
    p.start()
    got = q.get(timeout=60)
    p.join(60)
    print(json.dumps({"child": got, "parent": {k: v for k, v in os.environ.items() if k.startswith("NCCL_")},
                      "exitcode": p.exitcode}))
'''


def spawn_child_env(python: Path, tmp: Path, mode: str = "inherit") -> dict:
    script = tmp / "spawn_child.py"
    script.write_text(SPAWN_SCRIPT)
    out = subprocess.run([str(python), str(script), mode], capture_output=True, text=True, check=True,
                         env=clean_env(), timeout=120)
    return json.loads(out.stdout.strip().splitlines()[-1])


def pycache_free(paths) -> list[str]:
    return sorted(p for p in paths if "__pycache__" not in p)


def listing(d: Path) -> dict[str, bytes]:
    """Every file under d (bytecode caches excluded) -> bytes."""
    return {os.path.relpath(p, d): Path(p).read_bytes()
            for p in pycache_free(glob.glob(str(d / "**"), recursive=True)) if Path(p).is_file()}
