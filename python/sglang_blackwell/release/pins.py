"""No drift between patches/<base>/base.toml and the files that build and ship the stack elsewhere: the
Dockerfile, the image's install script and the GitHub workflows.

Those files pin almost nothing themselves (they get versions through the CLI); what they do contain is checked
here: the default base, the CUDA image (its CUDA version must be what every base's runtime says; its Ubuntu's
Python must have wheels in every base), the arch list, the AOT modules, the NCCL profile, and a scan of every
version-like token and URL, each of which must be a fact of some base.toml or one of the few allowed below.
`check_release` adds what a release needs: a CUDA image pinned by digest (not the placeholder) and label locks
that match the series.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from ..artifacts.aot import ARCH_RE, parse_archs, parse_modules
from ..errors import UserError
from ..patchset.bases import Base, list_bases
from .dockerfile import load_dockerfile

WORKFLOWS_DIR = Path(".github") / "workflows"
REQUIRED_WORKFLOWS = ("ci.yml", "release.yml", "gpu-bench.yml")
SCANNED = ("docker/Dockerfile", "docker/install-stack.sh", ".github/workflows/*.yml")
REQUIRED_ARGS = ("CUDA_IMAGE", "BASE", "CUDA_ARCHS", "AOT_MODULES", "NCCL_PROFILE")
# URLs that are not base facts, and why they may appear
ALLOWED_URLS = {
    "http://127.0.0.1:30000/health": "the image's HEALTHCHECK: SGLang's /health on its default port",
    "https://download.pytorch.org/whl/cpu": "CI's test environment: CPU torch (test/constraints.txt) for the CPU tests",
}
ALLOWED_VERSIONS = {
    "0.0.0.0": "bind address",
    "127.0.0.1": "loopback address",
}
VERSION_RE = re.compile(r"(?<![\w.])\d+(?:\.\d+)+(?:[a-z]\w*)?(?:\+[a-z0-9]+(?:\.[a-z0-9]+)*)?(?![\w])")
URL_RE = re.compile(r"https?://[^\s\"'<>)\]`]+")
NOT_VERSIONS = re.compile(r"Apache-2\.0")  # SPDX license id, not a version


@dataclass
class PinReport:
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def base_versions(bases: list[Base]) -> set[str]:
    out: set[str] = set()
    for b in bases:
        out |= {b.name, b.cuda}
        for p in b.patched:
            out |= {p.version, b.local_version(p)}
        for r in b.runtime:
            out |= {r.version, r.version.split("+")[0]}
    return out


def base_urls(bases: list[Base]) -> set[str]:
    out: set[str] = set()
    for b in bases:
        for r in b.runtime:
            if r.index_url:
                out |= {r.index_url, r.index_url.rstrip("/")}
            out |= {f.url for f in r.files if f.url}
            out |= set(URL_RE.findall(r.requirement))
        for p in b.patched:
            out |= {f.url for f in p.files}
    return out


def scanned_files(root: Path) -> list[Path]:
    files: list[Path] = []
    for pattern in SCANNED:
        files += sorted(root.glob(pattern))
    return files


def check_pins(root: Path, bases: list[Base] | None = None) -> PinReport:
    rep = PinReport()
    bases = bases if bases is not None else list_bases(root / "patches")
    default = next(b for b in bases if b.default)
    try:
        df = load_dockerfile(root)
        for a in REQUIRED_ARGS:
            df.arg(a)
        img = df.cuda_image
    except UserError as e:
        rep.problems.append(str(e))
        return rep
    dfp = df.path.relative_to(root)

    if df.arg("BASE") != default.name:
        rep.problems.append(f"{dfp}: ARG BASE={df.arg('BASE')} but the default base is {default.name} "
                            f"(patches/{default.name}/base.toml says default = true)")
    for b in bases:
        cuda = next((r for r in b.runtime if r.name == "cuda"), None)
        wanted = [v for v in (b.cuda, cuda.version if cuda else None) if v]
        for v in wanted:
            if not (img.version == v or img.version.startswith(v + ".")):
                rep.problems.append(f"{dfp}: ARG CUDA_IMAGE is CUDA {img.version}, base {b.name} needs CUDA {v} "
                                    f"(patches/{b.name}/base.toml)")
        py = img.python
        if py is None:
            rep.problems.append(f"{dfp}: ARG CUDA_IMAGE: Ubuntu {img.ubuntu}: its Python version is not known here")
            continue
        for p in b.patched:
            if not p.files_for(py):
                rep.problems.append(f"{dfp}: the image's Python {py} (Ubuntu {img.ubuntu}) has no {p.distribution} "
                                    f"wheel pinned in base {b.name}")
        for r in b.runtime:
            wheels = [f for f in r.files if f.filename.endswith(".whl")]
            if wheels and not any(f.fits_python(py) for f in wheels):
                rep.problems.append(f"{dfp}: the image's Python {py} has no {r.name} {r.version} wheel in base "
                                    f"{b.name}'s runtime facts")
    if not img.pinned:
        rep.notes.append(f"{dfp}: ARG CUDA_IMAGE={img.ref} is not pinned by a sha256 digest (placeholder): "
                         "the release workflow refuses to build it (docs/docker-and-release.md says how to pin it)")
    for name, check in (("CUDA_ARCHS", parse_archs), ("AOT_MODULES", parse_modules)):
        try:
            check(df.arg(name))
        except UserError as e:
            rep.problems.append(f"{dfp}: ARG {name}: {e}")
    _check_nccl_profile(rep, dfp, df.arg("NCCL_PROFILE"))
    stage_names = set()
    for st in df.stages:
        if st.base not in ("${CUDA_IMAGE}", "scratch") and st.base not in stage_names:
            rep.problems.append(f"{dfp}: FROM {st.base}: every stage must build on ${{CUDA_IMAGE}} (the one pinned "
                                "image), scratch or an earlier stage")
        if st.name:
            stage_names.add(st.name)

    wf = root / WORKFLOWS_DIR
    for name in REQUIRED_WORKFLOWS:
        if not (wf / name).is_file():
            rep.problems.append(f"{WORKFLOWS_DIR / name}: missing")
    _scan(rep, root, bases, img)
    return rep


def _check_nccl_profile(rep: PinReport, dfp: Path, name: str) -> None:
    from ..box.nccl import AUTO, load_profiles

    if name == AUTO:
        rep.problems.append(f"{dfp}: ARG NCCL_PROFILE=auto: an image build sees no GPU, so auto would pick 'none'; "
                            "name a profile")
    elif name not in load_profiles():
        rep.problems.append(f"{dfp}: ARG NCCL_PROFILE={name}: no such profile in nccl_profiles.toml")


def _scan(rep: PinReport, root: Path, bases: list[Base], img) -> None:
    versions = base_versions(bases) | {img.version, img.ubuntu, img.python or ""} | set(ALLOWED_VERSIONS)
    urls = base_urls(bases) | set(ALLOWED_URLS)
    for path in scanned_files(root):
        rel = path.relative_to(root)
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            for url in URL_RE.findall(line):
                if "$" in url or url in urls:  # templated (${{ ... }}, $VAR): no fixed pin
                    continue
                rep.problems.append(f"{rel}:{lineno}: URL {url} is not an index or file URL of any base "
                                    "(patches/*/base.toml)")
            for m in VERSION_RE.finditer(NOT_VERSIONS.sub(" ", URL_RE.sub(" ", line))):
                tok = m.group(0)
                arch = ARCH_RE.match(tok)
                if tok in versions or (arch and arch[3]):
                    continue
                rep.problems.append(f"{rel}:{lineno}: version {tok!r} is not a pin of any base (patches/*/base.toml):"
                                    " pin it there, or read it with `sglang-blackwell image facts`")
            if "nvidia/cuda:" in line and path.name != "Dockerfile":
                for ref in re.findall(r"nvidia/cuda:[^\s\"']+", line):
                    if ref != img.ref:
                        rep.problems.append(f"{rel}:{lineno}: {ref} differs from docker/Dockerfile's CUDA_IMAGE "
                                            f"{img.ref}")
            for cfg in re.findall(r"benchmark/[\w.-]+\.toml", line):
                if not (root / cfg).is_file():
                    rep.problems.append(f"{rel}:{lineno}: {cfg} does not exist")


def check_release(root: Path, tag: str | None = None) -> PinReport:
    """check_pins + what only a release needs: a digest-pinned CUDA image, label locks matching the series,
    and (given a tag) a tag that names this package's version."""
    from .. import __version__
    from ..patchset.labellock import lock_problems

    rep = check_pins(root)
    try:
        img = load_dockerfile(root).cuda_image
        if not img.pinned:
            rep.problems.append(f"docker/Dockerfile: ARG CUDA_IMAGE={img.ref} is not pinned by a sha256 digest: a "
                                "release image must be (docs/docker-and-release.md: bumping the CUDA base image)")
    except UserError as e:
        rep.problems.append(str(e))
    for b in list_bases(root / "patches"):
        rep.problems += lock_problems(b)
    if tag is not None and tag != f"v{__version__}":
        rep.problems.append(f"tag {tag!r} does not name this package's version: expected v{__version__} "
                            "(pyproject.toml / sglang_blackwell.__version__)")
    return rep
