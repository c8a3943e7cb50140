#!/usr/bin/env python3
"""Verify and install an sglang-blackwell bundle (written by `sglang-blackwell bundle`; this file travels in the
bundle as install_bundle.py next to install.sh and manifest.json, and needs only the Python standard library).

    bash install.sh [--target DIR] [--stage DIR [--stage-only]] [--verify-only] [--python PY] [--no-jit] [--force]
                    [--expect-id ID]

0. The bundle id is recomputed from the manifest (content_id: the sha256 of everything in it but the id and the
   chunk name): a manifest edited after the bundle was made (a wheel swapped and its sha256 and size fixed) no
   longer matches its id and is refused (exit 4). --expect-id ID (the id `sglang-blackwell bundle` printed, 16 to
   64 hex digits) also refuses any other bundle: the one check an attacker who rewrites the id too cannot pass.
1. Verify: every file the manifest lists that is present (this directory, sibling chunk directories c1, c2, ... of
   the same bundle, and the staged copy) must have the manifest's size and sha256. One bad file refuses the
   whole bundle (exit 4) before anything is staged or installed.
2. Stage (--stage DIR): copy the verified files into DIR/<bundle id>/ so that chunks carried at different times
   come together there (call 1: `c1/install.sh --stage DIR --stage-only`; call 2: `c2/install.sh --stage DIR`).
3. Install, once every file is present (else exit 3 naming the missing chunks):
   `PY -m pip install --no-index --no-deps --no-compile` of every wheel, into --target DIR (then use
   PYTHONPATH=DIR) or into PY's environment; then the prebuilt FlashInfer modules into flashinfer's AOT slots
   (flashinfer/data/aot/<name>/<name>.so), unless the GPU's capability is not among the archs they were built for.
   With --target, a marker records the bundle and the .dist-info directories it installed; a later run with the
   same bundle skips the install only while every file those directories' RECORDs list is still there.
Exit codes: 0 done, 2 bad usage or wrong Python, 3 files missing, 4 verification failed, 5 pip failed.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SCHEMA = "sglang-blackwell/bundle/1"
SUPPORT_FILES = ("install.sh", "install_bundle.py")
MARKER = ".sglang-blackwell-bundle.json"
EXIT_USAGE, EXIT_MISSING, EXIT_TAMPERED, EXIT_PIP = 2, 3, 4, 5


class Refused(Exception):
    def __init__(self, code: int, msg: str):
        super().__init__(msg)
        self.code = code


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
    got = content_id(m)
    if got != m["bundle_id"]:
        raise Refused(EXIT_TAMPERED, f"REFUSED: {path}: the bundle id {m['bundle_id'][:16]} does not match the "
                      f"manifest's contents (they hash to {got[:16]}): manifest.json was changed after the bundle was "
                      "made; nothing was staged or installed")
    return m


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


def stage(m: dict, here: Path, found: dict[str, Path], root: Path) -> Path:
    dest = root / m["bundle_id"][:16]
    dest.mkdir(parents=True, exist_ok=True)
    by_path = {f["path"]: f for f in m["files"]}
    for rel, src in sorted(found.items()):
        target = dest / rel
        if target.resolve() == src.resolve():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix="." + target.name + ".", dir=target.parent)
        os.close(fd)
        try:
            shutil.copyfile(src, tmp)
            why = problem(Path(tmp), by_path[rel])
            if why:
                raise Refused(EXIT_TAMPERED, f"REFUSED: staged copy of {rel} in {dest}: {why}")
            os.replace(tmp, target)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    staged = dict(m, chunk="")
    for name in SUPPORT_FILES:
        if (here / name).resolve() != (dest / name).resolve():
            shutil.copyfile(here / name, dest / name)
    tmp = dest / ".manifest.json.tmp"
    tmp.write_text(json.dumps(staged, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, dest / "manifest.json")
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
        r = subprocess.run([python, "-c", code], capture_output=True, text=True, env=env, timeout=300)
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
    for f in jit:
        dest = aot / f["module"] / f"{f['module']}.so"
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.tmp")
        shutil.copyfile(found[f["path"]], tmp)
        os.replace(tmp, dest)
        done.append(f["module"])
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
    cmd = [python, "-m", "pip", "install", "--isolated", "--no-index", "--no-deps", "--no-compile",
           "--disable-pip-version-check", "--no-cache-dir", "-q"]
    cmd += ["--target", str(target), "--upgrade"] if target else ["--force-reinstall"]
    cmd += list(a.pip_arg or []) + [str(found[f["path"]]) for f in wheels]
    if a.dry_run:
        say(" ".join(cmd))
        return
    t = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
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
        tmp = marker.with_name(MARKER + ".tmp")
        tmp.write_text(json.dumps({"bundle_id": m["bundle_id"], "base": m["base"],
                                   "files": [f["path"] for f in m["files"]],
                                   "dist_info": installed_dist_info(target, wheels)}, indent=1) + "\n")  # type: ignore[arg-type]
        os.replace(tmp, marker)
        say(f"use it with: export PYTHONPATH={target}")


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
    ap.add_argument("--pip-arg", action="append", help="extra argument for pip install (repeatable)")
    ap.add_argument("--expect-id", metavar="ID", help="refuse unless this is the bundle with that id (what "
                    "`sglang-blackwell bundle` printed: 16 to 64 hex digits)")
    a = ap.parse_args(argv)
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
        m = load_manifest(here / "manifest.json")
        check_expected(m, a.expect_id)
        dirs = source_dirs(here, m)
        staged = Path(a.stage) / m["bundle_id"][:16] if a.stage else None
        if staged is not None and staged.is_dir():
            dirs.append(staged)
        found = verify(m, dirs)
        total = sum(f["size"] for f in m["files"] if f["path"] in found)
        say(f"bundle {m['bundle_id'][:16]} (base {m['base']}, {m['python_tag']}): {len(found)} of {len(m['files'])} "
            f"files present and verified ({total / 2**20:.1f} MiB, sha256) in {time.time() - t0:.1f} s")
        if a.stage:
            dest = stage(m, here, found, Path(a.stage))
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
