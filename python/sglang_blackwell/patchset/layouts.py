"""Upstream git layout <-> wheel layout, per patched package.

Patches use upstream's git paths (so `git am` works on an upstream checkout); wheels lay files out differently:
sglang keeps its package under python/ in git, FlashInfer ships include/ and csrc/ under flashinfer/data/.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Layout:
    name: str
    # (git prefix, wheel prefix), most specific first
    rules: tuple[tuple[str, str], ...]

    def git_to_wheel(self, git_path: str) -> str | None:
        """The wheel path of an upstream git path; None when the wheel does not ship it (or the path is no plain
        relative path: '..', '.', '//', absolute; series.unsafe_path says why)."""
        parts = git_path.split("/")
        if git_path.startswith("/") or "\\" in git_path or any(x in ("", ".", "..") for x in parts):
            return None
        for git_prefix, wheel_prefix in self.rules:
            if git_path.startswith(git_prefix):
                return wheel_prefix + git_path[len(git_prefix) :]
        return None

    def wheel_to_git(self, wheel_path: str) -> str | None:
        for git_prefix, wheel_prefix in self.rules:
            if wheel_path.startswith(wheel_prefix):
                return git_prefix + wheel_path[len(wheel_prefix) :]
        return None


LAYOUTS: dict[str, Layout] = {
    "sglang": Layout("sglang", (("python/sglang/", "sglang/"),)),
    "flashinfer": Layout(
        "flashinfer",
        (
            ("include/", "flashinfer/data/include/"),
            ("csrc/", "flashinfer/data/csrc/"),
            ("flashinfer/", "flashinfer/"),
        ),
    ),
}


def get_layout(name: str) -> Layout:
    try:
        return LAYOUTS[name]
    except KeyError:
        raise KeyError(f"unknown package layout {name!r} (known: {', '.join(sorted(LAYOUTS))})") from None
