"""What a package index's JSON API (PyPI's `<root>/pypi/<name>/json`, and the mirrors that serve it) says about a
project's releases: read with the bounded client (httpclient.py), validated before anything of it is used.

An index, a mirror or a proxy in between is untrusted input: what it says becomes a file name in our cache, a
line of the requirement file pip reads, and text in base.toml. So every string taken from it is checked first:

  sha256     exactly 64 hex digits (kept lowercase); absent, null or "" means the file publishes none (it is named,
             never taken)
  filename   a wheel file name packaging parses, with no path separator, no control character, not hidden
  url        resolved against the document's URL, http(s), no whitespace, control character or fragment, its last
             path segment the file name (pip decides from the URL whether it has a wheel or an sdist to build)
  size       a positive integer, or absent / null
  yanked     true / false (or PEP 592's reason string), absent or null

and every level of the document has its type: the document and `info` objects, `releases` an object of arrays,
each file an object, `digests` an object, `urls` an array, `info.version` a version string. Anything else is a
UserError (exit 2) in one line naming the index URL and the field, e.g.
`https://pypi.org/pypi/sglang/json: releases["0.5.9"][1].digests.sha256: "ab\\n--no-binary" is not 64 hex digits`.
A document nested too deep for the JSON reader, one larger than the client's cap, one that is not UTF-8 or not
JSON: the same, naming the URL. Only wheels are taken; an sdist (or an egg) is skipped, its fields type-checked.
What is read is checked: the release asked for, or (for the newest) every final release; a pre-release or a
key that is no PEP 440 version is never read.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import urllib.error
import urllib.parse
from dataclasses import dataclass
from typing import Any

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from .. import httpclient
from ..errors import UserError
from .bases import Artifact, file_name_problem, url_problem

PYPI_URL = "https://pypi.org"
HEX64 = re.compile(r"^[0-9a-fA-F]{64}$")


@dataclass
class Release:
    distribution: str
    version: str
    files: list[Artifact]
    unhashed: tuple[str, ...] = ()  # the release's wheels that publish no sha256 (never in `files`)


def pypi_url() -> str:
    return os.environ.get("SGLANG_BLACKWELL_PYPI_URL", PYPI_URL).rstrip("/")


def project_url(distribution: str, index: str | None = None) -> str:
    name = urllib.parse.quote(str(canonicalize_name(distribution)), safe="")
    return f"{(index or pypi_url()).rstrip('/')}/pypi/{name}/json"


# ---- the document ------------------------------------------------------------------------------------------

def _kind(v: object) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    return {str: "a string", int: "a number", float: "a number", list: "an array", dict: "an object"}.get(
        type(v), type(v).__name__)


def _short(v: object) -> str:
    r = json.dumps(v) if isinstance(v, str) else repr(v)
    return r if len(r) <= 80 else r[:77] + "..."


class _Doc:
    """Typed reads of one JSON document: a value of the wrong type is a UserError naming the URL and the field."""

    def __init__(self, url: str):
        self.url = url

    def bad(self, where: str, msg: str) -> UserError:
        return UserError(f"{self.url}: {where}: {msg}; nothing was used from this index")

    def want(self, v: object, kind: type | tuple[type, ...], where: str, what: str) -> Any:
        if not isinstance(v, kind) or (isinstance(v, bool) and bool not in (kind if isinstance(kind, tuple)
                                                                             else (kind,))):
            raise self.bad(where, f"expected {what}, not {_kind(v)}")
        return v

    def obj(self, v: object, where: str) -> dict[str, Any]:
        return self.want(v, dict, where, "an object")

    def arr(self, v: object, where: str) -> list[Any]:
        return self.want(v, list, where, "an array")


def read_document(url: str, limits: httpclient.Limits | None = None) -> dict[str, Any]:
    """GET url (within `limits`, at most httpclient.MAX_BODY), decoded as a JSON object; any failure is one line
    naming the URL."""
    try:
        raw = httpclient.get(url, limits or httpclient.Limits(), headers={"Accept": "application/json"})
    except httpclient.Redirected as e:
        raise UserError(f"{url}: {e}; give the index root it points to (--index-url / "
                        "SGLANG_BLACKWELL_PYPI_URL)") from None
    except urllib.error.HTTPError as e:
        raise UserError(f"{url}: HTTP {e.code} {e.reason}") from None
    except (OSError, ValueError, http.client.HTTPException) as e:  # URLError, Timeout, TooLarge, a bad URL
        raise UserError(f"{url}: cannot read PyPI's JSON API ({httpclient.why_failed(e)})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"{url}: not UTF-8 (byte {raw[e.start]:#04x} at offset {e.start}); not a JSON API "
                        "answer") from None
    try:
        data = json.loads(text)
    except RecursionError:
        raise UserError(f"{url}: JSON nested deeper than the reader takes; not a JSON API answer") from None
    except ValueError as e:
        where = f" (line {e.lineno}, column {e.colno})" if isinstance(e, json.JSONDecodeError) else ""
        msg = e.msg if isinstance(e, json.JSONDecodeError) else str(e)
        raise UserError(f"{url}: not JSON{where}: {msg}") from None
    return _Doc(url).obj(data, "the document")


# ---- one file of a release -------------------------------------------------------------------------------------

def _file(doc: _Doc, where: str, raw: object) -> tuple[Artifact | None, str | None]:
    """(the file as an Artifact, None) for a hashed wheel that is not yanked; (None, name) for a wheel without a
    sha256; (None, None) for anything else (yanked, an sdist). Every field is type-checked first."""
    u = doc.obj(raw, where)
    name = doc.want(u.get("filename"), str, f"{where}.filename", "a file name (a string)")
    problem = file_name_problem(name)
    if problem:
        raise doc.bad(f"{where}.filename", f"{_short(name)} {problem}")
    yanked = u.get("yanked", False)
    if yanked is not None:
        doc.want(yanked, (bool, str), f"{where}.yanked", "true, false or a reason")
    size = u.get("size")
    if size is not None:
        doc.want(size, int, f"{where}.size", "a size in bytes (an integer)")
        if size <= 0:
            raise doc.bad(f"{where}.size", f"{size} is not a file size in bytes")
    digests = u.get("digests")
    sha = None
    if digests is not None:
        sha = doc.obj(digests, f"{where}.digests").get("sha256")
        if sha is not None:
            doc.want(sha, str, f"{where}.digests.sha256", "64 hex digits (a string)")
    url = u.get("url")
    if url is not None:
        doc.want(url, str, f"{where}.url", "a URL (a string)")
    if yanked or not name.endswith(".whl"):
        return None, None
    try:
        parse_wheel_filename(name)
    except InvalidWheelFilename as e:
        raise doc.bad(f"{where}.filename", f"{_short(name)} is not a wheel file name ({e})") from None
    if not sha:
        return None, name
    if not HEX64.match(sha):
        raise doc.bad(f"{where}.digests.sha256", f"{_short(sha)} is not 64 hex digits")
    if url is None:
        raise doc.bad(f"{where}.url", "missing (a wheel with a sha256 needs the URL it is served at)")
    problem = _raw_url_problem(url) or url_problem(resolved := urllib.parse.urljoin(doc.url, url), name)
    if problem:
        raise doc.bad(f"{where}.url", f"{_short(url)} {problem}")
    return Artifact(filename=name, url=resolved, sha256=sha.lower(), size=size, origin=f"{doc.url} {where}"), None


def _raw_url_problem(url: str) -> str | None:
    """What urljoin would hide: whitespace or a control character in the URL as served."""
    if any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in url):
        return "holds whitespace or a control character"
    return None


def _files(doc: _Doc, where: str, raw: object) -> tuple[list[Artifact], tuple[str, ...]]:
    files, unhashed = [], []
    for i, u in enumerate(doc.arr(raw, where)):
        art, bare = _file(doc, f"{where}[{i}]", u)
        if art is not None:
            files.append(art)
        elif bare is not None:
            unhashed.append(bare)
    return files, tuple(unhashed)


# ---- a release ---------------------------------------------------------------------------------------------------

def release(distribution: str, version: str | None = None, index: str | None = None,
            limits: httpclient.Limits | None = None) -> Release:
    """The newest final release of `distribution` on the index (or `version`), with its wheels (`index`: another
    root serving PyPI's JSON API than pypi_url())."""
    url = project_url(distribution, index)
    doc = _Doc(url)
    data = read_document(url, limits)
    releases = doc.obj(data.get("releases", {}), "releases")
    if version is not None:
        if version not in releases:
            raise UserError(f"{url}: {distribution} has no release {version!r}")
        files, unhashed = _files(doc, f"releases[{json.dumps(version)}]", releases[version])
        return Release(distribution, version, files, unhashed)
    candidates = []
    for v, entries in releases.items():  # only final releases are read (the others are never used)
        try:
            ver = Version(v)
        except InvalidVersion:
            continue
        if ver.is_prerelease or ver.is_devrelease:
            continue
        files, unhashed = _files(doc, f"releases[{json.dumps(v)}]", entries)
        if files:
            candidates.append((ver, v, files, unhashed))
    if candidates:
        _, v, files, unhashed = max(candidates, key=lambda c: c[0])
        return Release(distribution, v, files, unhashed)
    # an index that only lists the current release
    info = doc.obj(data.get("info", {}), "info")
    v = info.get("version")
    if v is None:
        raise UserError(f"{url}: no release with wheels")
    doc.want(v, str, "info.version", "a version (a string)")
    try:
        Version(v)
    except InvalidVersion:
        raise doc.bad("info.version", f"{_short(v)} is not a PEP 440 version") from None
    files, unhashed = _files(doc, "urls", data.get("urls", []))
    return Release(distribution, v, files, unhashed)
