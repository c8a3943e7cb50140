"""Patched wheels: local version label, rewritten requirements, a correct RECORD, byte-identical rebuilds,
all-or-nothing output (a failing patch or a killed build leaves no wheel and no cache entry)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import zipfile

import pytest

from sglang_blackwell.artifacts.build import build
from sglang_blackwell.artifacts.wheel import check_record, wheel_version_ok
from sglang_blackwell.errors import ApplyError, UserError
from sglang_blackwell.patchset.bases import get_base
from support.wheel_check import installer_problems
from support.wheel_world import ORIGINAL, PATCHED, make_wheel, relock, sha256


def test_build_tiny_base(tiny_base, tmp_path):
    built, manifest = build(get_base("9.9.9"), tmp_path / "dist")
    (w,) = built
    assert w.path.name == "sglang-0.0.1+sm120.7-py3-none-any.whl"
    assert check_record(w.path) == [] and wheel_version_ok(w.path)
    assert installer_problems(w.path) == []  # an independent reader agrees
    with zipfile.ZipFile(w.path) as z:
        assert z.read("sglang/gate.py") == PATCHED
        meta = z.read("sglang-0.0.1+sm120.7.dist-info/METADATA").decode()
        marker = json.loads(z.read("sglang-0.0.1+sm120.7.dist-info/sglang_blackwell.json"))
    assert "Version: 0.0.1+sm120.7" in meta
    assert "Requires-Dist: flashinfer_python==0.6.4" in meta and "flashinfer_python==0.6.3" not in meta
    assert "Requires-Dist: numpy" in meta
    assert [p["logical_id"] for p in marker["patches"]] == ["P9"]
    m = json.loads(manifest.read_text())
    assert m["base"] == "9.9.9"
    (pkg,) = m["packages"]
    assert pkg["wheels"][0]["output"]["sha256"] == sha256(w.path) == w.sha256
    assert pkg["wheels"][0]["upstream"]["sha256"] == get_base("9.9.9").package("sglang").files[0].sha256
    assert pkg["patches"][0]["sha256"] == sha256(tiny_base / "sglang" / "0001-gate-accepts-12.patch")


def test_rebuild_is_byte_identical(tiny_base, tmp_path):
    (a,), _ = build(get_base("9.9.9"), tmp_path / "d1")
    time.sleep(1.1)  # a different wall clock second must not leak into the zip
    (b,), _ = build(get_base("9.9.9"), tmp_path / "d2")
    assert a.path.read_bytes() == b.path.read_bytes()


def test_patch_that_no_longer_applies_names_patch_and_hunk(tiny_base, server, tmp_path):
    whl = make_wheel(server.root / "sglang-0.0.1-py3-none-any.whl", "sglang", "0.0.1",
                     {"sglang/__init__.py": b"", "sglang/gate.py": ORIGINAL.replace(b"(9, 10)", b"(8, 9, 10)")},
                     requires=["flashinfer_python==0.6.3"])
    toml = tiny_base / "base.toml"
    text = toml.read_text()
    old_sha = get_base("9.9.9").package("sglang").files[0].sha256
    old_size = get_base("9.9.9").package("sglang").files[0].size
    toml.write_text(text.replace(old_sha, sha256(whl)).replace(f"size = {old_size}", f"size = {whl.stat().st_size}"))
    relock(tiny_base)
    with pytest.raises(ApplyError) as e:
        build(get_base("9.9.9"), tmp_path / "dist")
    assert e.value.patch == "0001-gate-accepts-12.patch" and e.value.hunk == 1
    assert not list((tmp_path / "dist").glob("*.whl")) and not list((tmp_path / "dist").glob("*.json"))


def test_rewrite_of_a_requirement_upstream_dropped_is_an_error(tiny_base, tmp_path):
    toml = tiny_base / "base.toml"
    toml.write_text(toml.read_text().replace('"flashinfer_python" = "flashinfer_python==0.6.4"',
                                             '"cuda-python" = "cuda-python~=13.0"'))
    relock(tiny_base)
    with pytest.raises(UserError, match=r"requires_rewrite names \['cuda-python'\]"):
        build(get_base("9.9.9"), tmp_path / "dist")
    assert not list((tmp_path / "dist").glob("*.whl"))


def test_killed_build_leaves_no_wheel_and_no_cache_entry(tiny_base, server, tmp_path):
    """SIGKILL while the upstream wheel downloads (slowly): nothing half-written becomes visible; the next
    build succeeds and sweeps the dead build's temp directory."""
    art = get_base("9.9.9").package("sglang").files[0]
    # make the served wheel big enough to be slow
    big = make_wheel(server.root / art.filename, "sglang", "0.0.1",
                     {"sglang/__init__.py": b"", "sglang/gate.py": ORIGINAL, "sglang/blob.bin": os.urandom(200_000)},
                     requires=["flashinfer_python==0.6.3"])
    toml = tiny_base / "base.toml"
    toml.write_text(toml.read_text().replace(art.sha256, sha256(big)).replace(f"size = {art.size}",
                                                                                f"size = {big.stat().st_size}"))
    relock(tiny_base)
    server.slow[art.filename] = 0.02
    dist = tmp_path / "dist"
    proc = subprocess.Popen([sys.executable, "-m", "sglang_blackwell.cli", "build", "--out", str(dist)],
                            env=dict(os.environ), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    partial = tmp_path / "cache" / ".partial"
    deadline = time.time() + 30
    while time.time() < deadline and not (partial.is_dir() and any(partial.iterdir())
                                          and art.filename in server.hits):
        time.sleep(0.05)
    assert partial.is_dir() and any(partial.iterdir()), "the build never started downloading"
    time.sleep(0.5)  # mid-download: the slow server needs ~4 s for the whole file
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not list(dist.glob("*.whl")) and not list(dist.glob("*.json"))
    assert not (tmp_path / "cache" / "artifacts").exists() or not list((tmp_path / "cache" / "artifacts").iterdir())
    assert list(partial.iterdir()), "the killed download's directory is there (what the next fetch must sweep)"
    server.slow.clear()
    (w,), _ = build(get_base("9.9.9"), dist)
    assert w.path.exists() and not list(dist.glob(".sglang-blackwell-tmp-*"))
    assert not list(partial.iterdir()), f"the killed download's files are left forever: {list(partial.iterdir())}"


@pytest.mark.network
def test_default_base_wheels_carry_the_series(tmp_path, monkeypatch):
    """The real default base (0.5.14), built for this Python: both wheels, each patched file differs from
    upstream, RECORD valid, and the series carries the split-KV kernels 0.5.9 lacks (P8, P11), P9 and P13."""
    monkeypatch.delenv("SGLANG_BLACKWELL_PATCHES", raising=False)
    monkeypatch.delenv("SGLANG_BLACKWELL_CACHE", raising=False)
    base = get_base(None)
    assert base.name == "0.5.14"
    py = f"{sys.version_info[0]}.{sys.version_info[1]}"
    tag = f"cp{py.replace('.', '')}"
    built, manifest = build(base, tmp_path / "dist", python=py)
    names = sorted(w.path.name for w in built)
    label = base.local_label  # sm120.N: bumped whenever the series changes (labellock.py)
    assert names == [f"flashinfer_python-0.6.12+{label}-py3-none-any.whl",
                     f"sglang-0.5.14+{label}-{tag}-{tag}-manylinux_2_34_x86_64.whl"]
    for w in built:
        assert check_record(w.path) == [] and wheel_version_ok(w.path)
        assert installer_problems(w.path) == []  # an independent reader agrees
    with zipfile.ZipFile(tmp_path / "dist" / names[1]) as z:
        assert "layers/attention/triton_ops/verify_shared_kv.py" in " ".join(z.namelist())  # P8's kernel
    m = json.loads(manifest.read_text())
    carried = {p["logical_id"] for pkg in m["packages"] for p in pkg["patches"]}
    assert carried == {f"P{i}" for i in range(1, 15)} - {"P3"}  # P3 is upstream's own in 0.5.14


@pytest.mark.network
def test_older_base_wheels_carry_the_series_and_the_cuda13_requirements(tmp_path, monkeypatch):
    """The older line, 0.5.9 (py3-none-any wheels): each patched file differs from upstream, RECORD valid, and
    METADATA requires what the base ships (flashinfer 0.6.4, cuda-python 13), not sglang's CUDA 12 pins."""
    monkeypatch.delenv("SGLANG_BLACKWELL_PATCHES", raising=False)
    monkeypatch.delenv("SGLANG_BLACKWELL_CACHE", raising=False)
    base = get_base("0.5.9")
    built, manifest = build(base, tmp_path / "dist")
    names = sorted(w.path.name for w in built)
    label = base.local_label
    assert names == [f"flashinfer_python-0.6.4+{label}-py3-none-any.whl", f"sglang-0.5.9+{label}-py3-none-any.whl"]
    for w in built:
        assert check_record(w.path) == [] and wheel_version_ok(w.path)
        assert installer_problems(w.path) == []  # an independent reader agrees
    with zipfile.ZipFile(tmp_path / "dist" / names[1]) as z:
        meta = z.read(f"sglang-0.5.9+{label}.dist-info/METADATA").decode()
        assert "_is_sm120_supported = _is_cuda and is_sm120_supported()" in z.read(
            "sglang/srt/layers/communicator.py").decode()
    assert "Requires-Dist: flashinfer_python==0.6.4" in meta and "Requires-Dist: flashinfer_cubin==0.6.4" in meta
    assert "Requires-Dist: cuda-python~=13.0" in meta and "cuda-python==12.9" not in meta
    m = json.loads(manifest.read_text())
    carried = {p["logical_id"] for pkg in m["packages"] for p in pkg["patches"]}
    assert carried == {*(f"P{i}" for i in range(1, 8)), "P10", "P12", "P14"}
