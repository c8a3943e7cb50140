"""The release index (release.yml `pages`): <pages>/whl/cu130/ is the PEP 503 root (--simple-at-root) and links
every release's wheels where they live (--url-template, here file:// URLs standing in for GitHub release assets);
pip installs from it. A file name published twice with other bytes fails, or with --keep-first the oldest wins."""

from __future__ import annotations

import os
import subprocess

import pytest

from sglang_blackwell.artifacts.index import build_index
from sglang_blackwell.errors import UserError
from support.wheel_world import make_wheel


def _wheel(d, version, payload=b""):
    d.mkdir(parents=True, exist_ok=True)
    return make_wheel(d / f"demo_pkg-{version}-py3-none-any.whl", "demo-pkg", version,
                      {"demo_pkg/__init__.py": b"V = 1\n" + payload})


@pytest.mark.slow
def test_pip_installs_from_the_release_index(tmp_path, pip_venv):
    rel = tmp_path / "releases"
    _wheel(rel / "v0.1.0", "1.0+sm120.1")
    _wheel(rel / "v0.2.0", "1.0+sm120.2")
    wheels = sorted(rel.rglob("*.whl"))
    root = build_index(wheels, tmp_path / "site/whl/cu130", simple_at_root=True,
                       url_template=f"file://{rel}/{{dir}}/{{file}}")
    assert root == tmp_path / "site/whl/cu130"
    page = (root / "demo-pkg" / "index.html").read_text()
    assert f'href="file://{rel}/v0.1.0/demo_pkg-1.0+sm120.1-py3-none-any.whl#sha256=' in page
    assert not (tmp_path / "site/whl/cu130/files").exists()  # linked, not copied
    py = pip_venv(tmp_path / "venv")  # a venv with pip, as venv.EnvBuilder(with_pip=True) makes it
    r = subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-cache-dir", "--index-url", f"file://{root}",
                        "demo-pkg==1.0+sm120.1"], capture_output=True, text=True,
                       env={**os.environ, "PIP_CONFIG_FILE": os.devnull})
    assert r.returncode == 0, r.stderr
    out = subprocess.run([str(py), "-c", "import importlib.metadata as m; print(m.version('demo-pkg'))"],
                         capture_output=True, text=True).stdout.strip()
    assert out == "1.0+sm120.1"


def test_same_name_other_bytes(tmp_path):
    a = _wheel(tmp_path / "v1", "1.0+sm120.1")
    b = _wheel(tmp_path / "v2", "1.0+sm120.1", payload=b"# rebuilt\n")
    with pytest.raises(UserError, match="two different wheels named demo_pkg-1.0\\+sm120.1-py3-none-any.whl"):
        build_index([a, b], tmp_path / "idx", url_template="https://x/{dir}/{file}")
    warned = []
    root = build_index([a, b], tmp_path / "idx", url_template="https://x/{dir}/{file}", keep_first=True,
                       warn=warned.append)
    assert "https://x/v1/demo_pkg" in (root / "demo-pkg/index.html").read_text() and len(warned) == 1
