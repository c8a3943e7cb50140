"""The real libnccl.so.2 on a CPU machine, to check what NCCL does with its config files.

NCCL reads NCCL_CONF_FILE / ~/.nccl.conf / /etc/nccl.conf into its process's environment at its first use, and
ncclGetUniqueId() is such a use that needs no GPU. `nccl_env(...)` loads the library with ctypes in a fresh
`python -S -E` (no site: no startup block of ours), calls it, and returns what NCCL added to the C environment.

The library comes from NVIDIA's nvidia-nccl-cu13 wheel, fetched with `pip download --no-deps` (so the user's
index / mirror applies), checked against the sha256 pinned here, and cached: only libnccl.so.2 and nccl.h are
kept, in <cache>/nccl/<version>/.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from sglang_blackwell.paths import cache_dir

# version -> (wheel file name, sha256): 2.28.9 is the lab image's (torch 2.11 +cu130), 2.30.7 the one torch
# 2.14.1 requires (base 0.5.23); the two sides of NCCL's change of config-file reader (getline -> fgets)
WHEELS = {
    "2.28.9": ("nvidia_nccl_cu13-2.28.9-py3-none-manylinux_2_18_x86_64.whl",
               "e4553a30f34195f3fa1da02a6da3d6337d28f2003943aa0a3d247bbc25fefc42"),
    "2.30.7": ("nvidia_nccl_cu13-2.30.7-py3-none-manylinux_2_18_x86_64.whl",
               "cefa7fdb9710efd0f39c5f1be1d61ff6fc9a996c451265bd7fbdcf9455ed4b50"),
}
KEEP = {"nvidia/nccl/lib/libnccl.so.2": "lib/libnccl.so.2", "nvidia/nccl/include/nccl.h": "include/nccl.h"}

PROBE = r"""
import ctypes, json, os, sys
before = dict(os.environ)
libc = ctypes.CDLL(None)
nccl = ctypes.CDLL(sys.argv[1])
rc = nccl.ncclGetUniqueId(ctypes.create_string_buffer(128))  # NCCL reads its config files first
environ = ctypes.POINTER(ctypes.c_char_p).in_dll(libc, "environ")
now, i = {}, 0
while environ[i]:
    k, _, v = environ[i].partition(b"=")
    now[k.decode("utf-8", "surrogateescape")] = v.decode("utf-8", "surrogateescape")
    i += 1
print(json.dumps({"rc": rc, "set": {k: v for k, v in now.items() if k not in before}}))
"""


def nccl_home(version: str) -> tuple[Path | None, str]:
    """(dir holding lib/libnccl.so.2 and include/nccl.h, '') or (None, why not)."""
    name, sha = WHEELS[version]
    dest = cache_dir() / "nccl" / version
    if all((dest / rel).is_file() for rel in KEEP.values()):
        return dest, ""
    with tempfile.TemporaryDirectory() as tmp:
        r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
                            "--platform", "manylinux_2_18_x86_64", "--python-version", "3.12",
                            f"nvidia-nccl-cu13=={version}", "-d", tmp], capture_output=True, text=True)
        wheel = Path(tmp) / name
        if r.returncode != 0 or not wheel.is_file():
            last = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["no output"]
            return None, f"pip download nvidia-nccl-cu13=={version} failed: {last[0]}"
        h = hashlib.sha256()
        with open(wheel, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        if h.hexdigest() != sha:
            raise AssertionError(f"{name}: sha256 {h.hexdigest()} != pinned {sha} (test/support/real_nccl.py)")
        part = dest.with_name(f".{version}.{os.getpid()}")
        with zipfile.ZipFile(wheel) as z:
            for src, rel in KEEP.items():
                (part / rel).parent.mkdir(parents=True, exist_ok=True)
                (part / rel).write_bytes(z.read(src))
    if dest.exists():
        shutil.rmtree(dest)
    os.replace(part, dest)
    return dest, ""


def nccl_env(home: Path, env: dict[str, str], python: str = sys.executable, site: bool = False) -> dict:
    """{"rc": ncclGetUniqueId's result, "set": what NCCL added to the environment} in a fresh interpreter with
    exactly `env`. site=True: a normal start (the environment's startup block runs first)."""
    flags = [] if site else ["-S", "-E"]
    r = subprocess.run([python, *flags, "-c", PROBE, str(home / "lib" / "libnccl.so.2")], env=env,
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise AssertionError(f"NCCL probe failed ({r.returncode}): {r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])
