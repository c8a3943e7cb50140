"""The checkout a set-up run measures: which repository, which commit, whether its tracked files have changes
the commit lacks (a fresh clone would not have them), and the clone itself (`git clone`, then that commit)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from ... import procs
from ...errors import UserError
from ...paths import repo_root


@dataclass(frozen=True)
class Source:
    repo: Path  # the checkout's top level
    commit: str  # HEAD's full hash
    branch: str | None  # None: a detached HEAD
    changed: tuple[str, ...]  # tracked files with uncommitted changes (git status --porcelain)

    def as_dict(self) -> dict[str, object]:
        return {"repo": str(self.repo), "commit": self.commit, "branch": self.branch, "dirty": bool(self.changed),
                "changed": list(self.changed)}


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    try:
        return procs.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=120,
                         stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise UserError("git: not found on PATH (a set-up run clones the checkout with it)") from None
    except subprocess.TimeoutExpired:
        raise UserError(f"--repo {repo}: `git {' '.join(args)}` did not answer within 120 s") from None


def _first_line(r: subprocess.CompletedProcess) -> str:
    lines = (r.stderr.strip() or r.stdout.strip()).splitlines()
    return lines[0] if lines else f"exit {r.returncode}"


def inspect(repo_arg: str | None) -> Source:
    """The checkout `--repo` names (default: the one this CLI runs from), at HEAD."""
    if repo_arg is None:
        root = repo_root()
        if root is None:
            raise UserError("--repo: this sglang-blackwell runs from an installed package, not a checkout: give "
                            "--repo PATH")
        repo = root
    else:
        repo = Path(repo_arg).expanduser()
        if not repo.is_dir():
            raise UserError(f"--repo {repo_arg}: not a directory")
    top = _git(repo, "rev-parse", "--show-toplevel")
    if top.returncode != 0:
        raise UserError(f"--repo {repo}: not a git checkout ({_first_line(top)})")
    top_path = Path(top.stdout.strip())
    head = _git(top_path, "rev-parse", "--verify", "HEAD^{commit}")
    if head.returncode != 0:
        raise UserError(f"--repo {top_path}: has no commit to clone (HEAD: {_first_line(head)})")
    branch = _git(top_path, "symbolic-ref", "--short", "-q", "HEAD")
    status = _git(top_path, "status", "--porcelain", "--untracked-files=no")
    if status.returncode != 0:
        raise UserError(f"--repo {top_path}: git status failed ({_first_line(status)})")
    changed = tuple(line[3:] for line in status.stdout.splitlines() if line.strip())
    on_branch = branch.stdout.strip() if branch.returncode == 0 else ""
    return Source(top_path, head.stdout.strip(), on_branch or None, changed)


def refuse_dirty(src: Source) -> None:
    if src.changed:
        shown = ", ".join(src.changed[:5]) + (f" and {len(src.changed) - 5} more" if len(src.changed) > 5 else "")
        raise UserError(f"--repo {src.repo}: {len(src.changed)} tracked file(s) with uncommitted changes ({shown}): "
                        f"a fresh clone of {src.commit[:12]} would not have them; commit them, or give "
                        f"--allow-dirty to measure {src.commit[:12]} anyway")


def clone(src: Source, dest: Path) -> None:
    """A fresh clone of `src` at its commit in `dest` (which must not exist): only what the commit tracks."""
    r = procs.run(["git", "clone", "--quiet", "--no-checkout", str(src.repo), str(dest)], capture_output=True,
                  text=True, timeout=600, stdin=subprocess.DEVNULL)
    if r.returncode == 0:
        r = _git(dest, "checkout", "--quiet", "--detach", src.commit)
    if r.returncode != 0:
        raise UserError(f"--repo {src.repo}: git clone of {src.commit[:12]} into {dest} failed ({_first_line(r)})")
