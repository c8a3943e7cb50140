"""The lab bundle for real: base 0.5.14 for Python 3.12 with the lab's pinned dependency list filtered by the lab
image's package list, in 57 MiB chunks (benchmark/lab/README.md), the kernel wheel replaced by a local stand-in of
the same layout (CI never downloads the 615 MB sglang-kernel). Downloads sglang / flashinfer (26 MB) and the 38
dependency wheels (~70 MB, xgrammar 45 MB of it) from PyPI once into the cache. With a Python 3.12 on the
machine, the chunks are staged separately and installed with install.sh, as on the lab."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from sglang_blackwell.artifacts.bundle import BundleOptions, make_bundle
from sglang_blackwell.artifacts.deps import read_pins
from sglang_blackwell.artifacts.strip import parse_strip
from sglang_blackwell.patchset.bases import get_base, load_base
from sglang_blackwell.paths import repo_root

from .bundle_fixtures import kernel_wheel, run_install

pytestmark = [pytest.mark.network, pytest.mark.slow]
LAB = (repo_root() or Path(__file__).resolve().parents[3]) / "benchmark" / "lab"
# our wheels' local label (sm120.N): bumped whenever the series changes, so read, never typed
LABEL = load_base(Path(__file__).resolve().parents[3] / "patches" / "0.5.14").local_label


def _python312() -> str | None:
    for c in (os.path.expanduser("~/.pyenv/versions/3.12.1/bin/python3.12"), shutil.which("python3.12")):
        if c and Path(c).exists():
            r = subprocess.run([c, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], capture_output=True,
                               text=True)
            if r.returncode == 0 and r.stdout.strip() == "3.12":
                return c
    return None


def test_lab_bundle_for_0_5_14_py312(tmp_path, monkeypatch):
    monkeypatch.delenv("SGLANG_BLACKWELL_PATCHES", raising=False)
    stand_in = kernel_wheel(tmp_path, version="0.4.4", lib_size=4096, tag="py3-none-any")
    opts = BundleOptions(python="3.12", strip=parse_strip("fa3,flashmla,sm100"),
                         deps=LAB / "bundle-deps-0.5.14-py312.txt", installed=LAB / "installed-lab-image.txt",
                         chunk_mib=57, kernel_wheel=stand_in)
    res = make_bundle(get_base("0.5.14"), tmp_path / "whl", opts)
    m = res.manifest
    patched = {f["distribution"]: f["version"] for f in m["files"] if f["kind"] == "patched"}
    assert patched == {"sglang": f"0.5.14+{LABEL}", "flashinfer-python": f"0.6.12+{LABEL}"}
    (kernel,) = [f for f in m["files"] if f["kind"] == "kernel"]
    assert kernel["version"] == "0.4.4+stripped.fa3.flashmla.sm100" and kernel["upstream"]["pinned"] is False
    deps = {f["distribution"]: f["version"] for f in m["files"] if f["kind"] == "dependency"}
    pins = {p.name: str(p.version) for p in read_pins(LAB / "bundle-deps-0.5.14-py312.txt")}
    assert deps == pins  # the image's transformers 5.17.0 / tokenizers 0.23.2 are rejected by sglang's pins
    assert {"transformers", "tokenizers"} <= set(deps)
    unmet = {u["name"] for u in m["dependencies"]["unmet"]}
    assert {"flash-attn-4", "torchao", "outlines"} <= unmet and "torch" not in unmet
    assert not {"xgrammar", "openai-harmony", "jiter"} & unmet  # carried: a normal launch imports them
    assert not {"datasets", "multiprocess"} & unmet  # carried: python -m sglang.bench_serving imports them
    assert m["dependencies"]["launch_path"]["missing"] == []
    assert m["dependencies"]["bench_serving"] == {**m["dependencies"]["bench_serving"], "known": 7, "missing": []}
    assert m["chunks"] == ["c1", "c2"]
    for name, size in res.chunks:
        assert size <= 57 * 2**20, (name, size)

    py = _python312()
    if py is None:
        pytest.skip("no Python 3.12 here to install the bundle with")
    r = run_install(res.out / "c1", "--stage", str(tmp_path / "stage"), "--stage-only", python=py)
    assert r.returncode == 0, r.stdout + r.stderr
    carry = tmp_path / "carry"
    shutil.copytree(res.out / "c2", carry / "c2")
    shutil.rmtree(res.out)
    site = tmp_path / "site"
    r = run_install(carry / "c2", "--stage", str(tmp_path / "stage"), "--target", str(site), python=py)
    assert r.returncode == 0, r.stdout + r.stderr
    probe = ("import importlib.metadata as m, json; print(json.dumps({d: m.version(d) for d in "
             "('sglang', 'flashinfer-python', 'sglang-kernel', 'transformers', 'tokenizers', 'xgrammar', "
             "'datasets', 'multiprocess')}))")
    out = subprocess.run([py, "-c", probe], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(site)})
    assert json.loads(out.stdout) == {"sglang": f"0.5.14+{LABEL}", "flashinfer-python": f"0.6.12+{LABEL}",
                                      "sglang-kernel": "0.4.4+stripped.fa3.flashmla.sm100",
                                      "transformers": "5.8.1", "tokenizers": "0.22.2", "xgrammar": "0.2.1",
                                      "datasets": "5.2.0", "multiprocess": "0.70.19"}, out.stderr
