"""docker/Dockerfile as data: its build arguments (with defaults), stages and base images, and the CUDA image
reference parsed into version, flavour, Ubuntu release and digest."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UserError

DOCKERFILE = Path("docker") / "Dockerfile"
DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
CUDA_IMAGE_RE = re.compile(
    r"^(?P<repo>(?:[\w.-]+/)*cuda):(?P<version>\d+\.\d+\.\d+)-(?P<flavor>(?:cudnn-)?(?:devel|runtime|base))"
    r"-ubuntu(?P<ubuntu>\d+\.\d+)(?:@(?P<digest>[^\s]+))?$")
# Python 3 of the Ubuntu release the image is built on (the venv is made from it)
UBUNTU_PYTHON = {"22.04": "3.10", "24.04": "3.12"}


@dataclass(frozen=True)
class CudaImage:
    ref: str
    repo: str
    version: str  # "13.0.1"
    flavor: str  # "devel"
    ubuntu: str  # "24.04"
    digest: str | None  # "sha256:<64 hex>" or whatever follows '@' (a placeholder), None without '@'

    @property
    def pinned(self) -> bool:
        """Pinned by a real content digest (not a tag, not a placeholder)."""
        return bool(self.digest and DIGEST_RE.match(self.digest))

    @property
    def python(self) -> str | None:
        return UBUNTU_PYTHON.get(self.ubuntu)


def parse_cuda_image(ref: str) -> CudaImage:
    m = CUDA_IMAGE_RE.match(ref.strip())
    if not m:
        raise UserError(f"CUDA image {ref!r} is not like nvidia/cuda:13.0.1-devel-ubuntu24.04@sha256:<64 hex>")
    return CudaImage(ref.strip(), m["repo"], m["version"], m["flavor"], m["ubuntu"], m["digest"])


@dataclass
class Stage:
    name: str | None
    base: str  # the FROM argument as written, e.g. "${CUDA_IMAGE}" or "scratch"
    args: list[str] = field(default_factory=list)  # ARG names declared in the stage


@dataclass
class Dockerfile:
    path: Path
    text: str
    global_args: dict[str, str | None]  # ARG before the first FROM -> default (None: no default)
    stages: list[Stage]

    def arg(self, name: str) -> str:
        v = self.global_args.get(name)
        if v is None:
            raise UserError(f"{self.path}: no global `ARG {name}=<default>` before the first FROM")
        return v

    @property
    def cuda_image(self) -> CudaImage:
        try:
            return parse_cuda_image(self.arg("CUDA_IMAGE"))
        except UserError as e:
            raise UserError(f"{self.path}: ARG CUDA_IMAGE: {e}") from None


def logical_lines(text: str) -> list[str]:
    """Instructions with backslash continuations joined; comments and blank lines dropped."""
    out, cur = [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if not cur and (not line or line.startswith("#")):
            continue
        if cur and line.startswith("#"):
            continue  # a comment inside a continued instruction
        if line.endswith("\\"):
            cur += line[:-1] + " "
            continue
        out.append(cur + line)
        cur = ""
    if cur:
        out.append(cur)
    return out


def _unquote(v: str) -> str:
    return v[1:-1] if len(v) >= 2 and v[0] == v[-1] and v[0] in "\"'" else v


def parse_dockerfile(text: str, path: Path = DOCKERFILE) -> Dockerfile:
    global_args: dict[str, str | None] = {}
    stages: list[Stage] = []
    for line in logical_lines(text):
        word, _, rest = line.partition(" ")
        word = word.upper()
        if word == "FROM":
            parts = rest.split()
            flags = [p for p in parts if p.startswith("--")]
            parts = [p for p in parts if not p.startswith("--")]
            if not parts:
                raise UserError(f"{path}: FROM without an image: {line!r}")
            name = parts[2] if len(parts) >= 3 and parts[1].upper() == "AS" else None
            if flags and any(not f.startswith("--platform") for f in flags):
                raise UserError(f"{path}: unsupported FROM flag in {line!r}")
            stages.append(Stage(name, parts[0]))
        elif word == "ARG":
            name, eq, default = rest.strip().partition("=")
            if stages:
                stages[-1].args.append(name)
            else:
                global_args[name] = _unquote(default) if eq else None
    if not stages:
        raise UserError(f"{path}: no FROM instruction")
    return Dockerfile(path, text, global_args, stages)


def load_dockerfile(root: Path) -> Dockerfile:
    path = root / DOCKERFILE
    if not path.is_file():
        raise UserError(f"{path}: missing")
    return parse_dockerfile(path.read_text(), path)
