"""The serving image, built for real once per session by docker/standin-image.sh (buildah on a Debian stand-in
base). `make image-test` runs these tests (marker `image`); `make test` deselects them. `make image-test` itself
refuses, NOT RUN and exit 2, where buildah, debootstrap or root is missing (test/support/image_preflight.py); run
otherwise (`pytest test/image`, a whole `pytest`), these tests skip for the same reasons, and under
SGLANG_BLACKWELL_REQUIRE_TOOLS=1 (.ci/run) such a skip fails the run."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

TEST_ROOT = Path(__file__).resolve().parents[1]
if str(TEST_ROOT) not in sys.path:
    sys.path.insert(0, str(TEST_ROOT))

from sglang_blackwell.paths import cache_dir  # noqa: E402
from support.buildah import Buildah  # noqa: E402
from support.image_preflight import blockers  # noqa: E402
from support.require_tools import pytest_configure, pytest_runtest_makereport  # noqa: E402,F401

REPO = TEST_ROOT.parent
SCRIPT = REPO / "docker" / "standin-image.sh"
TAG = "localhost/sglang-blackwell:standin"
STEP_RE = re.compile(r"^== standin-image: (?P<step>[\w -]+): (?P<s>\d+) s$", re.M)
BUILD_TIMEOUT_S = 1800


@dataclass
class BuiltImage:
    buildah: Buildah
    tag: str
    manifest_stage: Path  # what the manifest stage wrote (labels.txt, manifest-<base>.json), as release.yml reads it
    log: str
    steps: dict[str, int] = field(default_factory=dict)  # seconds per step, as the script printed them
    wall_s: float = 0.0


_summary: list[str] = []


@pytest.fixture(scope="session")
def built(tmp_path_factory) -> BuiltImage:
    problems = blockers()
    if problems:
        pytest.skip("the image cannot be built here: " + "; ".join(problems))
    storage = tmp_path_factory.mktemp("standin-image")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_BLACKWELL_", "PYTHON"))}
    env.update(STORAGE=str(storage), TAG=TAG, CACHE=str(cache_dir() / "image"), SRC=str(REPO))
    t0 = time.monotonic()
    r = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, env=env, timeout=BUILD_TIMEOUT_S)
    log = r.stdout + r.stderr
    if r.returncode != 0:
        Buildah(storage).remove_storage()
        pytest.fail(f"docker/standin-image.sh exited {r.returncode}:\n{log[-8000:]}", pytrace=False)
    img = BuiltImage(Buildah(storage), TAG, storage / "image-manifest", log,
                     {m["step"]: int(m["s"]) for m in STEP_RE.finditer(log)}, time.monotonic() - t0)
    size = img.buildah("images", "--format", "{{.Size}}", TAG).stdout.strip()
    _summary.append(f"image build (docker/standin-image.sh, {img.buildah.driver} storage): {img.wall_s:.0f} s; "
                    + ", ".join(f"{k} {v} s" for k, v in img.steps.items()) + f"; {TAG} {size}")
    yield img
    img.buildah.remove_storage()


def pytest_terminal_summary(terminalreporter):
    for line in _summary:
        terminalreporter.write_line(line)
