"""NCCL tuning profiles as data (nccl_profiles.toml): load and validate them, resolve `auto` from the
topology, render a profile as an NCCL config file, and say where each NCCL variable a fresh process gets comes
from (user / the managed block / an NCCL config file / NCCL's default).

Installing a profile is nccl_hook.py's job, reading NCCL's config files nccl_conf.py's; this module never
touches files."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import __version__, envswitch
from ..errors import UserError
from ..tomlio import load_file
from . import nccl_conf as conf
from .topology import CLASSES, Topology

PROFILES_FILE = Path(__file__).with_name("nccl_profiles.toml")
AUTO = "auto"
KILL_SWITCH = "SGLANG_BLACKWELL_NCCL"  # =0 (or false/off/no): the managed block sets nothing
APPLIED_ENV = "SGLANG_BLACKWELL_NCCL_APPLIED"  # keys the managed block set in this process tree
# the user's NCCL_CONF_FILE ('' = unset) where the kill switch pointed it at /dev/null (NCCL-config mode)
CONF_WAS_ENV = "SGLANG_BLACKWELL_NCCL_CONF_FILE_WAS"
OFF_VALUES = envswitch.OFF  # what the startup block reads as off (envswitch: the one parser)
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
    data = load_file(path, "profiles file")
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
    return not envswitch.parse(KILL_SWITCH, environ.get(KILL_SWITCH), True)


def nccl_conf(profile: Profile, requested: str | None = None) -> str:
    """The profile as an NCCL config file (NCCL_CONF_FILE, NCCL >= 2.23; older NCCL reads ~/.nccl.conf).
    No comment line holds an '=': NCCL < 2.26 reads '#' lines like any other."""
    lines = [f"# NCCL profile {profile.name!r} from sglang-blackwell {__version__}"
             + (f" (requested: {requested})" if requested and requested != profile.name else ""),
             f"# {profile.description}",
             "# use: point NCCL_CONF_FILE at this file (variables set in the environment still win)"]
    if profile.debug_knobs:
        lines.append("# note: " + DEBUG_NOTE)
    lines = [ln.replace("=", " ") for ln in lines]
    lines += [f"{k}={v}" for k, v in profile.env.items()]
    return "\n".join(lines) + "\n"


@dataclass
class EnvRow:
    key: str
    value: str | None
    source: str  # "user", "sitecustomize", "pth", "nccl-conf <path>", "file <path>", "default"
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "value": self.value, "source": self.source, "note": self.note}


def effective_env(fresh: dict[str, str], user: dict[str, str], *, block_env: dict[str, str] | None,
                  hook: str | None, extra_keys: list[str] = (),
                  files: list[conf.ConfFile] | None = None, rules: conf.Rules | None = None) -> list[EnvRow]:
    """Where each NCCL variable of a fresh interpreter comes from.

    fresh: NCCL_*/SGLANG_BLACKWELL_* of a fresh interpreter of the target environment (its managed block ran);
    user: the same variables as the user set them (what this process inherited, minus what a managed block
    set); block_env: what the installed block sets (None: no block); hook: "sitecustomize" or "pth";
    files: NCCL's config files as NCCL reads them in that interpreter (default: read them now, by `rules`).
    A file line inside a managed block (ConfFile.managed) is reported as "nccl-conf <path>"."""
    applied = set(filter(None, fresh.get(APPLIED_ENV, "").split(",")))
    files = files if files is not None else conf.read_all(fresh, rules)
    from_files = conf.from_files(files, fresh)
    keys = list(dict.fromkeys([*(block_env or {}), *extra_keys,
                               *sorted(k for k in fresh if k.startswith("NCCL_")),
                               *(k for k in from_files if k.startswith("NCCL_") and conf.ENV_NAME_RE.match(k))]))
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
        elif k in from_files:
            e, cf = from_files[k]
            ours = cf.managed is not None and cf.managed[0] <= e.offset < cf.managed[1]
            note = f"line {e.line}" + (f"; the profile would set {want}" if want is not None and want != e.value
                                       else "")
            rows.append(EnvRow(k, e.value, f"{'nccl-conf' if ours else 'file'} {cf.path}", note))
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
    if CONF_WAS_ENV in environ:  # the kill switch pointed NCCL_CONF_FILE at /dev/null: the user's value back
        was = environ.pop(CONF_WAS_ENV)
        if was:
            environ[conf.CONF_ENV] = was
        else:
            environ.pop(conf.CONF_ENV, None)
    return environ


def conf_file_lines(files: list[dict[str, Any]], rules: conf.Rules) -> list[str]:
    """One line per file NCCL looks for, in its reading order (nccl_conf.files_read): $NCCL_CONF_FILE, which
    replaces ~/.nccl.conf when set, then /etc/nccl.conf; the one NCCL_CONF_FILE replaces is named as not read."""
    def what(f: dict[str, Any]) -> str:
        if f["error"]:
            return f"unreadable ({f['error']})"
        if not f["exists"]:
            return "absent"
        return f"{len(f['values'])} variable(s)" + (" (holds the sglang-blackwell block)" if f["managed_block"] else "")

    roles = {f["role"] for f in files}
    out = []
    if not rules.conf_file_env:
        out.append(f"{conf.CONF_ENV}: not read ({rules.label}: NCCL reads it from 2.23)")
    elif conf.CONF_ENV not in roles:
        out.append(f"{conf.CONF_ENV}: not set")
    for f in files:
        out.append(f"{f['role'] + ': ' if f['role'] != f['path'] else ''}{f['path']}: {what(f)}")
        if f["role"] == conf.CONF_ENV:
            out.append(f"~/.nccl.conf: not read ({conf.CONF_ENV} is set: NCCL reads that file instead)")
    return out


def format_state(st: dict[str, Any]) -> str:
    """`nccl show` text from nccl_hook.state()."""
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
    nc = st.get("nccl_conf") or {}
    if act and act.get("nccl_conf"):
        out.append(f"NCCL config mode: the same profile in {act['nccl_conf']}, for every NCCL program that gets "
                   f"{conf.CONF_ENV}={act['nccl_conf']}")
    ks = st["kill_switch"]
    if ks["engaged"]:
        out.append(f"kill switch: {ks['variable']}={ks['value']}: the managed block sets nothing"
                   + (f" and NCCL skips {act['nccl_conf']}" if act and act.get("nccl_conf") else ""))
    if nc.get("off"):
        out.append(f"off: {nc['off']}")
    if nc.get("files"):
        out += ["", f"NCCL config files, in the order {nc['rules']['label']} reads them ({nc['rules']['source']}; "
                    "the environment wins over every file, an earlier file over a later one):"]
        out += [f"  {ln}" for ln in conf_file_lines(nc["files"], conf.rules_for(nc["rules"]["version"]))]
        for b in nc.get("blocks", []):
            if not b["active"]:
                out.append(f"  block in {b['path']} (profile {b['profile']}) is not read here: {b['why_inactive']}")
        for h in nc.get("hazards", []):
            out.append(f"  check: {h}")
    rows = st["env"]
    out.append("")
    if rows:
        out.append("NCCL variables a fresh interpreter of this environment gets:")
        def shown(v: str | None) -> str:
            return "-" if v is None else v if v.isprintable() and v == v.strip() and v else repr(v)

        w = max(len(r["key"]) for r in rows)
        vw = max(len(shown(r["value"])) for r in rows)
        for r in rows:
            src = {"default": "default (NCCL decides)", "pth": ".pth hook"}.get(r["source"], r["source"])
            if src.startswith("nccl-conf "):
                src = f"NCCL config block {src[len('nccl-conf '):]}"
            line = f"  {r['key'].ljust(w)}  {shown(r['value']).ljust(vw)}  {src}"
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
