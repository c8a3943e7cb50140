#!/usr/bin/env python3
"""Verify and install an sglang-blackwell bundle (written by `sglang-blackwell bundle`; this file travels in the
bundle as install_bundle.py next to install.sh and manifest.json, and needs only the Python standard library).

    bash install.sh [--target DIR] [--stage DIR [--stage-only]] [--verify-only] [--python PY] [--no-jit] [--force]
                    [--expect-id ID]

0. The installer is checked before it runs, by the user, with nothing from the bundle: `sglang-blackwell bundle`
   prints `check first: (cd DIR && printf '%s  %s\n' SHA install.sh SHA install_bundle.py | sha256sum -c) && bash
   DIR/install.sh --expect-id ID ...` (the same two sha256 for every chunk). No file of the bundle can vouch for
   itself: an edited install.sh runs before any check of ours, an edited install_bundle.py checks what it likes.
   install.sh runs this file with `python3 -I` (no module of the bundle's directory, the working directory or
   PYTHONPATH is imported instead of the standard library's), and every interpreter it starts runs in an empty
   private directory.
   The bundle id is recomputed from the manifest (content_id: the sha256 of everything in it but the id and the
   chunk name; the manifest records the size and sha256 of every file, install.sh and install_bundle.py
   included): a manifest edited after the bundle was made (a wheel swapped and its sha256 and size fixed) no
   longer matches its id and is refused (exit 4), and so is an install.sh or install_bundle.py that is not the
   one the manifest records (a chunk of another bundle; exit 4). --expect-id ID (the id `bundle` printed, 16 to
   64 hex digits) refuses any other bundle. With the installer checked first, that proves every file staged or
   installed is the one `bundle` wrote; without that check it proves nothing against someone who can edit the
   installer.
1. Verify: every file the manifest lists that is present (this directory, sibling chunk directories c1, c2, ... of
   the same bundle, and the staged copy) must have the manifest's size and sha256. One bad file refuses the
   whole bundle (exit 4) before anything is staged or installed.
2. Stage (--stage DIR): copy the verified files into DIR/<bundle id>/ so that chunks carried at different times
   come together there (call 1: `c1/install.sh --stage DIR --stage-only`; call 2: `c2/install.sh --stage DIR`).
   DIR/<bundle id>/ is ours: a symbolic link in it (or it a link, or of another user) is refused (exit 2) before
   anything is read from it or written; every file is written to a new file of a random name (O_EXCL, O_NOFOLLOW)
   in a directory opened without following links, then renamed into place.
3. Install, once every file is present (else exit 3 naming the missing chunks):
   `PY -m pip install --no-index --no-deps --no-compile` of every wheel, into --target DIR (then use
   PYTHONPATH=DIR) or into PY's environment; then the prebuilt FlashInfer modules into flashinfer's AOT slots
   (flashinfer/data/aot/<name>/<name>.so), unless the GPU's capability is not among the archs they were built for.
   With --target, a marker records the bundle and the .dist-info directories it installed; a later run with the
   same bundle skips the install only while every file those directories' RECORDs list is still there. A symbolic
   link in --target where a wheel installs a top-level name is refused (exit 2): pip would leave it in place; so is
   a --target that is itself a symbolic link or a directory of another user (as --stage refuses its directory).
Exit codes: 0 done, 2 bad usage or wrong Python, 3 files missing, 4 verification failed, 5 pip failed.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import hashlib
import json
import os
import re
import secrets
import stat
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

SCHEMA = "sglang-blackwell/bundle/1"
SUPPORT_FILES = ("install.sh", "install_bundle.py")
MARKER = ".sglang-blackwell-bundle.json"
EXIT_USAGE, EXIT_MISSING, EXIT_TAMPERED, EXIT_PIP = 2, 3, 4, 5


class Refused(Exception):
    def __init__(self, code: int, msg: str):
        super().__init__(msg)
        self.code = code


def run_isolated(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    """subprocess.run in an empty private working directory: `python -c` and `python -m pip` put the working
    directory first on sys.path, before the standard library, so a module planted where the user stands (a
    bundle directory, say) would run instead."""
    with tempfile.TemporaryDirectory(prefix="sglang-blackwell-install-") as cwd:
        return subprocess.run(cmd, cwd=cwd, **kw)


def say(msg: str) -> None:
    print(msg, flush=True)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def content_id(m: dict) -> str:
    """The bundle id: sha256 of the manifest's canonical JSON without the id itself and the chunk name (each chunk
    directory's copy differs only there). `sglang-blackwell bundle` computes it with this function."""
    body = {k: v for k, v in m.items() if k not in ("bundle_id", "chunk")}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _safe_rel(p: object) -> bool:
    return (isinstance(p, str) and bool(p) and not p.startswith("/") and "\\" not in p
            and all(x not in ("", ".", "..") for x in p.split("/")))


def load_manifest(path: Path) -> dict:
    try:
        m = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise Refused(EXIT_TAMPERED, f"{path}: unreadable manifest ({e})") from None
    if not isinstance(m, dict) or m.get("schema") != SCHEMA or not isinstance(m.get("files"), list) \
            or not isinstance(m.get("bundle_id"), str):
        raise Refused(EXIT_TAMPERED, f"{path}: not a {SCHEMA} manifest")
    for key in ("base", "python", "python_tag"):
        if not isinstance(m.get(key), str):
            raise Refused(EXIT_TAMPERED, f"{path}: not a {SCHEMA} manifest ({key!r} is not a string)")
    for i, f in enumerate(m["files"]):
        ok = (isinstance(f, dict) and _safe_rel(f.get("path")) and isinstance(f.get("size"), int)
              and isinstance(f.get("sha256"), str) and isinstance(f.get("kind"), str)
              and isinstance(f.get("chunk", ""), str)
              and (f.get("kind") != "jit" or (isinstance(f.get("module"), str)
                                             and re.fullmatch(r"[A-Za-z0-9_]+", f["module"])
                                             and isinstance(f.get("archs"), list))))
        if not ok:
            raise Refused(EXIT_TAMPERED, f"{path}: files[{i}] is not a file entry of a {SCHEMA} manifest (path, "
                          "size, sha256, kind; a path inside the bundle)")
    inst = m.get("installer")
    if not (isinstance(inst, dict) and set(inst) == set(SUPPORT_FILES)
            and all(isinstance(v, dict) and isinstance(v.get("size"), int) and isinstance(v.get("sha256"), str)
                    for v in inst.values())):
        raise Refused(EXIT_TAMPERED, f"{path}: not a {SCHEMA} manifest of this installer ('installer' does not "
                      f"record the size and sha256 of {' and '.join(SUPPORT_FILES)})")
    got = content_id(m)
    if got != m["bundle_id"]:
        raise Refused(EXIT_TAMPERED, f"REFUSED: {path}: the bundle id {m['bundle_id'][:16]} does not match the "
                      f"manifest's contents (they hash to {got[:16]}): manifest.json was changed after the bundle was "
                      "made; nothing was staged or installed")
    return m


def check_installer(m: dict, here: Path) -> None:
    """install.sh and install_bundle.py here are the ones the manifest (and so the id) records. This catches an
    installer of another bundle; it cannot stop an edited installer (that one runs instead of this check): the
    `check first:` line of `sglang-blackwell bundle` does, before anything of the bundle runs."""
    for name in SUPPORT_FILES:
        why = problem(here / name, m["installer"][name])
        if why:
            raise Refused(EXIT_TAMPERED, f"REFUSED: {here / name}: {why}: not the installer this bundle's manifest "
                          "records (check it with the `check first:` line `sglang-blackwell bundle` printed); "
                          "nothing was staged or installed")


def check_expected(m: dict, expect: str | None) -> None:
    if expect is None:
        return
    want = expect.strip().lower()
    if not re.fullmatch(r"[0-9a-f]{16,64}", want):
        raise Refused(EXIT_USAGE, f"--expect-id {expect}: expected the bundle id `sglang-blackwell bundle` printed "
                      "(16 to 64 hex digits)")
    if not m["bundle_id"].startswith(want):
        raise Refused(EXIT_TAMPERED, f"REFUSED: --expect-id {expect}: this is bundle {m['bundle_id'][:16]}, not the "
                      "one you expect; nothing was staged or installed")


def problem(path: Path, f: dict) -> str | None:
    size = path.stat().st_size
    if size != f["size"]:
        return f"size {size} != manifest {f['size']}"
    digest = sha256_file(path)
    if digest != f["sha256"]:
        return f"sha256 {digest} != manifest {f['sha256']}"
    return None


def source_dirs(here: Path, m: dict) -> list[Path]:
    """This directory plus sibling chunk directories holding the same bundle."""
    dirs = [here]
    if m.get("chunk") and m.get("chunks"):
        for name in m["chunks"]:
            d = here.parent / name
            if d != here and (d / "manifest.json").is_file():
                try:
                    other = json.loads((d / "manifest.json").read_text())
                except (OSError, ValueError):
                    continue
                if isinstance(other, dict) and other.get("bundle_id") == m["bundle_id"] \
                        and content_id(other) == m["bundle_id"]:
                    dirs.append(d)
    return dirs


def verify(m: dict, dirs: list[Path]) -> dict[str, Path]:
    """path -> a verified copy, for every listed file present in `dirs`. Any bad copy refuses everything."""
    found: dict[str, Path] = {}
    bad = []
    for f in m["files"]:
        for d in dirs:
            p = d / f["path"]
            if not p.is_file():
                continue
            why = problem(p, f)
            if why:
                bad.append(f"{p}: {why}")
            else:
                found.setdefault(f["path"], p)
    if bad:
        raise Refused(EXIT_TAMPERED, "REFUSED: these files do not match the manifest (tampered or truncated); "
                      "nothing was staged or installed:\n  " + "\n  ".join(bad))
    return found


DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def _no_link(flag: str, p: Path, why: str) -> Refused:
    return Refused(EXIT_USAGE, f"{flag}: {p} {why}; nothing was staged or installed")


def owned_problem(flag: str, dest: Path, rels: list[str]) -> None:
    """dest (DIR/<bundle id>) is ours: it and everything in it must be a real directory or regular file of this
    user, never a symbolic link; and each path we will write (rels, plus their directories) must be absent or of
    the kind we write. Checked before anything is read from dest or written."""
    try:
        st = os.lstat(dest)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise _no_link(flag, dest, f"is a symbolic link (to {os.readlink(dest)}); the staged copy is a directory "
                       "of ours and holds no link: remove it")
    if not stat.S_ISDIR(st.st_mode):
        raise _no_link(flag, dest, "is not a directory: remove it")
    if hasattr(os, "geteuid") and st.st_uid != os.geteuid():
        raise _no_link(flag, dest, f"belongs to another user (uid {st.st_uid}): remove it or stage elsewhere")
    for root, dirs, files in os.walk(dest):
        for name in dirs + files:
            p = Path(root) / name
            if os.path.islink(p):
                raise _no_link(flag, p, f"is a symbolic link (to {os.readlink(p)}); the staged copy {dest} holds "
                               f"none: remove {dest} and stage again")
    for rel in rels:
        parts = rel.split("/")
        for i in range(1, len(parts) + 1):
            p = dest.joinpath(*parts[:i])
            want_dir = i < len(parts)
            if os.path.lexists(p) and (os.path.isdir(p) != want_dir):
                raise _no_link(flag, p, f"is {'not ' if want_dir else ''}a directory (staging writes "
                               f"{'a directory' if want_dir else 'a file'} there): remove {dest} and stage again")


def target_problem(target: Path) -> None:
    """--target DIR is the user's own directory: not a symbolic link (pip would install wherever it points, a
    planted one included) and, where it exists, a directory of this user (another user's, world-writable or not,
    is theirs to swap files in while pip writes), as --stage requires of its directory. Checked before anything
    is staged or installed."""
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise _no_link("--target", target, f"is a symbolic link (to {os.readlink(target)}); pip would install "
                       "where it points: give the directory itself")
    if not stat.S_ISDIR(st.st_mode):
        raise _no_link("--target", target, "is not a directory")
    if hasattr(os, "geteuid") and st.st_uid != os.geteuid():
        anyone = " and anyone may write in it" if st.st_mode & stat.S_IWOTH else ""
        raise _no_link("--target", target, f"belongs to another user (uid {st.st_uid}){anyone}: install into a "
                       "directory of your own")


def open_dirs(base_fd: int, parts: list[str]) -> int:
    """A descriptor of base/parts..., each made if absent and opened without following a symbolic link (ELOOP or
    ENOTDIR then, never a write outside)."""
    fd = os.dup(base_fd)
    try:
        for part in parts:
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o777, dir_fd=fd)
            nfd = os.open(part, DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_new(dir_fd: int, name: str, src: Path | bytes, want: dict | None = None, mode: int = 0o644) -> None:
    """Write `name` in dir_fd through a new file of a random name (O_EXCL | O_NOFOLLOW: never through a planted
    link) renamed into place; from a file (its sha256 and size checked against `want` as written) or bytes."""
    tmp = f".{name}.{secrets.token_hex(8)}.tmp"
    out = os.open(tmp, NEW_FILE_FLAGS, mode, dir_fd=dir_fd)
    try:
        h = hashlib.sha256()
        n = 0
        with os.fdopen(out, "wb") as f:
            if isinstance(src, bytes):
                f.write(src)
                h.update(src)
                n = len(src)
            else:
                with open(src, "rb") as r:
                    for chunk in iter(lambda: r.read(1 << 20), b""):
                        f.write(chunk)
                        h.update(chunk)
                        n += len(chunk)
            f.flush()
            os.fsync(f.fileno())
        if want is not None and (n != want["size"] or h.hexdigest() != want["sha256"]):
            raise Refused(EXIT_TAMPERED, f"REFUSED: the copy of {src} came out as size {n}, sha256 {h.hexdigest()} "
                          f"!= manifest {want['size']}, {want['sha256']} (it changed while being copied)")
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=dir_fd)


def stage(m: dict, here: Path, found: dict[str, Path], root: Path) -> Path:
    dest = root / m["bundle_id"][:16]
    owned_problem("--stage", dest, [*found, *SUPPORT_FILES, "manifest.json"])  # again: nothing changed it since
    root.mkdir(parents=True, exist_ok=True)
    by_path = {f["path"]: f for f in m["files"]}
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        dest_fd = open_dirs(root_fd, [dest.name])
    finally:
        os.close(root_fd)
    try:
        for rel, src in sorted(found.items()):
            if os.path.realpath(src) == os.path.realpath(dest / rel):
                continue
            *dirs, name = rel.split("/")
            d = open_dirs(dest_fd, dirs)
            try:
                write_new(d, name, src, by_path[rel])
            finally:
                os.close(d)
        for name in SUPPORT_FILES:  # checked against the manifest (check_installer): the same bytes
            if os.path.realpath(here / name) != os.path.realpath(dest / name):
                write_new(dest_fd, name, here / name, m["installer"][name], mode=0o755 if name.endswith(".sh")
                          else 0o644)
        staged = dict(m, chunk="")
        write_new(dest_fd, "manifest.json", (json.dumps(staged, indent=1, sort_keys=True) + "\n").encode())
    finally:
        os.close(dest_fd)
    return dest


def target_facts(python: str, target: Path | None) -> dict:
    code = ("import sys, json, importlib.util; "
            "s = importlib.util.find_spec('flashinfer'); "
            "j = importlib.util.find_spec('flashinfer_jit_cache'); "
            "print(json.dumps({'python': '%d.%d' % sys.version_info[:2], "
            "'flashinfer': list(s.submodule_search_locations)[0] if s else None, 'jit_cache_pkg': bool(j)}))")
    env = dict(os.environ)
    if target is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(target), *filter(None, [env.get("PYTHONPATH")])])
    try:
        r = run_isolated([python, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise Refused(EXIT_USAGE, f"--python {python}: cannot run it ({why})") from None
    if r.returncode != 0:
        tail = " | ".join(r.stderr.strip().splitlines()[-3:])
        raise Refused(EXIT_USAGE, f"--python {python}: cannot run it (exit {r.returncode}: {tail[-300:]})")
    try:
        facts = json.loads(r.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        facts = None
    if not isinstance(facts, dict) or not isinstance(facts.get("python"), str):
        raise Refused(EXIT_USAGE, f"--python {python}: not a Python interpreter (it gave no answer to a Python "
                      "one-liner)")
    return facts


def gpu_capabilities() -> set[str] | None:
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    caps = {ln.strip() for ln in r.stdout.splitlines() if ln.strip()}
    return caps if r.returncode == 0 and caps else None


def install_jit(m: dict, found: dict[str, Path], python: str, target: Path | None, force: bool) -> list[str]:
    jit = [f for f in m["files"] if f["kind"] == "jit"]
    if not jit:
        return []
    archs = sorted({a for f in jit for a in f["archs"]})
    numbers = {a.rstrip("af") for a in archs}
    caps = gpu_capabilities()
    if caps is None:
        say(f"FlashInfer AOT: no nvidia-smi answer, GPU capability unchecked (modules built for {' '.join(archs)})")
    elif not caps <= numbers and not force:
        say(f"FlashInfer AOT: skipped: GPU capability {' '.join(sorted(caps))} is not among the archs the modules "
            f"were built for ({' '.join(archs)}); FlashInfer will compile them on first use (--force-jit installs)")
        return []
    facts = target_facts(python, target)
    if not facts["flashinfer"]:
        raise Refused(EXIT_PIP, "FlashInfer AOT: flashinfer is not importable after the install")
    if facts["jit_cache_pkg"]:
        say("FlashInfer AOT: note: flashinfer-jit-cache is installed; FlashInfer reads AOT modules from that "
            "package instead of flashinfer/data/aot")
    aot = Path(facts["flashinfer"]) / "data" / "aot"
    done = []
    fi_fd = os.open(facts["flashinfer"], os.O_RDONLY | os.O_DIRECTORY)
    try:
        for f in jit:
            try:
                d = open_dirs(fi_fd, ["data", "aot", f["module"]])
            except OSError as e:
                raise Refused(EXIT_USAGE, f"FlashInfer AOT: {aot / f['module']}: {e.strerror} (a symbolic link or a "
                              "file where a directory goes); nothing written there") from None
            try:
                write_new(d, f"{f['module']}.so", found[f["path"]], f)
            finally:
                os.close(d)
            done.append(f["module"])
    finally:
        os.close(fi_fd)
    say(f"FlashInfer AOT ({' '.join(archs)}): {', '.join(done)} -> {aot}")
    return done


def install(m: dict, found: dict[str, Path], a: argparse.Namespace) -> None:
    python = a.python or sys.executable
    target = Path(a.target).resolve() if a.target else None
    facts = target_facts(python, None)
    if facts["python"] != m["python"]:
        raise Refused(EXIT_USAGE, f"this bundle is for Python {m['python']} ({m['python_tag']}); {python} is "
                      f"Python {facts['python']} (use --python PY)")
    marker = target / MARKER if target else None
    if marker and marker.exists() and not a.force:
        gone = still_installed(marker, target, m)  # type: ignore[arg-type]
        if gone is None:
            say(f"bundle {m['bundle_id'][:16]} is already installed in {target} (--force reinstalls); "
                f"use it with: export PYTHONPATH={target}")
            return
        if gone:
            say(f"{marker} records bundle {m['bundle_id'][:16]}, but {gone}: installing it again")
    wheels = [f for f in m["files"] if f["path"].endswith(".whl")]
    if target is not None:
        planted_links(target, [found[f["path"]] for f in wheels])
    cmd = [python, "-m", "pip", "install", "--isolated", "--no-index", "--no-deps", "--no-compile",
           "--disable-pip-version-check", "--no-cache-dir", "-q"]
    cmd += ["--target", str(target), "--upgrade"] if target else ["--force-reinstall"]
    cmd += list(a.pip_arg or []) + [str(found[f["path"]]) for f in wheels]
    if a.dry_run:
        say(" ".join(cmd))
        return
    t = time.time()
    r = run_isolated(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise Refused(EXIT_PIP, f"pip install failed (exit {r.returncode}):\n"
                      + "\n".join((r.stderr or r.stdout).strip().splitlines()[-15:]))
    where = target or f"the environment of {python}"
    say(f"pip install --no-index --no-deps of {len(wheels)} wheels into {where}: {time.time() - t:.1f} s")
    for kind in ("patched", "kernel", "dependency"):
        ws = [f for f in wheels if f["kind"] == kind]
        if ws:
            names = ", ".join(f"{f['distribution']} {f['version']}" for f in ws)
            extra = f" (stripped: {', '.join(ws[0]['stripped'])})" if kind == "kernel" and ws[0].get("stripped") else ""
            say(f"  {kind}: {names}{extra}" if kind != "dependency" else f"  dependencies ({len(ws)}): {names}")
    if not a.no_jit:
        install_jit(m, found, python, target, a.force_jit)
    if marker:
        rec = {"bundle_id": m["bundle_id"], "base": m["base"], "files": [f["path"] for f in m["files"]],
               "dist_info": installed_dist_info(target, wheels)}  # type: ignore[arg-type]
        fd = os.open(target, os.O_RDONLY | os.O_DIRECTORY)  # type: ignore[arg-type]
        try:
            write_new(fd, MARKER, (json.dumps(rec, indent=1) + "\n").encode())
        finally:
            os.close(fd)
        say(f"use it with: export PYTHONPATH={target}")


def top_level_names(wheel: Path) -> set[str]:
    """What a wheel puts at the top of a --target directory (its first path components; .data/purelib|platlib
    contents count as top level too)."""
    names = set()
    with zipfile.ZipFile(wheel) as z:
        for n in z.namelist():
            parts = n.split("/")
            if parts[0].endswith(".data") and len(parts) > 2 and parts[1] in ("purelib", "platlib"):
                names.add(parts[2])
            elif parts[0].endswith(".data") and len(parts) > 1 and parts[1] == "scripts":
                names.add("bin")
            else:
                names.add(parts[0])
    return {n for n in names if n}


def planted_links(target: Path, wheels: list[Path]) -> None:
    """A symbolic link in --target where a wheel installs a top-level name: pip --target leaves a link in place
    (with a warning), so the bundle's package would not be installed and the link's target imported instead."""
    for w in wheels:
        try:
            names = top_level_names(w)
        except (OSError, zipfile.BadZipFile) as e:
            raise Refused(EXIT_TAMPERED, f"REFUSED: {w}: not a readable wheel ({e}); nothing was installed") from None
        for n in sorted(names):
            p = target / n
            if os.path.islink(p):
                raise Refused(EXIT_USAGE, f"--target {target}: {p} is a symbolic link (to {os.readlink(p)}) where "
                              f"{w.name} installs {n}: pip would leave it in place; remove it; nothing was "
                              "installed")


def _dist_info_name(wheel_path: str) -> str:
    name, version = Path(wheel_path).name.split("-")[:2]
    return f"{name}-{version}.dist-info"


def installed_dist_info(target: Path, wheels: list[dict]) -> list[str]:
    return [d for d in (_dist_info_name(f["path"]) for f in wheels) if (target / d / "RECORD").is_file()]


def still_installed(marker: Path, target: Path, m: dict) -> str | None:
    """None when the marker records this bundle and every file it installed is still in `target`; else what is
    gone ("" when the marker is of another bundle or unreadable)."""
    try:
        rec = json.loads(marker.read_text())
    except (OSError, ValueError):
        return ""
    if not isinstance(rec, dict) or rec.get("bundle_id") != m["bundle_id"]:
        return ""
    wheels = [f for f in m["files"] if f["path"].endswith(".whl")]
    recorded = rec.get("dist_info")
    if not isinstance(recorded, list) or len(recorded) != len(wheels):
        return "the marker does not say what it installed (an older install.sh wrote it)"
    for d in recorded:
        record = target / str(d) / "RECORD"
        try:
            rows = list(csv.reader(record.read_text().splitlines()))
        except (OSError, UnicodeDecodeError, csv.Error):
            return f"{record} is gone"
        for row in rows:
            if row and not (target / row[0]).exists():
                return f"{target / row[0]} is gone"
    return None


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # type: ignore[override]
        print(f"install.sh: error: {message} (see install.sh --help)", file=sys.stderr)
        sys.exit(EXIT_USAGE)


def main(argv: list[str] | None = None) -> int:
    ap = _Parser(prog="install.sh", description="Verify and install this sglang-blackwell bundle.")
    ap.add_argument("--target", help="pip install --target DIR (then PYTHONPATH=DIR); default: PY's environment")
    ap.add_argument("--stage", help="copy verified chunks into DIR/<bundle id>/ (chunks arriving at different times)")
    ap.add_argument("--stage-only", action="store_true", help="with --stage: stop after staging")
    ap.add_argument("--verify-only", action="store_true", help="verify what is present, install nothing")
    ap.add_argument("--python", help="interpreter to install for (default: the one running this script)")
    ap.add_argument("--no-jit", action="store_true", help="do not install the prebuilt FlashInfer modules")
    ap.add_argument("--force-jit", action="store_true", help="install them even if the GPU's arch is not theirs")
    ap.add_argument("--force", action="store_true", help="reinstall even if --target already has this bundle")
    ap.add_argument("--dry-run", action="store_true", help="verify, then print the pip command instead of running it")
    ap.add_argument("--pip-arg", action="append", help="extra argument for pip install (repeatable; pip runs in an "
                    "empty directory: give paths absolute)")
    ap.add_argument("--expect-id", metavar="ID", help="refuse unless this is the bundle with that id (what "
                    "`sglang-blackwell bundle` printed: 16 to 64 hex digits)")
    a = ap.parse_args(argv)
    if a.python and os.sep in a.python:  # the interpreters run in an empty private directory (run_isolated)
        a.python = os.path.abspath(a.python)
    t0 = time.time()
    here = Path(__file__).resolve().parent
    try:
        if a.stage_only and not a.stage:
            raise Refused(EXIT_USAGE, "--stage-only needs --stage DIR")
        for flag, d in (("--target", a.target), ("--stage", a.stage)):
            if d is not None and not d.strip():
                raise Refused(EXIT_USAGE, f"{flag}: an empty path names no directory")
            blocker = next((p for p in [Path(d), *Path(d).parents] if p.exists() and not p.is_dir()), None) \
                if d else None
            if blocker is not None:
                raise Refused(EXIT_USAGE, f"{flag} {d}: {blocker} is a file, not a directory; nothing was staged or "
                              "installed")
        if a.target:
            target_problem(Path(a.target).absolute())
        m = load_manifest(here / "manifest.json")
        check_installer(m, here)
        check_expected(m, a.expect_id)
        dirs = source_dirs(here, m)
        staged = Path(a.stage).absolute() / m["bundle_id"][:16] if a.stage else None
        if staged is not None:
            owned_problem("--stage", staged, [f["path"] for f in m["files"]] + [*SUPPORT_FILES, "manifest.json"])
            if staged.is_dir():
                dirs.append(staged)
        found = verify(m, dirs)
        total = sum(f["size"] for f in m["files"] if f["path"] in found)
        say(f"bundle {m['bundle_id'][:16]} (base {m['base']}, {m['python_tag']}): {len(found)} of {len(m['files'])} "
            f"files present and verified ({total / 2**20:.1f} MiB, sha256) in {time.time() - t0:.1f} s")
        if a.stage:
            dest = stage(m, here, found, Path(a.stage).absolute())
            say(f"staged in {dest}")
        missing = [f for f in m["files"] if f["path"] not in found]
        chunks = sorted({f["chunk"] for f in missing if f["chunk"]})
        if a.stage_only or a.verify_only:
            if missing:
                say(f"still missing: {len(missing)} files" + (f" of chunk(s) {', '.join(chunks)}" if chunks else ""))
            return EXIT_MISSING if a.verify_only and missing else 0
        if missing:
            names = ", ".join(f["path"] for f in missing[:5]) + (" ..." if len(missing) > 5 else "")
            hint = (f"chunk(s) {', '.join(chunks)} not here (carry them and stage each with "
                    f"`install.sh --stage DIR --stage-only`, or put them next to this one)") if chunks else ""
            raise Refused(EXIT_MISSING, f"REFUSED: {len(missing)} files missing ({names}); {hint}; "
                          "nothing was installed")
        install(m, found, a)
        say(f"done in {time.time() - t0:.1f} s")
        return 0
    except Refused as e:
        print(f"install.sh: {e}", file=sys.stderr, flush=True)
        return e.code
    except OSError as e:  # a filesystem state no check above foresaw: named, in one line
        what = f"{e.filename}: {e.strerror or e}" if e.filename else str(e)
        print(f"install.sh: error: {what} (unexpected {type(e).__name__}; nothing more was done)", file=sys.stderr,
              flush=True)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
