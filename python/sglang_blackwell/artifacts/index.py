"""`sglang-blackwell index DIR`: a PEP 503 simple index of built wheels (pip --extra-index-url file://DIR/simple).

With `url_template` the wheels are not copied: each link is the template filled with {file} (the wheel's name)
and {dir} (the name of the directory it was found in), e.g. a GitHub release asset
https://github.com/OWNER/REPO/releases/download/{dir}/{file} for wheels downloaded into <tag>/ directories.
That is how the release workflow publishes <pages>/whl/cu130/ (`simple_at_root`: DIR itself is the index root)."""

from __future__ import annotations

import hashlib
import html
import shutil
from pathlib import Path

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from ..errors import UserError
from ..paths import write_atomic


def build_index(wheels: list[Path], dest: Path, *, url_template: str | None = None,
                simple_at_root: bool = False, keep_first: bool = False, warn=None) -> Path:
    """Copy wheels to dest/files/ and write dest/simple/<project>/index.html. Returns dest/simple.
    url_template: link to {file}/{dir} URLs instead of copying; simple_at_root: dest itself is the index root.
    Two different files with one name are an error, unless keep_first (the first one listed is published; a
    release index lists the oldest release first, so a published file never changes under its name)."""
    if not wheels:
        raise UserError("no wheels to index (run `sglang-blackwell build` first)")
    if url_template is not None:
        check_template(url_template)
    for w in wheels:
        try:
            parse_wheel_filename(w.name)
        except InvalidWheelFilename as e:
            raise UserError(f"{w}: not a wheel file name ({e}); nothing was indexed") from None
    for d in (dest, dest / "files", dest if simple_at_root else dest / "simple"):
        if d.exists() and not d.is_dir():
            raise UserError(f"{d}: exists and is not a directory; nothing was indexed")
    blocker = next((p for p in dest.parents if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        raise UserError(f"{dest}: {blocker} is a file, not a directory; nothing was indexed")
    seen: dict[str, Path] = {}
    for w in wheels:
        if w.name in seen:
            if seen[w.name].read_bytes() != w.read_bytes():
                msg = (f"two different wheels named {w.name}: {seen[w.name]} and {w} (same version, other bytes: "
                       "the local version label was not bumped, or the build is not reproducible)")
                if not keep_first:
                    raise UserError(msg)
                if warn:
                    warn(msg + f"; publishing {seen[w.name]}")
            continue
        seen[w.name] = w
    files = dest / "files"
    simple = dest if simple_at_root else dest / "simple"
    if url_template is None:
        files.mkdir(parents=True, exist_ok=True)
    projects: dict[str, list[tuple[str, str, str]]] = {}
    for w in seen.values():
        name, _, _, _ = parse_wheel_filename(w.name)
        if url_template is None:
            target = files / w.name
            if w.resolve() != target.resolve():
                shutil.copyfile(w, target)
            href = ("../files/" if simple_at_root else "../../files/") + w.name
        else:
            target = w
            href = url_template.format(file=w.name, dir=w.parent.name)
        digest = hashlib.sha256(target.read_bytes()).hexdigest()
        projects.setdefault(canonicalize_name(name), []).append((w.name, href, digest))
    for proj, entries in projects.items():
        d = simple / proj
        d.mkdir(parents=True, exist_ok=True)
        links = "\n".join(f'    <a href="{html.escape(href)}#sha256={h}">{html.escape(f)}</a><br/>'
                          for f, href, h in sorted(entries))
        _write(d / "index.html", f"<!DOCTYPE html>\n<html>\n  <body>\n{links}\n  </body>\n</html>\n")
    root_links = "\n".join(f'    <a href="{p}/">{p}</a><br/>' for p in sorted(_all_projects(simple)))
    _write(simple / "index.html", f"<!DOCTYPE html>\n<html>\n  <body>\n{root_links}\n  </body>\n</html>\n")
    return simple


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
