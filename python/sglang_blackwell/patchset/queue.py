"""The patch-queue workflow (like `gbp pq`): `checkout` materializes an upstream tree as a git repo with one
commit per patch; you edit, commit, rebase; `export` writes the commits back as the series.

A round trip with no edits changes no byte: patches are written with `git format-patch --zero-commit
--no-signature --no-numbered`, with user git configuration ignored.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path

from .. import procs
from ..errors import UserError
from ..paths import read_json
from .bases import Base, series_for
from .fetch import fetch
from .layouts import get_layout
from .series import NAME_RE, header_problems, parse_patch

STATE = "sglang-blackwell.json"
BOT = ("sglang-blackwell", "sglang-blackwell@users.noreply.github.com")
FIXED_DATE = "2000-01-01T00:00:00+0000"


def _git_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1", GIT_COMMITTER_NAME=BOT[0],
               GIT_COMMITTER_EMAIL=BOT[1], GIT_AUTHOR_NAME=BOT[0], GIT_AUTHOR_EMAIL=BOT[1], LC_ALL="C")
    return env


def git(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    r = procs.run(["git", "-c", "core.abbrev=12", "-c", "core.autocrlf=false", *args], cwd=cwd,
                  env=env or _git_env(), capture_output=True, text=True)
    if r.returncode != 0:
        raise UserError(f"git {' '.join(args[:2])} in {cwd} failed: {(r.stderr or r.stdout).strip()}")
    return r.stdout


def _artifact_for_checkout(base: Base, package: str):
    pkg = base.package(package)
    py = f"{sys.version_info.major}.{sys.version_info.minor}"
    arts = pkg.files_for(py) or pkg.files_for(None)
    if not arts:
        raise UserError(f"base {base.name}: no {pkg.distribution} wheel pinned for x86_64")
    return pkg, arts[0]


def checkout(base: Base, package: str, dest: Path, cache: Path | None = None) -> int:
    """Returns the number of patches applied as commits."""
    if dest.exists() and not dest.is_dir():
        raise UserError(f"{dest}: exists and is not a directory")
    blocker = next((p for p in dest.parents if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        raise UserError(f"{dest}: {blocker} is a file, not a directory")
    if dest.exists() and any(dest.iterdir()):
        raise UserError(f"{dest}: exists and is not empty")
    pkg, art = _artifact_for_checkout(base, package)
    layout = get_layout(pkg.package)
    series = series_for(base, pkg.package)
    src = fetch(art, cache)
    dest.mkdir(parents=True, exist_ok=True)
    try:
        with zipfile.ZipFile(src) as z:
            for info in z.infolist():
                gp = layout.wheel_to_git(info.filename)
                if gp is None or info.is_dir():
                    continue
                target = dest / gp
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(z.read(info))
                if (info.external_attr >> 16) & 0o111:
                    target.chmod(0o755)
        git(dest, "init", "-q", "-b", "main")
        # what running the code leaves behind is no new file of a patch (export refuses untracked files)
        (dest / ".git" / "info").mkdir(parents=True, exist_ok=True)
        (dest / ".git" / "info" / "exclude").write_text("__pycache__/\n*.py[co]\n")
        git(dest, "add", "-A")
        env = _git_env()
        env.update(GIT_AUTHOR_DATE=FIXED_DATE, GIT_COMMITTER_DATE=FIXED_DATE)
        git(dest, "commit", "-q", "-m", f"upstream {pkg.distribution} {pkg.version}",
            "-m", f"From the pinned wheel {art.filename} (sha256 {art.sha256}).", env=env)
        git(dest, "tag", "upstream")
        state = {"base": base.name, "package": pkg.package, "series_dir": str(series.dir.resolve()),
                 "names": [p.name for p in series.patches], "upstream": art.filename}
        (dest / ".git" / STATE).write_text(json.dumps(state, indent=1) + "\n")
        for p in series.patches:
            try:
                git(dest, "am", "-q", "--keep-cr", "--no-3way", str(p.path))
            except UserError as e:
                procs.run(["git", "am", "--abort"], cwd=dest, env=_git_env(), capture_output=True)
                raise UserError(f"patch {p.name} does not apply with git am: {e}") from None
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    return len(series.patches)


def _check_commit(f: Path) -> None:
    """A commit's patch must pass what build and check require of a header (series.header_problems)."""
    subject = next((ln[len("Subject: "):] for ln in f.read_text(errors="replace").splitlines()
                    if ln.startswith("Subject: ")), f.name)
    subject = re.sub(r"^\[PATCH[^\]]*\]\s*", "", subject)
    try:
        p = parse_patch(f)
    except UserError as e:
        raise UserError(f"commit {subject!r}: {e}; nothing was exported") from None
    if not p.body.strip():
        raise UserError(f"commit {subject!r}: has no message body: a patch needs a long description (why the change "
                        "is needed) and the DEP-3 fields (Origin, Forwarded, Upstream-Status, Last-Update, "
                        "Logical-Id) as the last paragraph; git commit --amend (or rebase -i) it; nothing was exported")
    probs = header_problems(p)
    if probs:
        raise UserError(f"commit {subject!r}: {'; '.join(probs)}; amend it (git commit --amend or rebase -i); nothing "
                        "was exported")


def _slug(subject: str) -> str:
    s = re.sub(r"[^a-z0-9]+", "-", subject.lower()).strip("-")
    return s[:52].rstrip("-") or "patch"


def read_state(tree: Path) -> dict:
    """The checkout's .git/sglang-blackwell.json, its shape checked (it names the series it came from)."""
    state_file = tree / ".git" / STATE
    if not state_file.is_file():
        raise UserError(f"{tree}: not a checkout made by `sglang-blackwell checkout` (no .git/{STATE})")
    state = read_json(state_file)
    if not isinstance(state, dict) or not isinstance(state.get("series_dir"), str) \
            or not isinstance(state.get("names"), list) or not all(isinstance(n, str) and NAME_RE.match(n)
                                                                   for n in state["names"]):
        raise UserError(f"{state_file}: not the state `sglang-blackwell checkout` writes (series_dir, names); "
                        "check the tree out again")
    return state


def export(tree: Path, series_dir: Path | None = None) -> list[str]:
    """Write the commits above `upstream` back as patches + series. Returns the patch names. Refused, with
    nothing written: uncommitted changes, files git does not track (a new file must be `git add`ed and
    committed to be part of a patch), and commits whose patch fails the DEP-3 header checks."""
    state = read_state(tree)
    out_dir = Path(series_dir or state["series_dir"])
    if out_dir.exists() and not out_dir.is_dir():
        raise UserError(f"--to {out_dir}: is not a directory")
    if git(tree, "status", "--porcelain", "--untracked-files=no").strip():
        raise UserError(f"{tree}: has uncommitted changes; commit them (one commit per patch) first")
    untracked = [ln for ln in git(tree, "ls-files", "--others", "--exclude-standard").splitlines() if ln]
    if untracked:
        more = f" and {len(untracked) - 3} more" if len(untracked) > 3 else ""
        raise UserError(f"{tree}: files git does not track: {', '.join(untracked[:3])}{more}: a new file is part of "
                        "a patch only once committed (git add it and commit, or delete it); nothing was exported")
    old_names: list[str] = state["names"]
    old_by_id = {}
    for n in old_names:
        f = out_dir / n
        if f.exists():
            lid = parse_patch(f).logical_id
            if lid:
                old_by_id[lid] = n
    with tempfile.TemporaryDirectory() as td:
        git(tree, "format-patch", "-q", "--zero-commit", "--no-signature", "--no-numbered", "-o", td,
            "upstream..HEAD")
        produced = sorted(Path(td).glob("*.patch"))
        for f in produced:
            _check_commit(f)
        names: list[str] = []
        used_numbers = {int(NAME_RE.match(n)[1]) for n in old_names}  # type: ignore[index]
        next_no = max(used_numbers, default=0) + 1
        for k, f in enumerate(produced):
            p = parse_patch(f)
            name = old_by_id.get(p.logical_id) if p.logical_id else None
            if name is None and k < len(old_names) and len(produced) == len(old_names):
                name = old_names[k]
            if name is None or name in names:
                name = f"{next_no:04d}-{_slug(p.subject)}.patch"
                next_no += 1
            names.append(name)
        # keep numbers ascending in series order (a rebase may have reordered commits)
        names = [f"{k + 1:04d}-{n.split('-', 1)[1]}" for k, n in enumerate(names)]
        out_dir.mkdir(parents=True, exist_ok=True)
        for f, name in zip(produced, names, strict=True):
            target = out_dir / name
            data = f.read_bytes()
            if not target.exists() or target.read_bytes() != data:
                tmp = target.with_suffix(".patch.tmp")
                tmp.write_bytes(data)
                os.replace(tmp, target)
    for n in set(old_names) - set(names):
        (out_dir / n).unlink(missing_ok=True)
    series_file = out_dir / "series"
    header = []
    if series_file.exists():
        header = [ln for ln in series_file.read_text().splitlines() if ln.startswith("#")]
    text = "\n".join(header + names) + "\n"
    if not series_file.exists() or series_file.read_text() != text:
        series_file.write_text(text)
    state["names"] = names
    (tree / ".git" / STATE).write_text(json.dumps(state, indent=1) + "\n")
    return names
