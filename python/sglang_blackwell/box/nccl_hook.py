"""The managed block that applies an NCCL profile at interpreter start in a target Python environment.

Where it goes (found by running the target interpreter, never by guessing):
  sitecustomize  <site-packages>/sitecustomize.py, appended as a delimited block; every existing byte is kept.
  pth            where another sitecustomize comes first on sys.path (Debian/Ubuntu system Pythons ship
                 /usr/lib/python3.X/sitecustomize.py, which shadows a venv's own), a `.pth` file in
                 site-packages imports a small module holding the same block. site runs .pth files before
                 sitecustomize, in every interpreter, including spawned TP workers.
The block only touches os.environ (os is already imported at that point): no torch, NVML or CUDA.
Writes happen under an exclusive lock on the site-packages directory, through a temp file + os.replace.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import __version__
from ..errors import UserError
from .nccl import APPLIED_ENV, KILL_SWITCH, OFF_VALUES, Resolution

BEGIN = b"# >>> sglang-blackwell nccl >>>"
END = b"# <<< sglang-blackwell nccl <<<"
META = b"# sglang-blackwell-nccl: "
HOOK_MODULE = "_sglang_blackwell_nccl"
PTH_FILE = "sglang_blackwell_nccl.pth"
SITECUSTOMIZE = "sitecustomize.py"
HOOKS = ("sitecustomize", "pth")
LOCK_TIMEOUT_S = 60.0

_BEGIN_RE = re.compile(rb"(?m)^" + re.escape(BEGIN))
_END_RE = re.compile(rb"(?m)^" + re.escape(END) + rb"[^\n]*(?:\n|$)")

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
        r = subprocess.run([exe, "-c", PROBE], capture_output=True, text=True, timeout=120,
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
    return Target(python=exe, executable=d["executable"], version=d["version"], prefix=d["prefix"],
                  purelib=Path(d["purelib"]), purelib_on_path=d["purelib_on_path"],
                  sitecustomize=d["sitecustomize"], environ=d["environ"])


# ---- the block ------------------------------------------------------------------------------------------
def render_block(meta: dict[str, Any], env: dict[str, str]) -> bytes:
    off = ", ".join(repr(v) for v in OFF_VALUES)
    lines = [
        BEGIN.decode() + " (managed: `sglang-blackwell nccl uninstall` removes it; edits here are lost)",
        META.decode() + json.dumps(meta, sort_keys=True),
        "def _sglang_blackwell_nccl(environ):",
        f"    # NCCL profile {meta['profile']!r}: values already set win; {KILL_SWITCH}=0 disables it",
        f"    if environ.get({KILL_SWITCH!r}, '').strip().lower() in ({off}):",
        "        return",
        f"    applied = [k for k in environ.get({APPLIED_ENV!r}, '').split(',') if k]",
        "    for key, value in (",
        *[f"        ({k!r}, {v!r})," for k, v in env.items()],
        "    ):",
        "        if key not in environ:",
        "            environ.setdefault(key, value)",
        "            applied.append(key)",
        "    if applied:",
        f"        environ[{APPLIED_ENV!r}] = ','.join(dict.fromkeys(applied))",
        "",
        "",
        "_sglang_blackwell_nccl(__import__('os').environ)",
        "del _sglang_blackwell_nccl",
        END.decode(),
    ]
    return ("\n".join(lines) + "\n").encode("ascii")


@dataclass
class Block:
    start: int
    end: int
    meta: dict[str, Any]


def find_block(data: bytes, where: str) -> Block | None:
    starts = [m.start() for m in _BEGIN_RE.finditer(data)]
    ends = [m.end() for m in _END_RE.finditer(data)]
    if not starts and not ends:
        return None
    if len(starts) != 1 or len(ends) != 1 or ends[0] <= starts[0]:
        raise UserError(f"{where}: the sglang-blackwell managed block is damaged ({len(starts)} begin and "
                        f"{len(ends)} end marker(s)); remove the lines between '{BEGIN.decode()}' and "
                        f"'{END.decode()}' by hand, then install again")
    body = data[starts[0]:ends[0]]
    meta_line = next((ln for ln in body.split(b"\n") if ln.startswith(META)), None)
    try:
        meta = json.loads(meta_line[len(META):]) if meta_line else None
    except ValueError:
        meta = None
    if not isinstance(meta, dict) or "profile" not in meta:
        raise UserError(f"{where}: the sglang-blackwell managed block has no readable "
                        f"'{META.decode().strip()}' line; remove the block by hand, then install again")
    return Block(starts[0], ends[0], meta)


def without_block(data: bytes, block: Block) -> bytes:
    start = block.start
    if block.meta.get("joined_newline") and start > 0 and data[start - 1:start] == b"\n":
        start -= 1
    return data[:start] + data[block.end:]


def with_block(data: bytes | None, block_bytes_for, where: str) -> bytes:
    """data (None: no file yet) with the managed block replaced in place, or appended.
    block_bytes_for(joined_newline, created_file) -> the block; both flags are kept from an existing block so
    that uninstall can restore the original bytes."""
    if data is None:
        return block_bytes_for(False, True)
    old = find_block(data, where)
    if old is not None:
        new_block = block_bytes_for(bool(old.meta.get("joined_newline")), bool(old.meta.get("created_file")))
        return data[:old.start] + new_block + data[old.end:]
    joined = bool(data) and not data.endswith(b"\n")
    return data + (b"\n" if joined else b"") + block_bytes_for(joined, False)


# ---- files ------------------------------------------------------------------------------------------------
@contextmanager
def locked(directory: Path, timeout: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """Exclusive flock on the directory itself (no lock file is left behind)."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise UserError(f"{directory}: another sglang-blackwell nccl install/uninstall holds the "
                                    f"lock for more than {timeout:.0f} s") from None
                time.sleep(0.02)
        yield
    finally:
        os.close(fd)  # releases the lock


def _check_writable(directory: Path) -> None:
    try:
        fd, tmp = tempfile.mkstemp(prefix=".sglang-blackwell-", suffix=".probe", dir=directory)
    except OSError as e:
        why = "read-only file system" if e.errno == errno.EROFS else (e.strerror or str(e))
        raise UserError(f"{directory}: cannot write there ({why}); nothing was changed. Run as the "
                        "environment's owner, or pass --python for an environment you can write") from None
    os.close(fd)
    os.unlink(tmp)


def _write_atomic(path: Path, data: bytes) -> None:
    mode = path.stat().st_mode & 0o7777 if path.exists() else 0o666 & ~_umask()
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    _drop_bytecode(path)


def _remove(path: Path) -> None:
    path.unlink()
    _drop_bytecode(path)


def _drop_bytecode(path: Path) -> None:
    """Stale-proof: a rewrite within the same second with the same size would otherwise reuse the old .pyc."""
    if path.suffix != ".py":
        return
    for pyc in (path.parent / "__pycache__").glob(f"{path.stem}.*.pyc"):
        with contextlib.suppress(OSError):
            pyc.unlink()


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise UserError(f"{path}: cannot read: {e.strerror}") from None


# ---- what is installed ------------------------------------------------------------------------------------
@dataclass
class Installed:
    hook: str  # "sitecustomize" or "pth"
    path: Path  # the file holding the block
    meta: dict[str, Any]
    active: bool  # does interpreter startup run it?
    why_inactive: str = ""

    @property
    def profile(self) -> str:
        return self.meta["profile"]

    @property
    def env(self) -> dict[str, str]:
        return {k: v for k, v in self.meta.get("env", [])}

    def to_dict(self) -> dict[str, Any]:
        return {"hook": self.hook, "path": str(self.path), "active": self.active,
                "why_inactive": self.why_inactive, "profile": self.profile,
                "requested": self.meta.get("requested"), "class": self.meta.get("class"),
                "topology": self.meta.get("topology"), "env": self.env}


def installed(target: Target) -> list[Installed]:
    """Managed blocks in the target's site-packages (normally zero or one)."""
    out = []
    sc = _read(target.sitecustomize_path)
    if sc is not None:
        b = find_block(sc, str(target.sitecustomize_path))
        if b is not None:
            why = ""
            if target.shadow:
                why = f"{target.shadow} comes first on sys.path, so this sitecustomize.py never runs"
            out.append(Installed("sitecustomize", target.sitecustomize_path, b.meta, not why, why))
    mod = _read(target.module_path)
    if mod is not None:
        b = find_block(mod, str(target.module_path))
        if b is not None:
            why = "" if target.pth_path.exists() else f"{target.pth_path.name} is missing: nothing imports it"
            if not target.purelib_on_path:
                why = f"{target.purelib} is not on sys.path"
            out.append(Installed("pth", target.module_path, b.meta, not why, why))
    return out


# ---- install / uninstall ----------------------------------------------------------------------------------
@dataclass
class Change:
    hook: str
    written: list[Path]
    removed: list[Path]
    message: str
    env: list = field(default_factory=list)  # install: EnvRows of a fresh interpreter right after writing
    problems: list[str] = field(default_factory=list)


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
            environ: dict[str, str] | None = None) -> Change:
    """Write the block for `res` (replacing any earlier one), then, still under the lock, start a fresh
    interpreter of the target and check that it gets the profile. environ: the user's environment for that
    check (default: this process's, minus what a managed block set)."""
    from .nccl import effective_env, kill_switch_engaged, user_environ

    _check_site(target)
    chosen, why = choose_hook(target, hook)
    meta_base = {"schema": 1, "hook": chosen, "profile": res.profile.name, "requested": res.requested,
                 "class": res.topology_class, "topology": res.topology,
                 "env": [[k, v] for k, v in res.profile.env.items()],
                 "tool": f"sglang-blackwell {__version__}"}

    def block_for(joined: bool, created: bool) -> bytes:
        return render_block(dict(meta_base, joined_newline=joined, created_file=created), res.profile.env)

    site = target.purelib
    with locked(site):
        _check_writable(site)
        written: list[Path] = []
        removed: list[Path] = []
        sc_path, mod_path, pth_path = target.sitecustomize_path, target.module_path, target.pth_path
        sc = _read(sc_path)
        if chosen == "sitecustomize":
            new = with_block(sc, block_for, str(sc_path))
            if new != sc:
                _write_atomic(sc_path, new)
                written.append(sc_path)
            removed += _remove_pth_hook(target)
            where = str(sc_path)
        else:
            new_mod = block_for(False, True)
            if _read(mod_path) != new_mod:
                _write_atomic(mod_path, new_mod)
                written.append(mod_path)
            pth = (f"# sglang-blackwell nccl hook (managed; `sglang-blackwell nccl uninstall` removes it)\n"
                   f"import {HOOK_MODULE}\n").encode()
            if _read(pth_path) != pth:
                _write_atomic(pth_path, pth)
                written.append(pth_path)
            if sc is not None:  # an earlier install into a sitecustomize.py that does not (or no longer) run
                r = _strip_sitecustomize(sc_path, sc)
                (removed if r == "removed" else written).extend([sc_path] if r else [])
            where = f"{pth_path} -> {mod_path}"
        user = user_environ(environ)
        fresh = probe(target.python, user).environ
    rows = effective_env(fresh, user, block_env=res.profile.env, hook=chosen, files=[])
    problems = []
    missing = [k for k in res.profile.env if k not in fresh]
    if missing and not kill_switch_engaged(fresh):
        problems.append(f"a fresh {target.executable} does not get {missing} after the install: its startup "
                        f"does not run {where} (try --hook pth)")
    msg = f"installed profile {res.profile.name} ({res.reason}) via {chosen}: {where}; {why}"
    return Change(chosen, written, removed, msg, [r for r in rows if r.key in res.profile.env], problems)


def _remove_pth_hook(target: Target) -> list[Path]:
    gone = []
    if target.pth_path.exists():
        _remove(target.pth_path)
        gone.append(target.pth_path)
    mod = _read(target.module_path)
    if mod is not None and find_block(mod, str(target.module_path)) is not None:
        _remove(target.module_path)
        gone.append(target.module_path)
    return gone


def _strip_sitecustomize(path: Path, data: bytes) -> str | None:
    b = find_block(data, str(path))
    if b is None:
        return None
    rest = without_block(data, b)
    if b.meta.get("created_file") and not rest:
        _remove(path)
        return "removed"
    _write_atomic(path, rest)
    return "written"


def uninstall(target: Target) -> Change:
    site = target.purelib
    if not site.is_dir():
        return Change("", [], [], f"{site}: no site-packages directory, nothing installed")
    with locked(site):
        sc = _read(target.sitecustomize_path)
        has_sc = sc is not None and find_block(sc, str(target.sitecustomize_path)) is not None
        mod = _read(target.module_path)
        has_pth = target.pth_path.exists() or (
            mod is not None and find_block(mod, str(target.module_path)) is not None)
        if not has_sc and not has_pth:
            return Change("", [], [], f"no sglang-blackwell NCCL block in {site}; nothing to do")
        _check_writable(site)
        written, removed = [], []
        if has_sc:
            r = _strip_sitecustomize(target.sitecustomize_path, sc)
            (removed if r == "removed" else written).append(target.sitecustomize_path)
        removed += _remove_pth_hook(target)
    parts = [f"restored {p}" for p in written] + [f"removed {p}" for p in removed]
    return Change("", written, removed, "; ".join(parts))


# ---- state: what `nccl show` and `doctor` report ----------------------------------------------------------
def state(python: str | None = None, *, profiles: dict | None = None, requested: str | None = None,
          topology=None, environ: dict[str, str] | None = None) -> dict[str, Any]:
    """Everything about NCCL tuning in the target environment, as plain data:
    target, installed blocks (and whether they run / still fit the hardware), the variables a fresh
    interpreter gets with their sources, and (requested) what a profile would set."""
    from .nccl import effective_env, kill_switch_engaged, load_profiles, resolve, user_environ

    profiles = profiles if profiles is not None else load_profiles()
    user = user_environ(environ)
    target = probe(python, user)
    blocks = installed(target)
    active = next((b for b in blocks if b.active), None)
    res = None
    if requested or topology is not None:
        from .topology import detect

        topology = topology if topology is not None else detect(cuda=False)
        res = resolve(requested or "auto", topology, profiles)
    extra = list(res.profile.env) if res else []
    rows = effective_env(target.environ, user, block_env=active.env if active else None,
                         hook=active.hook if active else None, extra_keys=extra)
    problems = [f"managed block in {b.path} is inactive: {b.why_inactive} (fix: sglang-blackwell nccl install"
                f"{' --python ' + python if python else ''})" for b in blocks if not b.active]
    if len(blocks) > 1:
        problems.append(f"{len(blocks)} managed blocks found ({', '.join(str(b.path) for b in blocks)}); "
                        "fix: sglang-blackwell nccl install (keeps one)")
    if active and active.env:
        missing = [k for k in active.env if k not in target.environ]
        if missing and not kill_switch_engaged(target.environ):
            problems.append(f"the block in {active.path} ran, yet a fresh interpreter lacks {missing}")
    return {
        "target": target.to_dict(),
        "installed": [b.to_dict() for b in blocks],
        "active": active.to_dict() if active else None,
        "kill_switch": {"variable": KILL_SWITCH, "value": target.environ.get(KILL_SWITCH),
                        "engaged": kill_switch_engaged(target.environ)},
        "env": [r.to_dict() for r in rows],
        "profile": ({"requested": res.requested, "name": res.profile.name, "reason": res.reason,
                     "class": res.topology_class, "topology": res.topology, "env": dict(res.profile.env),
                     "fits": res.profile.fits_class(res.topology_class),
                     "debug_knobs": res.profile.debug_knobs, "provenance": res.profile.provenance}
                    if res else None),
        "problems": problems,
    }
