"""`sglang-blackwell index DIR`: a PEP 503 simple index of built wheels (pip --extra-index-url file://DIR/simple)."""

from __future__ import annotations

import hashlib
import html
import os
import shutil
from pathlib import Path

from packaging.utils import canonicalize_name, parse_wheel_filename

from .errors import UserError


def build_index(wheels: list[Path], dest: Path) -> Path:
    """Copy wheels to dest/files/ and write dest/simple/<project>/index.html. Returns dest/simple."""
    if not wheels:
        raise UserError("no wheels to index (run `sglang-blackwell build` first)")
    files = dest / "files"
    simple = dest / "simple"
    files.mkdir(parents=True, exist_ok=True)
    projects: dict[str, list[tuple[str, str]]] = {}
    for w in wheels:
        name, _, _, _ = parse_wheel_filename(w.name)
        target = files / w.name
        if w.resolve() != target.resolve():
            shutil.copyfile(w, target)
        digest = hashlib.sha256(target.read_bytes()).hexdigest()
        projects.setdefault(canonicalize_name(name), []).append((w.name, digest))
    for proj, entries in projects.items():
        d = simple / proj
        d.mkdir(parents=True, exist_ok=True)
        links = "\n".join(f'    <a href="../../files/{html.escape(f)}#sha256={h}">{html.escape(f)}</a><br/>'
                          for f, h in sorted(entries))
        _write(d / "index.html", f"<!DOCTYPE html>\n<html>\n  <body>\n{links}\n  </body>\n</html>\n")
    root_links = "\n".join(f'    <a href="{p}/">{p}</a><br/>' for p in sorted(_all_projects(simple)))
    _write(simple / "index.html", f"<!DOCTYPE html>\n<html>\n  <body>\n{root_links}\n  </body>\n</html>\n")
    return simple


def _all_projects(simple: Path) -> list[str]:
    return [d.name for d in simple.iterdir() if d.is_dir() and (d / "index.html").exists()]


def _write(path: Path, text: str) -> None:
    tmp = path.with_name("." + path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
