"""NCCL-config mode (`nccl install --nccl-conf PATH`): the profile also goes into an NCCL config file, for NCCL
programs not started by Python; NCCL reads it where NCCL_CONF_FILE names it. Which file may be written, why a
startup block in this mode applies nothing (the user's NCCL_CONF_FILE names another file), why NCCL does not read
the block's file here, and how NCCL_CONF_FILE gets to other programs (the user's choice, never written by us)."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import UserError
from . import nccl_conf as conf
from .nccl import CONF_WAS_ENV, KILL_SWITCH


def conf_target(path: str | os.PathLike, opt: str = "--nccl-conf") -> Path:
    """An NCCL config file we may write: absolute, in an existing directory, not a directory itself, and not
    /etc/nccl.conf (NCCL reads it in every process after the user's file: a profile there could not be
    switched off)."""
    p = Path(os.path.abspath(os.path.expanduser(os.fspath(path))))
    if conf.same_file(p, conf.ETC_CONF):
        raise UserError(f"{opt} {path}: NCCL reads {conf.ETC_CONF} in every process, after the user's file, so a "
                        f"profile there could not be switched off; use a file of ours named by {conf.CONF_ENV} "
                        "(e.g. /etc/sglang-blackwell/nccl.conf)")
    if len(str(p)) > conf.NAME_MAX:
        raise UserError(f"{opt} {path}: longer than the {conf.NAME_MAX} characters NCCL reads of {conf.CONF_ENV}")
    if p.is_dir():
        raise UserError(f"{opt} {path}: is a directory (give the config file's path)")
    if not p.parent.is_dir():
        raise UserError(f"{opt} {path}: directory {p.parent} does not exist; nothing was changed (create it "
                        "first)")
    return p



def conf_mode_off(conf_path: str | None, environ: dict[str, str]) -> str | None:
    """Why a startup block in NCCL-config mode applies nothing in a process with this environment, where the
    reason is the user's NCCL_CONF_FILE (naming another file turns the profile off for every process)."""
    named = environ.get(conf.CONF_ENV, "")
    if not conf_path or not named or CONF_WAS_ENV in environ or conf.same_file(named, conf_path):
        return None
    return (f"{conf.CONF_ENV}={named} names another file than {conf_path}: NCCL reads that one, and the startup "
            "block applies nothing (the profile is off in every process that gets this environment)")



def conf_unread_why(path: Path, env: dict[str, str]) -> str:
    named = env.get(conf.CONF_ENV, "")
    if CONF_WAS_ENV in env:
        return (f"{KILL_SWITCH}={env.get(KILL_SWITCH)}: the startup block pointed {conf.CONF_ENV} at {named} "
                "(the profile is off)")
    if named:
        return f"{conf.CONF_ENV} names {named}: NCCL reads that file instead (the profile is off)"
    return (f"{conf.CONF_ENV} is not set here: NCCL reads ~/.nccl.conf instead, so NCCL programs not started by "
            f"this environment's Python do not get the profile (set {conf.CONF_ENV}={path} for every process: "
            "docs/nccl-and-doctor.md)")



def conf_hints(path: Path) -> list[str]:
    """How NCCL_CONF_FILE gets to programs not started by Python: the user's choice, never written by us."""
    return [f"{conf.CONF_ENV} does not name {path} here. NCCL programs not started by this environment's Python "
            f"(nccl-tests, other runtimes) read the file only where {conf.CONF_ENV} names it, e.g.:",
            f"  image (Dockerfile):   ENV {conf.CONF_ENV}={path}",
            f"  every login shell:    echo 'export {conf.CONF_ENV}={path}' | sudo tee "
            "/etc/profile.d/sglang-blackwell-nccl.sh",
            f"  every PAM session:    add the line {conf.CONF_ENV}={path} to /etc/environment",
            f"off for every process: {conf.CONF_ENV}=/dev/null (Python processes also honour {KILL_SWITCH}=0)"]
