"""Fixtures shared with the other tooling tests (test/support/wheel_world.py), and what this folder's tests build
once per run and share (support/shared_tmp.py: a directory every xdist worker of the run sees)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from support.shared_tmp import made_once_dir, run_dir
from support.venvs import venv_template, venv_with_pip
from support.wheel_world import Server, server, tiny_base  # noqa: F401 - pytest fixtures

if TYPE_CHECKING:
    from .bundle_fixtures import BundleWorld


@pytest.fixture(scope="session")
def shared_dir(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Path:
    """This run's directory for what the artifacts tests make once (made_once_dir) and then only read."""
    return run_dir(tmp_path_factory, request, "artifacts")


@pytest.fixture(scope="session")
def pip_venv(shared_dir: Path) -> Callable[[Path], Path]:
    """pip_venv(dest) -> the python of a fresh venv with pip at dest, the test's own (support/venvs.py)."""
    template = venv_template(shared_dir)
    return lambda dest: venv_with_pip(dest, template)


@pytest.fixture(scope="session")
def bundle_template(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Server]]:
    """(template, server): bundle_fixtures.make_locked_world made once per worker (not per run: its base pins
    the URLs of this worker's `server`, which lives as long as the worker's session), for world_copy."""
    from .bundle_fixtures import PY, make_locked_world

    d = tmp_path_factory.getbasetemp() / "bundle-world"
    served = d / "served"
    served.mkdir(parents=True, exist_ok=True)
    s = Server(served)
    try:
        yield made_once_dir(d, f"template-py{PY}-{s.url.rsplit(':', 1)[1]}",
                            lambda t: make_locked_world(t, s, PY)), s
    finally:
        s.close()


@pytest.fixture
def world(tmp_path: Path, bundle_template: tuple[Path, Server], monkeypatch: pytest.MonkeyPatch) -> BundleWorld:
    """The bundle tests' world, as make_world + lock_world make it in tmp_path: a copy of the worker's template
    (bundle_fixtures.world_copy says what it holds), the test's own. test_aot.py has a world of its own."""
    from .bundle_fixtures import isolated_pip_env, world_copy

    template, template_server = bundle_template
    w = world_copy(template, tmp_path, template_server)
    monkeypatch.setenv("SGLANG_BLACKWELL_PATCHES", str(w.base.parent))
    monkeypatch.setenv("SGLANG_BLACKWELL_CACHE", str(tmp_path / "cache"))
    isolated_pip_env(monkeypatch)
    return w
