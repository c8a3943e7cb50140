"""The environment of `bench allreduce` processes: NCCL tuning profiles (--nccl-profile) and multicast-off.

The profiles themselves belong to `sglang_blackwell.nccl` (`profile_env(name) -> dict[str, str]`); until that
module exists this falls back to the two profiles the design names. NCCL reads its environment when a
communicator is created, so every profile is measured in freshly spawned processes.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping

from ..errors import UserError

FALLBACK_PROFILES: dict[str, dict[str, str]] = {
    "none": {},
    "pcie-ll": {
        "NCCL_PROTO": "LL",
        "NCCL_ALGO": "Ring",
        "NCCL_P2P_LEVEL": "SYS",
        "NCCL_MAX_NCHANNELS": "16",
        "NCCL_BUFFSIZE": "16777216",
        "NCCL_NTHREADS": "512",
    },
}
# Our sitecustomize block (nccl.py) applies the persisted profile in every interpreter unless this is "0";
# profile runs set it so the profile under test is the only one in effect.
KILL_SWITCH = "SGLANG_BLACKWELL_NCCL"


def profile_env(name: str) -> dict[str, str]:
    """The NCCL variables profile `name` sets (UserError naming the known profiles when unknown)."""
    try:
        nccl = importlib.import_module("sglang_blackwell.nccl")
    except ImportError:
        nccl = None
    fn = getattr(nccl, "profile_env", None)
    if fn is not None:
        try:
            return {str(k): str(v) for k, v in fn(name).items()}
        except (KeyError, ValueError) as e:
            raise UserError(f"--nccl-profile: unknown profile {name!r} ({e})") from None
    if name not in FALLBACK_PROFILES:
        raise UserError(f"--nccl-profile: unknown profile {name!r}; known: {', '.join(FALLBACK_PROFILES)}")
    return dict(FALLBACK_PROFILES[name])


def nccl_keys(environ: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in environ.items() if k.startswith("NCCL_")}


KEEP_NCCL = ("NCCL_NVLS_ENABLE", "NCCL_DEBUG", "NCCL_DEBUG_SUBSYS")


def isolated_env(profile: Mapping[str, str], environ: Mapping[str, str],
                 keep: tuple[str, ...] = KEEP_NCCL) -> dict[str, str]:
    """The full environment for a profile run: the ambient NCCL_* variables dropped (except the safety and
    debug ones in `keep`), the profile's set, and our sitecustomize profile switched off."""
    env = {k: v for k, v in environ.items() if not k.startswith("NCCL_") or k in keep}
    env.update(profile)
    env[KILL_SWITCH] = "0"
    return env


# Every bench process runs with NVLink multicast off unless the user asks for multicast paths explicitly.
MULTICAST_OFF_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                     "NVSHMEM_DISABLE_NVLS": "1"}


def multicast_env_problems(environ: Mapping[str, str]) -> list[str]:
    """One message per multicast-off variable that is not set as required."""
    return [f"{k}={v} is required (it is {environ.get(k)!r})" for k, v in MULTICAST_OFF_ENV.items()
            if environ.get(k) != v]
