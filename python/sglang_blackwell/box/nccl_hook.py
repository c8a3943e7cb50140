"""The managed block that applies an NCCL profile at interpreter start in a target Python environment:
install / uninstall / state.

Where it goes (found by running the target interpreter, never by guessing: nccl_target):
  sitecustomize  <site-packages>/sitecustomize.py, appended as a delimited block; every existing byte is kept.
  pth            where another sitecustomize comes first on sys.path (Debian/Ubuntu system Pythons ship
                 /usr/lib/python3.X/sitecustomize.py, which shadows a venv's own), a `.pth` file in
                 site-packages imports a small module holding the same block. site runs .pth files before
                 sitecustomize, in every interpreter, including spawned TP workers.
  nccl-conf      (`install --nccl-conf PATH`, next to one of the two above) the profile also goes into an NCCL
                 config file as the same kind of delimited block, for NCCL programs not started by Python;
                 NCCL reads it where NCCL_CONF_FILE names it (nccl_conf_mode). The startup block then records the
                 path: it applies the profile only while NCCL would read that file (NCCL_CONF_FILE unset or naming
                 it), and its kill switch also points NCCL_CONF_FILE at /dev/null.
The blocks' bytes are nccl_block's; every file is edited by nccl_edit's put_block / strip_block, and uninstall
removes exactly what install added. An install whose fresh interpreter does not get the profile puts every file
back as it was (nccl_edit.Journal), so a failed install leaves nothing; a failed uninstall, likewise.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import __version__
from ..errors import UserError
from . import nccl_conf as conf
from .nccl import CONF_WAS_ENV, KILL_SWITCH, Resolution
from .nccl_block import LEGACY_PTH, find_block, render_block, render_conf_block, render_pth_block
from .nccl_conf_mode import conf_hints, conf_mode_off, conf_target
from .nccl_edit import (
    Journal,
    check_writable,
    editable,
    locked_all,
    put_block,
    read_or_none,
    real_file,
    remove_file,
    strip_block,
)
from .nccl_installed import CONF_HOOK, HOOKS, conf_file_blocks, installed
from .nccl_target import Target, probe


@dataclass
class Change:
    hook: str
    written: list[Path]
    removed: list[Path]
    message: str
    env: list = field(default_factory=list)  # install: EnvRows of a fresh interpreter right after writing
    problems: list[str] = field(default_factory=list)
    nccl_conf: Path | None = None  # install: the NCCL config file written
    conf_env: list = field(default_factory=list)  # install: (name, value, where) NCCL takes from that file
    notes: list[str] = field(default_factory=list)  # install: how NCCL_CONF_FILE reaches other programs


def _check_site(target: Target) -> None:
    site = target.purelib
    if not site.is_dir():
        raise UserError(f"{site}: the site-packages directory of {target.executable} does not exist; nothing "
                        "was changed (create it, e.g. by installing any package into that environment)")
    if not target.purelib_on_path:
        raise UserError(f"{site}: not on sys.path of {target.executable}, so no hook there would run; "
                        "nothing was changed")



def choose_hook(target: Target, hook: str = "auto") -> tuple[str, str]:
    """(hook, reason)."""
    if hook not in ("auto", *HOOKS):
        raise UserError(f"--hook {hook}: must be auto, sitecustomize or pth")
    shadow = target.shadow
    if hook == "sitecustomize" and shadow:
        raise UserError(f"--hook sitecustomize: {shadow} shadows {target.sitecustomize_path}, which would "
                        "never run; use --hook pth (the default picks it)")
    if hook == "pth" or (hook == "auto" and shadow):
        why = (f"{shadow} shadows this environment's sitecustomize.py (a system Python's, e.g. Debian/Ubuntu)"
               if shadow else "requested with --hook pth")
        return "pth", why
    return "sitecustomize", "no other sitecustomize comes first on sys.path"



def install(target: Target, res: Resolution, hook: str = "auto",
            environ: dict[str, str] | None = None, nccl_conf: str | os.PathLike | None = None) -> Change:
    """Write the block for `res` (replacing any earlier one), then, still under the lock, start a fresh
    interpreter of the target and check that it gets the profile; when it does not, every file is put back as
    it was and the install is refused (UserError). environ: the user's environment for that check (default:
    this process's, minus what a managed block set). nccl_conf: also write the profile into this NCCL config
    file (default: the file an earlier install recorded, if any)."""
    from .nccl import effective_env, kill_switch_engaged, user_environ
    from .nccl import nccl_conf as render_conf

    _check_site(target)
    chosen, why = choose_hook(target, hook)
    rules = target.conf_rules
    earlier = next((b.nccl_conf for b in installed(target, rules) if b.nccl_conf), None)
    conf_path = conf_target(nccl_conf) if nccl_conf else None
    kept = False
    if conf_path is None and earlier:
        conf_path, kept = conf_target(earlier, "the NCCL config file of the earlier install,"), True
    moved_from = (Path(earlier) if earlier and conf_path and not conf.same_file(earlier, conf_path)
                  and Path(earlier).parent.is_dir() else None)
    meta_base = {"schema": 1, "hook": chosen, "profile": res.profile.name, "requested": res.requested,
                 "class": res.topology_class, "topology": res.topology,
                 "env": [[k, v] for k, v in res.profile.env.items()],
                 "tool": f"sglang-blackwell {__version__}"}
    py_meta = dict(meta_base, **({"nccl_conf": str(conf_path)} if conf_path else {}))
    conf_body = render_conf(res.profile, res.requested)

    def block_for(joined: bool, created: bool) -> bytes:
        return render_block(dict(py_meta, joined_newline=joined, created_file=created), res.profile.env,
                            str(conf_path) if conf_path else None)

    def conf_block_for(joined: bool, created: bool) -> bytes:
        return render_conf_block(dict(meta_base, hook=CONF_HOOK, joined_newline=joined, created_file=created),
                                 conf_body)

    def pth_block_for(joined: bool, created: bool) -> bytes:
        return render_pth_block(dict(py_meta, joined_newline=joined, created_file=created))

    site = target.purelib
    conf_dirs = [p.parent for p in (conf_path, moved_from) if p is not None]
    journal = Journal()
    with locked_all([site, *conf_dirs]):
        check_writable(site)
        for d in conf_dirs:
            check_writable(d, "Run as the owner of that directory, or pass --nccl-conf with a path you can write")
        written: list[Path] = []
        removed: list[Path] = []
        sc_path, mod_path, pth_path = target.sitecustomize_path, target.module_path, target.pth_path
        try:
            # every file is checked before the first one is written (a refusal changes nothing)
            for path in (conf_path, sc_path) if chosen == "sitecustomize" else (conf_path, mod_path, pth_path):
                if path is not None:
                    editable(path)
            sc = read_or_none(sc_path)
            if conf_path is not None and put_block(conf_path, conf_block_for, journal):
                written.append(conf_path)
            if moved_from is not None:
                r = strip_block(moved_from, journal=journal)
                (removed if r == "removed" else written).extend([moved_from] if r else [])
            if chosen == "sitecustomize":
                if put_block(sc_path, block_for, journal, target.executable):
                    written.append(sc_path)
                removed += _remove_pth_hook(target, journal)
                where = str(sc_path)
            else:
                if put_block(mod_path, block_for, journal, target.executable):
                    written.append(mod_path)
                if read_or_none(pth_path) == LEGACY_PTH:
                    remove_file(pth_path, journal)
                if put_block(pth_path, pth_block_for, journal):
                    written.append(pth_path)
                if sc is not None:  # an earlier install into a sitecustomize.py that does not (or no longer) run
                    r = strip_block(sc_path, sc, journal)
                    (removed if r == "removed" else written).extend([sc_path] if r else [])
                where = f"{pth_path} -> {mod_path}"
            user = user_environ(environ)
            after = probe(target.python, user)
            fresh = after.environ
            conf_file = conf.read(conf_path, "--nccl-conf", rules) if conf_path else None
            off = conf_mode_off(str(conf_path) if conf_path else None, user)
            missing = [k for k in res.profile.env if k not in fresh]
            if not off and missing and not kill_switch_engaged(fresh):
                said = f"; its startup reports: {' | '.join(after.startup_errors)}" if after.startup_errors else ""
                raise UserError(f"{where}: a fresh {target.executable} did not get {missing} with the block "
                                f"written: its startup does not run it{said} (try --hook pth); nothing was changed")
            unread = [f"{k}={v}" for k, v in res.profile.env.items()
                      if conf_file is not None and k not in conf_file.values]
            if unread:
                raise UserError(f"{conf_path}: NCCL would not read {', '.join(unread)} from it (NCCL reads each line "
                                "byte for byte); nothing was changed")
        except BaseException as e:
            failed = journal.undo()
            if failed and isinstance(e, UserError):
                raise UserError(f"{e}; BUT these could not be restored: {', '.join(failed)}") from None
            raise
    rows = effective_env(fresh, user, block_env=res.profile.env, hook=chosen, files=[])
    problems: list[str] = []
    notes = [f"note: {off}"] if off else []
    msg = f"installed profile {res.profile.name} ({res.reason}) via {chosen}: {where}; {why}"
    conf_env = []
    if conf_file is not None:
        msg += f"\nNCCL config file {conf_path}" + (" (kept from the earlier install)" if kept else "")
        vals = conf_file.values
        for k, v in res.profile.env.items():
            e = vals[k]
            if e.value != v:
                notes.append(f"note: {conf_path} line {e.line}, above the block, sets {k}={e.value!r}: NCCL keeps "
                             "that one (your lines win)")
            conf_env.append((k, e.value, f"line {e.line}"))
        if not conf.same_file(user.get(conf.CONF_ENV) or os.devnull, conf_path):
            notes += conf_hints(conf_path)
    return Change(chosen, written, removed, msg, [r for r in rows if r.key in res.profile.env], problems,
                  conf_path, conf_env, notes)


def _remove_pth_hook(target: Target, journal: Journal | None = None) -> list[Path]:
    """Take the pth hook out: our block out of the .pth file and the module (strip_block), an old-style .pth file
    of ours removed."""
    gone = []
    pth = read_or_none(target.pth_path)
    if pth == LEGACY_PTH:
        editable(target.pth_path)
        remove_file(target.pth_path, journal)
        gone.append(target.pth_path)
    elif pth is not None and strip_block(target.pth_path, pth, journal) == "removed":
        gone.append(target.pth_path)
    if strip_block(target.module_path, journal=journal) == "removed":
        gone.append(target.module_path)
    return gone


def uninstall(target: Target, nccl_conf: str | os.PathLike | None = None) -> Change:
    """Remove every managed block: the startup block, and the NCCL config-file block (in `nccl_conf`, else
    in the file the startup block names and in the files NCCL reads here). Nothing is changed unless every file
    can be (a failure midway puts back what was already changed)."""
    site = target.purelib
    site_ok = site.is_dir()
    blocks = installed(target) if site_ok else conf_file_blocks(target, [], target.conf_rules)
    confs = ([Path(os.path.abspath(os.path.expanduser(os.fspath(nccl_conf))))] if nccl_conf
             else [b.path for b in blocks if b.hook == CONF_HOOK])
    confs = [p for p in confs if p.parent.is_dir()]
    if not site_ok and not confs:
        return Change("", [], [], f"{site}: no site-packages directory, nothing installed")
    with locked_all([*([site] if site_ok else []), *(p.parent for p in confs)]):
        sc = read_or_none(target.sitecustomize_path) if site_ok else None
        has_sc = sc is not None and find_block(sc, str(target.sitecustomize_path)) is not None
        mod = read_or_none(target.module_path) if site_ok else None
        pth = read_or_none(target.pth_path) if site_ok else None
        has_pth = site_ok and (pth == LEGACY_PTH or (pth is not None and find_block(pth, str(target.pth_path))
                                                     is not None)
                               or (mod is not None and find_block(mod, str(target.module_path)) is not None))
        conf_data = {p: d for p in confs if (d := read_or_none(p)) is not None and find_block(d, str(p)) is not None}
        if not has_sc and not has_pth and not conf_data:
            where = " or ".join(map(str, [site, *confs]))
            return Change("", [], [], f"no sglang-blackwell NCCL block in {where}; nothing to do")
        if has_sc or has_pth:
            check_writable(site)
        for p in conf_data:
            check_writable(p.parent, "Run as the owner of that directory")
        for p in [*conf_data, *([target.sitecustomize_path] if has_sc else []),
                  *([target.pth_path, target.module_path] if has_pth else [])]:
            if p.exists() or p.is_symlink():
                editable(p)
        written, removed = [], []
        journal = Journal()
        try:
            for p, d in conf_data.items():
                r = strip_block(p, d, journal)
                (removed if r == "removed" else written).append(p)
            if has_sc:
                r = strip_block(target.sitecustomize_path, sc, journal)
                (removed if r == "removed" else written).append(target.sitecustomize_path)
            if site_ok:
                gone = _remove_pth_hook(target, journal)
                removed += gone
                written += [q for q in (target.pth_path, target.module_path)
                            if has_pth and q not in gone and real_file(q) in journal.saved]
        except BaseException as e:
            failed = journal.undo()
            if failed and isinstance(e, UserError):
                raise UserError(f"{e}; BUT these could not be restored: {', '.join(failed)}") from None
            raise
    parts = [f"restored {p}" for p in written] + [f"removed {p}" for p in removed]
    return Change("", written, removed, "; ".join(parts))


# ---- state: what `nccl show` and `doctor` report ----------------------------------------------------------
def state(python: str | None = None, *, profiles: dict | None = None, requested: str | None = None,
          topology=None, environ: dict[str, str] | None = None, nccl_version: str | None = None) -> dict[str, Any]:
    """Everything about NCCL tuning in the target environment, as plain data:
    target, installed blocks (and whether they run / still fit the hardware), NCCL's config files as that
    environment's NCCL reads them (nccl_version: that NCCL's version, default: the environment's NCCL wheel),
    the variables a fresh interpreter gets with their sources, and (requested) what a profile would set."""
    from .nccl import effective_env, kill_switch_engaged, load_profiles, resolve, user_environ

    profiles = profiles if profiles is not None else load_profiles()
    user = user_environ(environ)
    target = probe(python, user)
    rules = conf.rules_for(nccl_version, "the NCCL in use") if nccl_version else target.conf_rules
    files = conf.read_all(target.conf_environ, rules)
    hazards = []
    for cf in files:
        try:
            b = find_block(cf.data, str(cf.path)) if cf.data else None
        except UserError as e:
            hazards.append(str(e))
            b = None
        cf.managed = (b.start, b.end) if b else None
        hazards += [f"{cf.path}: {h}" for h in cf.hazards]
        if cf.error:
            hazards.append(f"{cf.path}: NCCL cannot read it either ({cf.error}): it is skipped")
        if cf.unread:
            hazards.append(f"{cf.path} ({cf.role}): {cf.unread}")
    every = installed(target, rules)
    blocks = [b for b in every if b.hook in HOOKS]
    conf_blocks = [b for b in every if b.hook == CONF_HOOK]
    active = next((b for b in blocks if b.active), None)
    res = None
    if requested or topology is not None:
        from .topology import detect

        topology = topology if topology is not None else detect(cuda=False)
        res = resolve(requested or "auto", topology, profiles)
    extra = list(res.profile.env) if res else []
    rows = effective_env(target.environ, user, block_env=active.env if active else None,
                         hook=active.hook if active else None, extra_keys=extra, files=files)
    problems = [f"managed block in {b.path} is inactive: {b.why_inactive} (fix: sglang-blackwell nccl install"
                f"{' --python ' + python if python else ''})" for b in blocks if not b.active]
    if len(blocks) > 1:
        problems.append(f"{len(blocks)} managed blocks found ({', '.join(str(b.path) for b in blocks)}); "
                        "fix: sglang-blackwell nccl install (keeps one)")
    off = conf_mode_off(active.nccl_conf, target.environ) if active else None
    if active and active.env and not off:
        missing = [k for k in active.env if k not in target.environ]
        if missing and not kill_switch_engaged(target.environ):
            problems.append(f"the block in {active.path} ran, yet a fresh interpreter lacks {missing}")
    conf_fix = None
    if hazards:
        conf_fix = ("edit the lines named: NCCL reads each line byte for byte (no spaces around '=', LF line "
                    "ends, the first line for a name wins)")
    for b in conf_blocks:
        if b.active and conf.same_file(b.path, conf.ETC_CONF):
            problems.append(f"a profile block in {conf.ETC_CONF}: NCCL reads it in every process, so it cannot be "
                            "switched off (fix: sglang-blackwell nccl uninstall, which removes it, then install "
                            "--nccl-conf <a file of ours named by NCCL_CONF_FILE>)")
        elif not b.active and not off and CONF_WAS_ENV not in target.environ \
                and not target.environ.get(conf.CONF_ENV):
            problems.append(f"NCCL config block in {b.path} is not read here: {b.why_inactive}")
            conf_fix = (f"set {conf.CONF_ENV}={b.path} for every process (image: ENV; a box: /etc/environment or "
                        "/etc/profile.d; see docs/nccl-and-doctor.md)")
    return {
        "target": target.to_dict(),
        "installed": [b.to_dict() for b in blocks],
        "active": active.to_dict() if active else None,
        "kill_switch": {"variable": KILL_SWITCH, "value": target.environ.get(KILL_SWITCH),
                        "engaged": kill_switch_engaged(target.environ)},
        "env": [r.to_dict() for r in rows],
        "nccl_conf": {"rules": dict(rules.to_dict(), label=rules.label), "files": [cf.to_dict() for cf in files],
                      "blocks": [b.to_dict() for b in conf_blocks], "hazards": hazards, "off": off,
                      "fix": conf_fix},
        "profile": ({"requested": res.requested, "name": res.profile.name, "reason": res.reason,
                     "class": res.topology_class, "topology": res.topology, "env": dict(res.profile.env),
                     "fits": res.profile.fits_class(res.topology_class),
                     "debug_knobs": res.profile.debug_knobs, "provenance": res.profile.provenance}
                    if res else None),
        "problems": problems,
    }
