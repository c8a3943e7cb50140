"""No drift between patches/<base>/base.toml and docker/ + .github/workflows/ (pins.py), shown both ways: the
repository passes, and changing a pin in only one place (Dockerfile, workflow or base.toml) fails, naming it.
Each mutation runs on a copy of the repository's docker/, .github/, patches/ and benchmark configs."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from sglang_blackwell import __version__
from sglang_blackwell.release.pins import check_pins, check_release

REPO = Path(__file__).resolve().parents[3]


def test_repository_has_no_drift():
    rep = check_pins(REPO)
    assert rep.problems == []
    assert rep.notes == []  # the CUDA image is pinned by digest


def test_release_check_passes_only_for_the_package_version_tag():
    assert check_release(REPO, f"v{__version__}").problems == []
    bad = check_release(REPO, "v9.9.9").problems
    assert bad == [f"tag 'v9.9.9' does not name this package's version: expected v{__version__} "
                   "(pyproject.toml / sglang_blackwell.__version__)"]


@pytest.fixture
def repo(tmp_path) -> Path:
    root = tmp_path / "repo"
    for d in ("docker", ".github", "patches"):
        shutil.copytree(REPO / d, root / d)
    (root / "benchmark").mkdir()
    for f in (REPO / "benchmark").glob("*.toml"):
        shutil.copy(f, root / "benchmark" / f.name)
    return root


def edit(path: Path, old: str, new: str, count: int = 1) -> None:
    text = path.read_text()
    assert text.count(old) >= 1, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, count))


def problems(root: Path) -> str:
    rep = check_pins(root)
    assert rep.problems, "the change went unnoticed"
    return "\n".join(rep.problems)


def test_default_base_changed_only_in_the_dockerfile(repo):
    edit(repo / "docker/Dockerfile", "ARG BASE=0.5.14", "ARG BASE=0.5.9")
    assert "docker/Dockerfile: ARG BASE=0.5.9 but the default base is 0.5.14" in problems(repo)


def test_default_base_changed_only_in_base_toml(repo):
    edit(repo / "patches/0.5.14/base.toml", "default = true", "default = false")
    edit(repo / "patches/0.5.9/base.toml", 'name = "0.5.9"\n', 'name = "0.5.9"\ndefault = true\n')
    assert "docker/Dockerfile: ARG BASE=0.5.14 but the default base is 0.5.9" in problems(repo)


def test_cuda_version_changed_only_in_the_dockerfile(repo):
    edit(repo / "docker/Dockerfile", "nvidia/cuda:13.0.1-devel", "nvidia/cuda:13.0.2-devel", count=99)
    assert "ARG CUDA_IMAGE is CUDA 13.0.2, base 0.5.9 needs CUDA 13.0.1" in problems(repo)


def test_cuda_version_changed_only_in_base_toml(repo):
    edit(repo / "patches/0.5.9/base.toml", 'version = "13.0.1"', 'version = "13.0.2"')
    out = problems(repo)
    assert "ARG CUDA_IMAGE is CUDA 13.0.1, base 0.5.9 needs CUDA 13.0.2" in out


def test_a_version_written_twice_then_changed_in_base_toml_only(repo):
    """A pin repeated in the Dockerfile passes while it matches base.toml and fails once base.toml moves on."""
    df = repo / "docker/Dockerfile"
    edit(df, "ARG NCCL_PROFILE=pcie-ll", "ARG NCCL_PROFILE=pcie-ll\n# runtime: torch 2.9.1+cu130")
    assert check_pins(repo).problems == []
    edit(repo / "patches/0.5.9/base.toml", "2.9.1+cu130", "2.10.0+cu130", count=99)
    assert re.search(r"docker/Dockerfile:\d+: version '2\.9\.1\+cu130' is not a pin of any base", problems(repo))


def test_a_pin_added_to_a_workflow_only(repo):
    edit(repo / ".github/workflows/release.yml", "python3 -m venv /opt/aotenv",
         "python3 -m venv /opt/aotenv && /opt/aotenv/bin/pip install torch==2.9.2+cu130")
    assert re.search(r"release\.yml:\d+: version '2\.9\.2\+cu130' is not a pin of any base", problems(repo))


def test_an_index_url_not_in_base_toml(repo):
    edit(repo / "docker/install-stack.sh", '"$SB" install --base "$BASE" --dist "$DIST" --python "$PY"\n',
         '"$SB" install --base "$BASE" --dist "$DIST" --python "$PY"\n'
         'pip install --extra-index-url https://download.pytorch.org/whl/cu128 torch\n')
    assert "URL https://download.pytorch.org/whl/cu128 is not an index or file URL of any base" in problems(repo)


def test_an_index_url_changed_only_in_base_toml(repo):
    df = repo / "docker/Dockerfile"
    edit(df, "ARG NCCL_PROFILE=pcie-ll", "ARG NCCL_PROFILE=pcie-ll\n# torch from https://download.pytorch.org/whl/cu130")
    assert check_pins(repo).problems == []
    edit(repo / "patches/0.5.9/base.toml", "https://download.pytorch.org/whl/cu130",
         "https://download.pytorch.org/whl/cu131", count=99)
    edit(repo / "patches/0.5.14/base.toml", "https://download.pytorch.org/whl/cu130",
         "https://download.pytorch.org/whl/cu131", count=99)
    assert "URL https://download.pytorch.org/whl/cu130 is not an index or file URL of any base" in problems(repo)


def test_a_workflow_with_its_own_cuda_image(repo):
    edit(repo / ".github/workflows/ci.yml", "image: ${{ needs.facts.outputs.cuda_image }}",
         "image: nvidia/cuda:13.0.1-devel-ubuntu24.04")
    assert "ci.yml:" in problems(repo) and "differs from docker/Dockerfile's CUDA_IMAGE" in problems(repo)


def test_an_image_other_than_the_pinned_one(repo):
    edit(repo / "docker/Dockerfile", "FROM ${CUDA_IMAGE} AS runtime", "FROM ubuntu:24.04 AS runtime")
    assert "FROM ubuntu:24.04: every stage must build on ${CUDA_IMAGE}" in problems(repo)


def test_placeholder_digest_passes_ci_and_is_refused_by_the_release(repo):
    edit(repo / "docker/Dockerfile", re.search(r"@sha256:[0-9a-f]{64}", (repo / "docker/Dockerfile").read_text())[0],
         "@sha256:PLACEHOLDER-set-me-see-docs")
    rep = check_pins(repo)
    assert rep.problems == [] and "not pinned by a sha256 digest (placeholder)" in rep.notes[0]
    rel = check_release(repo, f"v{__version__}").problems
    assert any("is not pinned by a sha256 digest: a release image must be" in p for p in rel)


def test_bad_arch_profile_and_config(repo):
    edit(repo / "docker/Dockerfile", "ARG CUDA_ARCHS=12.0a", "ARG CUDA_ARCHS=sm_120")
    edit(repo / "docker/Dockerfile", "ARG NCCL_PROFILE=pcie-ll", "ARG NCCL_PROFILE=auto")
    edit(repo / ".github/workflows/gpu-bench.yml", "benchmark/kimi-k2.5-8xpcie.toml", "benchmark/kimi-k3.toml")
    out = problems(repo)
    assert "ARG CUDA_ARCHS: --aot: 'sm_120' is not a CUDA arch" in out
    assert "ARG NCCL_PROFILE=auto: an image build sees no GPU" in out
    assert "benchmark/kimi-k3.toml does not exist" in out


def test_image_python_without_wheels(repo):
    """The image's Ubuntu decides its Python (22.04: 3.10); a base without a wheel for it is named."""
    edit(repo / "docker/Dockerfile", "-ubuntu24.04@", "-ubuntu22.04@")
    toml = repo / "patches/0.5.14/base.toml"
    text = toml.read_text()
    text = re.sub(r'\[\[patched\.files\]\]\nfilename = "sglang-0\.5\.14-cp310[^\[]*', "", text)
    toml.write_text(text)
    assert "the image's Python 3.10 (Ubuntu 22.04) has no sglang wheel pinned in base 0.5.14" in problems(repo)


def test_user_docs_name_the_current_labels():
    """Install lines in README.md and docs/docker-and-release.md name each base's current local label (a label
    bump that forgets them fails here)."""
    from sglang_blackwell.patchset.bases import list_bases

    current = {}
    for b in list_bases(REPO / "patches"):
        for p in b.patched:
            current[p.version] = b.local_version(p)
    seen = 0
    for doc in ("README.md", "docs/docker-and-release.md"):
        for m in re.finditer(r"(\d+\.\d+\.\d+)\+(sm120\.\d+)", (REPO / doc).read_text()):
            seen += 1
            assert m[1] in current and m[0] == current[m[1]], f"{doc}: {m[0]}, the base's label is {current.get(m[1])}"
    assert seen >= 3


def test_user_docs_and_target_configs_name_the_measured_attention_backend():
    """Every EAGLE-3 command in README.md and docs/docker-and-release.md, and the target box's configs, pass the
    attention backend the receipts measured (box/attention_backend.py), never one where P8 and P11 do not run."""
    from sglang_blackwell.bench.eagle3.config import load_config
    from sglang_blackwell.box.attention_backend import FLAG, MEASURED_BACKEND

    commands = 0
    for doc in ("README.md", "docs/docker-and-release.md"):
        for block in re.findall(r"```\n(.*?)```", (REPO / doc).read_text(), re.S):
            command = block.replace("\\\n", " ")
            if "--speculative-algorithm" not in command:
                continue
            commands += 1
            backends = re.findall(rf"{FLAG}[ =](\S+)", command)
            assert backends == [MEASURED_BACKEND], f"{doc}: {FLAG} {backends} in: {' '.join(command.split())}"
    assert commands >= 3
    for name in ("kimi-k2.5-8xpcie", "kimi-k2.5-8xpcie-grid"):
        args = load_config(REPO / "benchmark" / f"{name}.toml").server.args
        assert [b for a, b in zip(args, args[1:], strict=False) if a == FLAG] == [MEASURED_BACKEND], name
