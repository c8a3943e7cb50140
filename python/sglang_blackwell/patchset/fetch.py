"""Download, verify and cache pinned upstream artifacts, through pip.

pip does the downloading, so everything the user set up for pip applies: the index or mirror (pip.conf,
PIP_INDEX_URL, extra-index-url, find-links), the proxy, certificates, netrc / keyring credentials, and pip shows
progress, retries and resumes. The interpreter running sglang-blackwell runs it (`sys.executable -m pip`).

How a pin becomes a pip request. A pin (base.toml) is a file name, its sha256 and size, and the URL it was found
at. We ask pip for it twice at most:

  1. by name, from the configured index: `pip download --no-deps --require-hashes -r REQ --dest TMP` where REQ is
     `name==version --hash=sha256:<pin>` and the name, version and compatibility tags come from the pinned file
     name (`--only-binary=:all: --platform P --implementation I --python-version V --abi A`, so a cp312 wheel is
     found from any interpreter; `--ignore-requires-python` likewise). pip's hash-checking mode keeps only the
     index's candidates whose sha256 is the pin, so pip picks exactly the pinned file among that version's files,
     whoever serves it, and checks it.
  2. by URL, only when 1 failed and the pin has a URL: `name @ <url> --hash=sha256:<pin>`, for files no index
     serves (a GitHub release asset) or an index that lacks the file.

Why the name first rather than the pinned URL: `pip download <url>` consults no index, so a user whose pip can
reach only its mirror could not `make`. With no mirror configured, pip's index is PyPI, whose page for the
version links the same file on the same host as the pinned URL: asking by name costs one index page.

Then our own check, as before pip did the downloading: size + sha256 against the pin, before anything enters the
cache. pip downloads into a private directory under <cache>/.partial/ (named with our pid; a killed download's
directory is swept by the next fetch once its pid is gone: only such directories, in a .partial that is a directory
of this user, never through a symbolic link; a .partial that is a link is refused for downloads); only a verified
file is renamed into <cache>/artifacts/ (atomically), so nothing half-written is ever a cache entry. With a warm
cache neither pip nor the network is touched; SGLANG_BLACKWELL_OFFLINE=1 turns a cold cache into an error instead
of a download.

What entered the cache is recorded: <cache>/verified/<file>.json holds the size and sha256 the file was verified
against, and when. A cached file is re-verified on every use, and a cache entry is never deleted because a pin
disagrees with it. The record says which side moved:
  the file is as recorded, the pin is not   the pin changed (a wrong pin, or a re-pin): refused, nothing
                                            downloaded; the message says how to take the new pin
  the file is not as recorded               the cache entry is damaged: fetched again and replaced only by a file
                                            that matches the pin (offline: refused, the entry kept)
  no record (a cache older than records)    either: fetched again online, kept unless the download matches the pin
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from .. import envswitch, procs
from ..errors import IntegrityError, UserError
from ..httpclient import Limits
from ..paths import cache_dir, os_reason, write_atomic
from .bases import SHA256_RE, Artifact, file_name_problem, url_problem

OFFLINE_ENV = "SGLANG_BLACKWELL_OFFLINE"  # on: never download (envswitch)

CHUNK = 1 << 20
Progress = Callable[[str], None]


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _verify(path: Path, art: Artifact) -> str | None:
    """None if `path` matches the pin, else why not."""
    size = path.stat().st_size
    if art.size is not None and size != art.size:
        return f"size {size} != pinned {art.size}"
    digest = sha256_file(path)
    if digest != art.sha256:
        return f"sha256 {digest} != pinned {art.sha256}"
    return None


def cached_path(art: Artifact, cache: Path | None = None) -> Path:
    return (cache or cache_dir()) / "artifacts" / art.filename


def record_path(art: Artifact, cache: Path | None = None) -> Path:
    """What was verified when `art`'s file entered the cache (module docstring)."""
    return (cache or cache_dir()) / "verified" / f"{art.filename}.json"


@dataclass(frozen=True)
class Record:
    sha256: str
    size: int
    when: str
    source: str


def read_record(art: Artifact, cache: Path) -> Record | None:
    """The record of `art`'s cache entry; None when there is none (or it is unreadable: then it says nothing)."""
    try:
        d = json.loads(record_path(art, cache).read_text())
        rec = Record(d["sha256"], d["size"], d["verified"], d.get("source", ""))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    ok = d.get("filename") == art.filename and isinstance(rec.sha256, str) and isinstance(rec.size, int)
    return rec if ok else None


def write_record(art: Artifact, cache: Path, source: str) -> None:
    """Best effort: a read-only (shared) cache is still a cache, it just keeps no records."""
    rec = {"filename": art.filename, "sha256": art.sha256, "size": cached_path(art, cache).stat().st_size,
           "verified": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "source": source}
    with contextlib.suppress(OSError, UserError):
        write_atomic(record_path(art, cache), json.dumps(rec, indent=1, sort_keys=True) + "\n")


def _pin_words(art: Artifact) -> str:
    return f"sha256 {art.sha256}" + (f", size {art.size}" if art.size is not None else "")


def _check_cache(cache: Path) -> None:
    for d in (cache, cache / "artifacts"):
        if d.exists() and not d.is_dir():
            raise UserError(f"{d}: the download cache (SGLANG_BLACKWELL_CACHE, default ~/.cache/sglang-blackwell) "
                            "is not a directory here; move that file away or point SGLANG_BLACKWELL_CACHE elsewhere")


def _cached(art: Artifact, cache: Path, dest: Path, progress: Progress | None) -> Path | None:
    """The cache entry if it matches the pin; None when it must be fetched (again); an error when the pin and the
    entry disagree in a way a download cannot settle. Never deletes the entry."""
    if not dest.is_file():
        if dest.exists() or dest.is_symlink():
            raise UserError(f"{dest}: the cache entry of {art.filename} is not a file; remove it")
        return None
    size = dest.stat().st_size
    digest = sha256_file(dest) if art.size is None or size == art.size else None
    rec = read_record(art, cache)
    if digest == art.sha256:
        if rec is None or rec.sha256 != art.sha256 or rec.size != size:
            write_record(art, cache, "a cache entry that matched its pin")
        return dest
    where = art.origin or art.filename
    if rec is not None and rec.size == size and rec.sha256 == (digest or sha256_file(dest)):
        changed = [f"{k} = {v!r} (the file's {k} is {r!r})" for k, v, r in
                   (("sha256", art.sha256, rec.sha256), ("size", art.size, rec.size)) if v is not None and v != r]
        raise IntegrityError(f"{where}: the pin changed: {'; '.join(changed)}, but {dest} is the file verified "
                             f"against the pin on {rec.when}, and it is unchanged since; nothing was downloaded or "
                             f"deleted (a wrong pin: fix base.toml; a new pin: delete {dest} to download again)")
    now = f"size {size}" + (f", sha256 {digest}" if digest else "")
    if rec is not None:
        why = (f"{dest} changed since it was verified on {rec.when} (then size {rec.size}, sha256 {rec.sha256}; "
               f"now {now})")
    else:
        why = (f"{where} pins {_pin_words(art)}, but {dest} has {now}, and no record says which of the two "
               "changed")
    if envswitch.on(OFFLINE_ENV):
        raise IntegrityError(f"{why}; {OFFLINE_ENV} is on: not downloading it again; the cache entry was kept "
                             f"(delete {dest} once the pin is right, then fetch online)")
    if progress:
        progress(f"cached {art.filename} is corrupt or not the pinned file ({why}); fetching it again")
    return None


# What a download of ours makes in <root>/.partial/ (fetch below, artifacts/deps.py): one directory per download,
# tempfile.mkdtemp(prefix=f"<name>.<pid>.") (so <name>.<pid>.<random>), holding nothing but these
_WORK_NAME = re.compile(r"^[^/]+\.(\d+)\.[a-z0-9_]+$")
_WORK_ENTRIES = {"got": stat.S_ISDIR, "request.txt": stat.S_ISREG, "locked.txt": stat.S_ISREG}
_SWEEP_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


def _own_dir(st: os.stat_result) -> bool:
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid()


def _dead_download(parent_fd: int, name: str) -> bool:
    """Is `name` (in the directory open as parent_fd) a download directory of ours whose process is gone?"""
    m = _WORK_NAME.match(name)
    if not m or not _own_dir(os.stat(name, dir_fd=parent_fd, follow_symlinks=False)):
        return False
    fd = os.open(name, _SWEEP_FLAGS, dir_fd=parent_fd)
    try:
        for entry in os.listdir(fd):
            kind = _WORK_ENTRIES.get(entry)
            if kind is None or not kind(os.stat(entry, dir_fd=fd, follow_symlinks=False).st_mode):
                return False
    finally:
        os.close(fd)
    return not procs.alive(int(m[1]))


def sweep_partials(cache: Path) -> None:
    """Remove what downloads of ours that died (killed, power cut) left in <cache>/.partial/: only directories a
    download made (named <name>.<pid>.<random>, holding nothing but got/, request.txt, locked.txt) whose pid is
    gone. Nothing else there is ours to judge: no file, no symbolic link, no directory of another shape or owner,
    however old or however named; and nothing at all when .partial is not a directory of this user (a symbolic
    link to another disk: its files are someone's, not ours)."""
    try:
        fd = os.open(cache / ".partial", _SWEEP_FLAGS)
    except OSError:
        return  # absent, a symbolic link, not a directory
    try:
        if not _own_dir(os.fstat(fd)):
            return
        for name in os.listdir(fd):
            try:
                if not _dead_download(fd, name):
                    continue
                if sys.version_info >= (3, 11):
                    shutil.rmtree(name, dir_fd=fd)  # relative to the .partial just checked, never a path again
                else:
                    shutil.rmtree(cache / ".partial" / name)
            except OSError:
                continue
    finally:
        os.close(fd)


def _work_dir(partial: Path, prefix: str) -> Path:
    """A private download directory in `partial` (made if missing), which must be a directory of this user: a
    symbolic link (to a bigger disk, say) is refused, since what sweep_partials would find there is not ours."""
    if not partial.is_symlink():
        partial.mkdir(parents=True, exist_ok=True)
    st = os.stat(partial, follow_symlinks=False)
    if stat.S_ISLNK(st.st_mode) or not _own_dir(st):
        what = (f"a symbolic link to {os.readlink(partial)}" if stat.S_ISLNK(st.st_mode)
                else "not a directory of this user")
        raise UserError(f"{partial}: is {what}; unfinished downloads go there and are removed once their process "
                        "is gone, so it must be a directory of its own: remove it (SGLANG_BLACKWELL_CACHE moves "
                        "the whole cache to another disk); nothing was downloaded")
    return Path(tempfile.mkdtemp(prefix=prefix, dir=partial))


def pip_base_command() -> list[str]:
    """`python -m pip` of this interpreter; a clear error when it has no pip."""
    if importlib.util.find_spec("pip") is None:
        raise UserError(f"{sys.executable} has no pip (`{sys.executable} -m pip` fails): sglang-blackwell downloads "
                        f"through pip; install it with `{sys.executable} -m ensurepip --upgrade`")
    return [sys.executable, "-m", "pip"]


def tag_flags(filename: str) -> list[str]:
    """pip's target flags that make the wheel `filename` a candidate whatever the running interpreter is."""
    try:
        _, _, _, tags = parse_wheel_filename(filename)
    except InvalidWheelFilename:
        return []
    flags = ["--only-binary=:all:", "--ignore-requires-python"]
    if all(t.platform == "any" and t.abi == "none" for t in tags):
        return flags  # a pure wheel fits every interpreter
    for plat in sorted({t.platform for t in tags}):
        flags += ["--platform", plat]
    for abi in sorted({t.abi for t in tags}):
        flags += ["--abi", abi]
    interp = min(t.interpreter for t in tags)
    impl = "cp" if interp.startswith("cp") else "py"
    digits = interp[2:]
    if digits:
        flags += ["--python-version", f"{digits[0]}.{digits[1:]}" if len(digits) > 1 else digits]
    return flags + ["--implementation", impl]


def _by_name(art: Artifact) -> str | None:
    try:
        name, version, _, _ = parse_wheel_filename(art.filename)
    except InvalidWheelFilename:
        return None
    return f"{canonicalize_name(name)}=={version}"


def pin_problem(art: Artifact) -> str | None:
    """Why `art` cannot be fetched at all, or None. What becomes a cache path and a line of pip's requirement file
    must be what it claims: a wheel file name (no separator, no control character), 64 lowercase hex digits, a URL
    with no whitespace that ends with the file name (pip builds an sdist a URL points to, whatever --only-binary
    says, and runs its build backend)."""
    problem = file_name_problem(art.filename)
    if problem:
        return f"file name {art.filename!r} {problem}"
    try:
        parse_wheel_filename(art.filename)
    except InvalidWheelFilename:
        return f"{art.filename!r} is not a wheel file name (fetch downloads wheels only, never a file pip builds)"
    if not SHA256_RE.match(art.sha256):
        return f"sha256 {art.sha256!r} is not 64 lowercase hex digits"
    if art.url:
        problem = url_problem(art.url, art.filename, ("http", "https", "file"))
        if problem:
            return f"url {art.url!r} {problem}"
    return None


def fetch(art: Artifact, cache: Path | None = None, progress: Progress | None = None,
          limits: Limits | None = None) -> Path:
    """Return a verified local copy of `art`, downloading it through pip if the cache lacks it; the pip processes
    together end within `limits.total_s` (default httpclient.Limits(): --request-timeouts TOTAL where a command has
    it), or are killed and the download fails naming the bound."""
    problem = pin_problem(art)
    if problem:
        raise UserError(f"{art.origin or art.filename}: {problem}; nothing was downloaded")
    cache = cache or cache_dir()
    _check_cache(cache)
    dest = cached_path(art, cache)
    sweep_partials(cache)
    hit = _cached(art, cache, dest, progress)
    if hit is not None:
        return hit
    if envswitch.on(OFFLINE_ENV):
        raise UserError(f"{art.filename}: not in the cache {cache} and {OFFLINE_ENV} is on")
    requests = []
    by_name = _by_name(art)
    if by_name:
        requests.append(("the configured index", by_name))
    if art.url:
        name = by_name.split("==")[0] if by_name else art.filename
        requests.append((f"the pinned URL {art.url}", f"{name} @ {art.url}"))
    if not requests:
        raise UserError(f"{art.filename}: no download URL pinned and not a wheel pip can look up by name")
    pip = pip_base_command()
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        work = _work_dir(cache / ".partial", f"{art.filename}.{os.getpid()}.")
    except OSError as e:
        raise UserError(f"{cache}: cannot write to the download cache ({os_reason(e)}); nothing was downloaded "
                        "(SGLANG_BLACKWELL_CACHE chooses another)") from None
    total = (limits or Limits()).total_s
    deadline = time.monotonic() + total
    try:
        failures = []
        mismatches = 0
        for where, req in requests:
            left = deadline - time.monotonic()
            if left <= 0:
                failures.append(f"from {where}: not tried, the total deadline of {total:g} s had passed")
                continue
            got = work / "got"
            shutil.rmtree(got, ignore_errors=True)
            got.mkdir()
            reqfile = work / "request.txt"
            reqfile.write_text(f"{req} --hash=sha256:{art.sha256}\n")
            if progress:
                size = f", {art.size / 1e6:.1f} MB" if art.size else ""
                progress(f"pip download {art.filename} from {where}{size}")
            why, mismatch = _pip_download(pip, reqfile, got, tag_flags(art.filename), left, total)
            if why is not None:
                failures.append(f"from {where}: {why}")
                mismatches += mismatch
                continue
            files = [p for p in got.iterdir() if p.is_file()]
            if len(files) != 1:
                failures.append(f"from {where}: pip saved {len(files)} files, expected 1")
                continue
            problem = _verify(files[0], art)
            if problem is not None:
                raise IntegrityError(f"{art.filename}: the file pip downloaded from {where} does not match the pin "
                                     f"({problem}; truncated or wrong file); nothing was cached")
            os.replace(files[0], dest)
            write_record(art, cache, where)
            return dest
        err = IntegrityError if mismatches == len(requests) else UserError  # every source served other bytes
        kept = f"; the cache entry {dest} was kept" if dest.exists() else ""
        raise err(f"{art.filename}: pip download failed " + "; ".join(failures) + f"; nothing was cached{kept}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _pip_download(pip: list[str], reqfile: Path, dest: Path, flags: list[str], timeout: float,
                  total: float) -> tuple[str | None, bool]:
    """Run pip download, killed after `timeout` s (what is left of the fetch's `total`): (None, False) on success,
    else (the reason, whether pip saw a file with another sha256 than the pin). On a terminal pip's own output
    (progress bar included) goes straight to it. --only-binary :all: always: pip never builds anything here."""
    tty = sys.stderr.isatty()
    binary = [] if "--only-binary=:all:" in flags else ["--only-binary=:all:"]
    cmd = [*pip, "download", "--no-deps", "--require-hashes", "--no-cache-dir", "--disable-pip-version-check",
           "--progress-bar", "on" if tty else "off", "--dest", str(dest), *binary, *flags, "-r", str(reqfile)]
    late = (f"pip did not finish within {total:g} s (the total deadline of a download, --request-timeouts TOTAL "
            "where the command has it); it was killed")
    if tty:
        try:
            r = procs.run(cmd, stdout=sys.stderr, timeout=timeout)
        except subprocess.TimeoutExpired:
            return late, False
        return (None, False) if r.returncode == 0 else (f"pip exited {r.returncode} (its output above)", False)
    try:
        r = procs.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return late, False
    if r.returncode == 0:
        return None, False
    out = r.stderr + "\n" + r.stdout
    lines = [" ".join(ln.split()) for ln in out.splitlines() if ln.strip()]
    mismatch = "DO NOT MATCH THE HASHES" in out
    if mismatch:
        got = next((ln for ln in lines if ln.startswith("Got ")), "")
        return f"pip refused the file: its sha256 is not the pin ({got})", True
    errors = [ln for ln in lines if ln.startswith("ERROR:")] or lines[-3:]
    return f"pip exited {r.returncode}: " + " | ".join(errors[:3]), False
