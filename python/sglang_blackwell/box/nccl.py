"""NCCL tuning profiles as data (nccl_profiles.toml): load and validate them, resolve `auto` from the
topology, render a profile as an NCCL_CONF_FILE, and say where each NCCL variable a fresh process gets comes
from (user / the managed block / an nccl.conf file / NCCL's default).

Installing a profile into an environment is sitehook.py's job; this module never touches files."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import __version__
from ..errors import UserError
from ..tomlio import tomllib
from .topology import CLASSES, Topology

PROFILES_FILE = Path(__file__).with_name("nccl_profiles.toml")
AUTO = "auto"
KILL_SWITCH = "SGLANG_BLACKWELL_NCCL"  # =0 (or false/off/no): the managed block sets nothing
APPLIED_ENV = "SGLANG_BLACKWELL_NCCL_APPLIED"  # keys the managed block set in this process tree
OFF_VALUES = ("0", "false", "off", "no")
# the project's rule for every GPU process: no NVLink multicast (NCCL NVLS, torch symm-mem, NVSHMEM); bench
# allreduce refuses to start without it, qualify's GPU steps get it where the user has not set these
MULTICAST_OFF_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
# NCCL's env docs list these under "Debugging": not for production, not to be retained in scripts
DEBUG_KNOBS = ("NCCL_PROTO", "NCCL_ALGO")
DEBUG_NOTE = ("NCCL documents NCCL_PROTO and NCCL_ALGO as debugging knobs (\"should not be used in "
              "production nor retained in scripts\"): keep them only where `sglang-blackwell bench "
              "allreduce` shows they help on this box, per message size.")
PROFILE_KEYS = {"description", "fits", "auto_for", "provenance", "env"}
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]*$")
ENV_KEY_RE = re.compile(r"^[A-Z][A-Z0-9_]*$")


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    fits: tuple[str, ...]
    auto_for: tuple[str, ...]
    provenance: str
    env: dict[str, str] = field(default_factory=dict)

    @property
    def debug_knobs(self) -> list[str]:
        return [k for k in self.env if k in DEBUG_KNOBS]

    def fits_class(self, cls: str) -> bool:
        return cls in self.fits


@dataclass(frozen=True)
class Resolution:
    profile: Profile
    requested: str  # "auto" or a profile name
    topology_class: str
    topology: str  # one-line summary of what it was resolved against
    reason: str


def _bad(path: Path, msg: str) -> UserError:
    return UserError(f"{path}: {msg}")


def load_profiles(path: Path | str | None = None) -> dict[str, Profile]:
    """Profiles by name, in file order. Malformed data raises UserError naming the file, profile and key."""
    path = Path(path) if path else PROFILES_FILE
    try:
        data = tomllib.loads(path.read_text())
    except OSError as e:
        raise _bad(path, f"cannot read profiles: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise _bad(path, f"not valid TOML: {e}") from None
    unknown_top = sorted(set(data) - {"profiles"})
    if unknown_top:
        raise _bad(path, f"unknown top-level key(s) {unknown_top} (only [profiles.<name>] tables)")
    table = data.get("profiles")
    if not isinstance(table, dict) or not table:
        raise _bad(path, "no [profiles.<name>] tables")
    profiles: dict[str, Profile] = {}
    for name, p in table.items():
        where = f"profile {name!r}"
        if name == AUTO or not NAME_RE.match(name):
            raise _bad(path, f"{where}: bad name (lowercase letters, digits, '-'; {AUTO!r} is reserved)")
        if not isinstance(p, dict):
            raise _bad(path, f"{where}: must be a table")
        unknown = sorted(set(p) - PROFILE_KEYS)
        if unknown:
            raise _bad(path, f"{where}: unknown key(s) {unknown} (known: {sorted(PROFILE_KEYS)})")
        for key in ("description", "fits", "provenance"):
            if key not in p:
                raise _bad(path, f"{where}: missing key {key!r}")
        for key in ("description", "provenance"):
            if not isinstance(p[key], str) or not p[key].strip():
                raise _bad(path, f"{where}: key {key!r} must be a non-empty string")
        fits = _classes(path, where, "fits", p["fits"])
        auto_for = _classes(path, where, "auto_for", p.get("auto_for", []))
        if not set(auto_for) <= set(fits):
            raise _bad(path, f"{where}: key 'auto_for' {list(auto_for)} names classes outside "
                             f"'fits' {list(fits)}")
        env_raw = p.get("env", {})
        if not isinstance(env_raw, dict):
            raise _bad(path, f"{where}: key 'env' must be a table of VARIABLE = \"value\"")
        env: dict[str, str] = {}
        for k, v in env_raw.items():
            if not ENV_KEY_RE.match(k) or k.startswith("SGLANG_BLACKWELL_"):
                raise _bad(path, f"{where}: env key {k!r} is not an upper-case environment variable name "
                                 "(SGLANG_BLACKWELL_* are reserved)")
            if isinstance(v, bool) or not isinstance(v, (str, int)):
                raise _bad(path, f"{where}: env key {k!r}: value {v!r} must be a string")
            v = str(v)
            if not v.isascii() or not v.isprintable():
                raise _bad(path, f"{where}: env key {k!r}: value {v!r} must be printable ASCII")
            env[k] = v
        provenance = " ".join(p["provenance"].split())
        profiles[name] = Profile(name, p["description"].strip(), fits, auto_for, provenance, env)
    for cls in CLASSES:
        autos = [n for n, p in profiles.items() if cls in p.auto_for]
        if len(autos) != 1:
            raise _bad(path, f"topology class {cls!r} must have exactly one profile whose 'auto_for' lists "
                             f"it; found {autos or 'none'}")
    return profiles


def _classes(path: Path, where: str, key: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(c, str) for c in value):
        raise _bad(path, f"{where}: key {key!r} must be a list of topology classes {list(CLASSES)}")
    bad = [c for c in value if c not in CLASSES]
    if bad:
        raise _bad(path, f"{where}: key {key!r}: unknown topology class(es) {bad} (known: {list(CLASSES)})")
    return tuple(value)


def profile_names(profiles: dict[str, Profile]) -> list[str]:
    return [AUTO, *profiles]


def resolve(requested: str, topology: Topology, profiles: dict[str, Profile]) -> Resolution:
    """`auto` -> the profile for this topology's class; a name -> that profile (whether it fits is reported,
    not enforced: a user may know better)."""
    cls = topology.topology_class()
    summary = topology.summary()
    if requested == AUTO:
        prof = next(p for p in profiles.values() if cls in p.auto_for)
        why = {"no-gpu": "no NVIDIA GPU found", "single": "one GPU: no collectives to tune",
               "nvlink": "NVLink present: NCCL's own tuning is the reference",
               "pcie": f"{topology.gpu_count} GPUs on PCIe only"}[cls]
        return Resolution(prof, AUTO, cls, summary, f"auto -> {prof.name}: {why}")
    if requested not in profiles:
        known = ", ".join(profile_names(profiles))
        raise UserError(f"--profile {requested}: unknown profile (known: {known})")
    prof = profiles[requested]
    fit = "fits" if prof.fits_class(cls) else f"does NOT fit (it is for {', '.join(prof.fits)})"
    return Resolution(prof, requested, cls, summary, f"{prof.name} {fit} this machine's class {cls!r}")


def kill_switch_engaged(environ: dict[str, str]) -> bool:
    return environ.get(KILL_SWITCH, "").strip().lower() in OFF_VALUES


def nccl_conf(profile: Profile, requested: str | None = None) -> str:
    """The profile as an NCCL_CONF_FILE (NCCL >= 2.23; older NCCL reads ~/.nccl.conf or /etc/nccl.conf)."""
    lines = [f"# NCCL profile {profile.name!r} from sglang-blackwell {__version__}"
             + (f" (requested: {requested})" if requested and requested != profile.name else ""),
             f"# {profile.description}",
             "# use: NCCL_CONF_FILE=/path/to/this/file (variables set in the environment still win)"]
    if profile.debug_knobs:
        lines.append("# note: " + DEBUG_NOTE)
    lines += [f"{k}={v}" for k, v in profile.env.items()]
    return "\n".join(lines) + "\n"


def parse_nccl_conf(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        k, v = line.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def conf_files(environ: dict[str, str]) -> list[Path]:
    """The files NCCL reads for defaults, lowest precedence first: /etc/nccl.conf, then $NCCL_CONF_FILE
    (NCCL >= 2.23) or else ~/.nccl.conf. Environment variables override both."""
    user = environ.get("NCCL_CONF_FILE") or str(Path(environ.get("HOME", str(Path.home()))) / ".nccl.conf")
    return [Path("/etc/nccl.conf"), Path(user)]


@dataclass
class EnvRow:
    key: str
    value: str | None
    source: str  # "user", "sitecustomize", "pth", "file <path>", "default"
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "value": self.value, "source": self.source, "note": self.note}


def effective_env(fresh: dict[str, str], user: dict[str, str], *, block_env: dict[str, str] | None,
                  hook: str | None, extra_keys: list[str] = (),
                  files: list[Path] | None = None) -> list[EnvRow]:
    """Where each NCCL variable of a fresh interpreter comes from.

    fresh: NCCL_*/SGLANG_BLACKWELL_* of a fresh interpreter of the target environment (its managed block ran);
    user: the same variables as the user set them (what this process inherited, minus what a managed block
    set); block_env: what the installed block sets (None: no block); hook: "sitecustomize" or "pth"."""
    applied = set(filter(None, fresh.get(APPLIED_ENV, "").split(",")))
    file_vals: dict[str, tuple[str, Path]] = {}
    for f in files if files is not None else conf_files(fresh):
        try:
            vals = parse_nccl_conf(f.read_text())
        except OSError:
            continue
        for k, v in vals.items():
            file_vals[k] = (v, f)
    keys = list(dict.fromkeys([*(block_env or {}), *extra_keys,
                               *sorted(k for k in fresh if k.startswith("NCCL_")), *sorted(file_vals)]))
    rows = []
    for k in keys:
        want = (block_env or {}).get(k)
        if k in fresh and k in user and k not in applied:
            note = f"the profile would set {want}" if want is not None and want != fresh[k] else ""
            rows.append(EnvRow(k, fresh[k], "user", note))
        elif k in fresh and k in applied:
            rows.append(EnvRow(k, fresh[k], hook or "managed block"))
        elif k in fresh:
            rows.append(EnvRow(k, fresh[k], "user"))
        elif k in file_vals:
            v, f = file_vals[k]
            rows.append(EnvRow(k, v, f"file {f}"))
        else:
            note = ""
            if want is not None:
                note = (f"{KILL_SWITCH}={fresh.get(KILL_SWITCH)} disables the profile's {want}"
                        if kill_switch_engaged(fresh) else f"the profile's {want} is not applied")
            rows.append(EnvRow(k, None, "default", note))
    return rows


def user_environ(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment as the user set it: this process's environment minus what a managed block (ours, or a
    parent's) set, as recorded in SGLANG_BLACKWELL_NCCL_APPLIED."""
    environ = dict(os.environ if environ is None else environ)
    for k in filter(None, environ.pop(APPLIED_ENV, "").split(",")):
        environ.pop(k, None)
    return environ


def format_state(st: dict[str, Any]) -> str:
    """`nccl show` text from sitehook.state()."""
    t = st["target"]
    out = [f"environment: {t['executable']} (Python {t['version']})",
           f"site-packages: {t['site_packages']}"]
    if t["shadowed_by"]:
        out.append(f"startup sitecustomize: {t['shadowed_by']} (shadows this environment's own: "
                   "installs use a .pth hook)")
    act = st["active"]
    if act:
        out.append(f"managed block: profile {act['profile']} (requested {act['requested']}, resolved for "
                   f"{act['topology']}) via {act['hook']}: {act['path']}")
    elif not st["installed"]:
        out.append("managed block: none (`sglang-blackwell nccl install` adds one)")
    ks = st["kill_switch"]
    if ks["engaged"]:
        out.append(f"kill switch: {ks['variable']}={ks['value']}: the managed block sets nothing")
    rows = st["env"]
    out.append("")
    if rows:
        out.append("NCCL variables a fresh interpreter of this environment gets:")
        w = max(len(r["key"]) for r in rows)
        vw = max(len(r["value"] or "-") for r in rows)
        for r in rows:
            src = {"default": "default (NCCL decides)", "pth": ".pth hook"}.get(r["source"], r["source"])
            line = f"  {r['key'].ljust(w)}  {(r['value'] or '-').ljust(vw)}  {src}"
            out.append(line + (f"  [{r['note']}]" if r["note"] else ""))
    else:
        out.append("NCCL variables: none set (NCCL decides everything)")
    p = st["profile"]
    if p:
        out += ["", f"profile {p['name']}: {p['reason']}"]
        out += [f"  {k}={v}" for k, v in p["env"].items()] or ["  (sets nothing)"]
        out.append(f"  provenance: {p['provenance']}")
    knobs = set(p["debug_knobs"] if p else []) | {r["key"] for r in rows if r["value"] is not None
                                                  and r["key"] in DEBUG_KNOBS}
    if knobs:
        out += ["", "note: " + DEBUG_NOTE]
    for prob in st["problems"]:
        out.append(f"PROBLEM: {prob}")
    return "\n".join(out)
