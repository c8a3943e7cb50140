"""The files `docker build` sends as the build context of docker/Dockerfile (the repository root minus what
.dockerignore excludes), copied into a directory: what the image's builder stage sees as /src."""

from __future__ import annotations

import fnmatch
import os
import shutil
from pathlib import Path


def ignore_patterns(root: Path) -> list[str]:
    lines = (root / ".dockerignore").read_text().splitlines()
    return [ln.strip().rstrip("/") for ln in lines if ln.strip() and not ln.strip().startswith("#")]


def ignored(rel: str, patterns: list[str]) -> bool:
    name = rel.rsplit("/", 1)[-1]
    for p in patterns:
        if p.startswith("**/"):
            if fnmatch.fnmatch(name, p[3:]):
                return True
        elif fnmatch.fnmatch(rel, p):
            return True
    return False


def copy_context(root: Path, dest: Path) -> Path:
    patterns = ignore_patterns(root)
    for d, dirs, files in os.walk(root):
        reld = os.path.relpath(d, root)
        reld = "" if reld == "." else reld + "/"
        dirs[:] = [x for x in dirs if not ignored(reld + x, patterns)]
        for f in files:
            if not ignored(reld + f, patterns):
                target = dest / reld / f
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(Path(d) / f, target)
    return dest
