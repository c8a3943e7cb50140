"""`sglang-blackwell index DIR`: a PEP 503 simple index of built wheels (pip --extra-index-url file://DIR/simple).

With `url_template` the wheels are not copied: each link is the template filled with {file} (the wheel's name)
and {dir} (the name of the directory it was found in), e.g. a GitHub release asset
https://github.com/OWNER/REPO/releases/download/{dir}/{file} for wheels downloaded into <tag>/ directories.
That is how the release workflow publishes <pages>/whl/cu130/ (`simple_at_root`: DIR itself is the index root).
Without it, `index` publishes under DIR/files/ only regular files that are wheels of a build manifest in their
directory (manifest-<base>.json), with the size and sha256 it records; build_index says what else is checked."""

from __future__ import annotations

import contextlib
import hashlib
import html
import json
import os
import secrets
import stat
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from .. import procs
from ..errors import IntegrityError, UserError
from ..paths import os_reason, write_atomic

BUILD_MANIFEST_SCHEMA = "sglang-blackwell/build-manifest/1"  # build.MANIFEST_SCHEMA (build imports the world)
TMP_MARK = ".sglang-blackwell-tmp-"  # files/.<wheel>.sglang-blackwell-tmp-<pid>-<random>: a copy not yet renamed
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
NEW_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


@dataclass
class _Wheel:
    path: Path
    size: int
    sha256: str


def build_index(wheels: list[Path], dest: Path, *, url_template: str | None = None,
                simple_at_root: bool = False, keep_first: bool = False, warn=None, built_only: bool = False,
                before_write: Callable[[list[str]], None] | None = None) -> Path:
    """Copy wheels to dest/files/ and write dest/simple/<project>/index.html. Returns dest/simple.
    url_template: link to {file}/{dir} URLs instead of copying; simple_at_root: dest itself is the index root.
    Two different files with one name are an error, unless keep_first (the first one listed is published; a
    release index lists the oldest release first, so a published file never changes under its name).

    Only regular files that are wheels are published (a symbolic link named *.whl, or a file that is no zip with a
    .dist-info/WHEEL, is refused). A wheel whose directory holds build manifests (manifest-<base>.json) must be one
    of theirs, with the size and sha256 they record (a wheel modified after the build is refused, as `install`
    refuses it); built_only (`sglang-blackwell index` without --url-template) makes that manifest mandatory.
    Everything is checked before anything is written; each wheel is copied to a new file of a random name in
    files/ and renamed into place only when whole, so an interrupted run (Ctrl-C, SIGKILL, a full disk) leaves no
    truncated wheel under its name (a dead run's copies are swept by the next). `before_write(names)`: the
    caller's own checks of what it will write next to the index (the names of the wheels files/ will hold), run
    after these checks and before anything is written."""
    if not wheels:
        raise UserError("no wheels to index (run `sglang-blackwell build` first)")
    if url_template is not None:
        check_template(url_template)
    for w in wheels:
        try:
            parse_wheel_filename(w.name)
        except InvalidWheelFilename as e:
            raise UserError(f"{w}: not a wheel file name ({e}); nothing was indexed") from None
    files = dest / "files"
    simple = dest if simple_at_root else dest / "simple"
    for d in (dest, files, simple):
        if d != dest and os.path.islink(d):  # DIR is the user's to point anywhere; what is under it is ours
            raise UserError(f"{d}: is a symbolic link (to {os.readlink(d)}); the index writes only into directories "
                            "of its own; nothing was indexed")
        if d.exists() and not d.is_dir():
            raise UserError(f"{d}: exists and is not a directory; nothing was indexed")
    blocker = next((p for p in dest.parents if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        raise UserError(f"{dest}: {blocker} is a file, not a directory; nothing was indexed")
    manifests: dict[Path, dict[str, tuple[int, str, Path]]] = {}
    checked = [_check_wheel(w, manifests, built_only) for w in wheels]
    seen: dict[str, _Wheel] = {}
    for w in checked:
        first = seen.get(w.path.name)
        if first is not None:
            if first.sha256 != w.sha256:
                msg = (f"two different wheels named {w.path.name}: {first.path} and {w.path} (same version, other "
                       "bytes: the local version label was not bumped, or the build is not reproducible)")
                if not keep_first:
                    raise UserError(msg)
                if warn:
                    warn(msg + f"; publishing {first.path}")
            continue
        seen[w.path.name] = w
    projects: dict[str, list[tuple[str, str, str]]] = {}
    for w in seen.values():
        name, _, _, _ = parse_wheel_filename(w.path.name)
        if url_template is None:
            href = ("../files/" if simple_at_root else "../../files/") + w.path.name
        else:
            href = url_template.format(file=w.path.name, dir=w.path.parent.name)
        projects.setdefault(canonicalize_name(name), []).append((w.path.name, href, w.sha256))
    for proj in projects:
        if os.path.islink(simple / proj) or ((simple / proj).exists() and not (simple / proj).is_dir()):
            raise UserError(f"{simple / proj}: is not a directory of the index (a symbolic link or a file); nothing "
                            "was indexed")
    if before_write is not None:
        before_write(sorted(seen))
    if url_template is None:
        _publish_files(list(seen.values()), dest, files)
    for proj, entries in projects.items():
        d = simple / proj
        d.mkdir(parents=True, exist_ok=True)
        links = "\n".join(f'    <a href="{html.escape(href)}#sha256={h}">{html.escape(f)}</a><br/>'
                          for f, href, h in sorted(entries))
        _write(d / "index.html", f"<!DOCTYPE html>\n<html>\n  <body>\n{links}\n  </body>\n</html>\n")
    root_links = "\n".join(f'    <a href="{p}/">{p}</a><br/>' for p in sorted(_all_projects(simple)))
    _write(simple / "index.html", f"<!DOCTYPE html>\n<html>\n  <body>\n{root_links}\n  </body>\n</html>\n")
    return simple


def manifest_entries(d: Path, cache: dict[Path, dict[str, tuple[int, str, Path]]]) -> dict[str, tuple[int, str, Path]]:
    """filename -> (size, sha256, manifest) of every wheel the build manifests in d record."""
    if d in cache:
        return cache[d]
    out: dict[str, tuple[int, str, Path]] = {}
    for mp in sorted(d.glob("manifest-*.json")):
        try:
            m = json.loads(mp.read_text())
        except (OSError, ValueError, UnicodeDecodeError) as e:
            raise UserError(f"{mp}: not a readable build manifest ({e}); nothing was indexed") from None
        if not isinstance(m, dict) or m.get("schema") != BUILD_MANIFEST_SCHEMA:
            continue
        try:
            for pkg in m["packages"]:
                for w in pkg["wheels"]:
                    o = w["output"]
                    if not (isinstance(o["filename"], str) and isinstance(o["size"], int)
                            and isinstance(o["sha256"], str)):
                        raise TypeError
                    out[o["filename"]] = (o["size"], o["sha256"], mp)
        except (KeyError, TypeError):
            raise UserError(f"{mp}: not a build manifest of sglang-blackwell (packages[].wheels[].output lacks "
                            "filename/size/sha256); nothing was indexed") from None
    cache[d] = out
    return out


def _check_wheel(w: Path, manifests: dict, built_only: bool) -> _Wheel:
    """A regular file (opened without following a link), a zip with a .dist-info/WHEEL, and, where its directory
    has build manifests (always with built_only), the wheel they record: its size and sha256."""
    try:
        fd = os.open(w, READ_FLAGS)
    except OSError as e:
        if os.path.islink(w):
            raise UserError(f"{w}: is a symbolic link (to {os.readlink(w)}), not a wheel file; the index publishes "
                            "only regular files; nothing was indexed") from None
        raise UserError(f"{w}: cannot read it ({os_reason(e)}); nothing was indexed") from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise UserError(f"{w}: is not a regular file; nothing was indexed")
        h = hashlib.sha256()
        size = 0
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
            size += len(chunk)
        f.seek(0)
        why = _not_a_wheel(f)
    if why:
        raise UserError(f"{w}: not a wheel ({why}); nothing was indexed")
    got = _Wheel(w, size, h.hexdigest())
    known = manifest_entries(w.parent, manifests)
    if not known and not built_only:
        return got
    if w.name not in known:
        where = (f"the build manifest(s) {', '.join(sorted({str(v[2].name) for v in known.values()}))} in {w.parent} "
                 f"list no {w.name}" if known else f"no build manifest (manifest-<base>.json) in {w.parent}")
        raise UserError(f"{w}: not a wheel of the build ({where}); `index` publishes only what `sglang-blackwell "
                        "build` made; nothing was indexed")
    want_size, want_sha, mp = known[w.name]
    if (size, got.sha256) != (want_size, want_sha):
        raise IntegrityError(f"{w}: size {size}, sha256 {got.sha256} != size {want_size}, sha256 {want_sha} recorded "
                             f"in {mp}: modified after the build (`install` refuses it too); rebuild it; nothing was "
                             "indexed")
    return got


def _not_a_wheel(f) -> str | None:
    try:
        with zipfile.ZipFile(f) as z:
            names = z.namelist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as e:
        return f"not a zip archive: {e}"
    if not any(n.count("/") == 1 and n.split("/")[0].endswith(".dist-info") and n.endswith("/WHEEL") for n in names):
        return "no .dist-info/WHEEL in it"
    return None


def _publish_files(wheels: list[_Wheel], dest: Path, files: Path) -> None:
    """Every wheel into files/ under its name, all or none: each copied to a new file of a random name (O_EXCL,
    O_NOFOLLOW), its sha256 checked again as written, then all renamed; on a failure the copies are removed and so
    are the directories this run made."""
    made = [d for d in (dest, files) if not d.exists()]
    try:
        files.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"{files}: cannot create it ({os_reason(e)}); nothing was indexed") from None
    _sweep(files)
    dfd = os.open(files, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    temps: list[tuple[str, str]] = []
    try:
        try:
            for w in wheels:
                target = files / w.path.name
                if _same_file(w.path, target):
                    continue
                tmp = f".{w.path.name}{TMP_MARK}{os.getpid()}-{secrets.token_hex(4)}"
                temps.append((tmp, w.path.name))
                _copy(w, dfd, tmp, target)
            for tmp, name in temps:
                os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            temps = []
        except OSError as e:
            raise UserError(f"{files}: cannot write a wheel there ({os_reason(e)}); nothing was indexed") from None
        finally:
            for tmp, _ in temps:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=dfd)
    except UserError:
        for d in reversed(made):
            with contextlib.suppress(OSError):
                d.rmdir()
        raise
    finally:
        os.close(dfd)


def _copy(w: _Wheel, dfd: int, tmp: str, target: Path) -> None:
    out = os.open(tmp, NEW_FLAGS, 0o644, dir_fd=dfd)
    h = hashlib.sha256()
    size = 0
    with os.fdopen(out, "wb", buffering=0) as o, os.fdopen(os.open(w.path, READ_FLAGS), "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            view = memoryview(chunk)
            while view:
                n = o.write(view)
                view = view[n:]
            h.update(chunk)
            size += len(chunk)
        os.fsync(o.fileno())
    if (size, h.hexdigest()) != (w.size, w.sha256):
        raise IntegrityError(f"{w.path}: changed while it was copied to {target} (size {size}, sha256 "
                             f"{h.hexdigest()}; checked as {w.size}, {w.sha256}); nothing was indexed")


def _same_file(a: Path, b: Path) -> bool:
    try:
        sa, sb = os.stat(a, follow_symlinks=False), os.stat(b, follow_symlinks=False)
    except OSError:
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def _sweep(files: Path) -> None:
    """Remove the copies a dead run (killed mid-copy) left in files/."""
    for p in files.glob(f".*{TMP_MARK}*"):
        try:
            pid = int(p.name.rsplit(TMP_MARK, 1)[1].split("-")[0])
        except (IndexError, ValueError):
            continue
        if pid != os.getpid() and not procs.alive(pid) and p.is_file() and not p.is_symlink():
            with contextlib.suppress(OSError):
                p.unlink()


TEMPLATE_FIELDS = ("file", "dir")


def check_template(url_template: str) -> None:
    """--url-template: {file} and {dir} are its only placeholders, {file} is one of them."""
    import string

    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(url_template) if f is not None]
    except ValueError as e:
        raise UserError(f"--url-template {url_template!r}: {e} (write {{{{ and }}}} for literal braces)") from None
    bad = [f for f in fields if f not in TEMPLATE_FIELDS]
    if bad:
        raise UserError(f"--url-template {url_template!r}: unknown placeholder(s) "
                        f"{', '.join('{' + f + '}' for f in bad)} (known: {{file}}, {{dir}})")
    if "file" not in fields:
        raise UserError(f"--url-template {url_template!r} must contain {{file}}")


def _all_projects(simple: Path) -> list[str]:
    return [d.name for d in simple.iterdir() if d.is_dir() and (d / "index.html").exists()]


def _write(path: Path, text: str) -> None:
    write_atomic(path, text)
