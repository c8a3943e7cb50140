"""The environment of `bench allreduce` processes: NCCL tuning profiles (--nccl-profile) and multicast-off.

The profiles are box/nccl.py's (nccl_profiles.toml, the same file `nccl install` and `serve` read). NCCL reads
its environment when a communicator is created, so every profile is measured in freshly spawned processes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from ...box import nccl_conf
from ...box.nccl import KILL_SWITCH, MULTICAST_OFF_ENV, load_profiles
from ...errors import UserError


def profile_env(name: str) -> dict[str, str]:
    """The NCCL variables profile `name` sets (UserError naming the known profiles when unknown)."""
    profiles = load_profiles()
    if name not in profiles:
        raise UserError(f"--nccl-profile: unknown profile {name!r}; known: {', '.join(profiles)}")
    return dict(profiles[name].env)


def nccl_keys(environ: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in environ.items() if k.startswith("NCCL_")}


def nccl_settings(environ: Mapping[str, str]) -> dict[str, str]:
    """The NCCL variables a process with this environment runs with: its NCCL_* and what NCCL's config files
    add (read as NCCL reads them, box/nccl_conf.py); NCCL_CONF_FILE itself is only the way there."""
    env = dict(environ)
    from_files = {name: e.value for name, (e, _) in nccl_conf.from_files(nccl_conf.read_all(env), env).items()}
    return {k: v for k, v in {**from_files, **nccl_keys(env)}.items() if k != nccl_conf.CONF_ENV}


KEEP_NCCL = ("NCCL_NVLS_ENABLE", "NCCL_DEBUG", "NCCL_DEBUG_SUBSYS")


def isolated_env(profile: Mapping[str, str], environ: Mapping[str, str],
                 keep: tuple[str, ...] = KEEP_NCCL) -> dict[str, str]:
    """The full environment for a profile run: the ambient NCCL_* variables dropped (except the safety and
    debug ones in `keep`), the profile's set, our startup block switched off (KILL_SWITCH=0) and NCCL's config
    files too (NCCL_CONF_FILE=/dev/null: neither ours nor the user's ~/.nccl.conf; /etc/nccl.conf NCCL reads
    always), so the profile under test is the only tuning in effect."""
    env = {k: v for k, v in environ.items() if not k.startswith("NCCL_") or k in keep}
    env.update(profile)
    env[KILL_SWITCH] = "0"
    env.setdefault("NCCL_CONF_FILE", os.devnull)
    return env


def multicast_env_problems(environ: Mapping[str, str]) -> list[str]:
    """One message per multicast-off variable that is not set as required."""
    return [f"{k}={v} is required (it is {environ.get(k)!r})" for k, v in MULTICAST_OFF_ENV.items()
            if environ.get(k) != v]
