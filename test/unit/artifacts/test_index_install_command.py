"""`sglang-blackwell index DIR` prints the command that installs exactly the indexed build, as `install` does: run
with real pip into a fresh venv, offline. pip's index is a local stand-in for PyPI that also offers what a user's
PyPI offers: newer plain sglang and flashinfer-python, plain torch 2.9.1 and sgl-kernel 0.3.21, a newer dependency
than the lock's; PyTorch's cu130 index and the sgl-project release are a local HTTP server. The printed command
installs our wheels, the lock's versions and the +cu130 builds, nothing else, and no "Location ... is ignored"
warning; the command `index` printed before (`--extra-index-url file://DIR/simple sglang flashinfer-python`) takes
PyPI's newer plain releases."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import venv
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from sglang_blackwell import cli
from sglang_blackwell.artifacts.build import build
from sglang_blackwell.artifacts.index import build_index
from sglang_blackwell.artifacts.index_install import plan_install, requirements_paths, write_install_commands
from sglang_blackwell.artifacts.install import hashes_path, install
from sglang_blackwell.artifacts.lock import Lock, LockEntry, Outside, inputs_digest, lock_path, lock_problems, write
from sglang_blackwell.errors import UserError
from sglang_blackwell.patchset.bases import get_base, load_base
from sglang_blackwell.patchset.labellock import write_lock
from support.fake_base import Patched, Runtime, render_base, wheel_pin
from support.wheel_world import ORIGINAL, gate_patch, make_wheel, sha256

from .bundle_fixtures import NORM_CU, norm_patch

PY = f"{sys.version_info[0]}.{sys.version_info[1]}"
KERNEL = "sgl_kernel-0.3.21+cu130-cp310-abi3-manylinux2014_x86_64.whl"
OURS = {"sglang": "0.0.1+sm120.7", "flashinfer-python": "0.0.2+sm120.7"}
# what `install` installs: ours, the lock's pins (depa 1.0, not PyPI's 2.0), the outside pins' +cu130 builds and
# what they need beyond the lock
EXPECTED = {**OURS, "depa": "1.0", "torch": "2.9.1+cu130", "sgl-kernel": "0.3.21+cu130",
            "nvidia-cuda-runtime": "13.0.96"}
INSTALLED = ("import importlib.metadata as m, json, re; print(json.dumps({re.sub(r'[-_.]+', '-', "
             "d.metadata['Name']).lower(): d.version for d in m.distributions()}))")


def _world(tmp: Path, server, monkeypatch) -> tuple[Path, list[Path], str]:
    """patches/9.9.9 (sglang + flashinfer, torch 2.9.1+cu130 and sgl-kernel 0.3.21+cu130 outside the index, as on
    0.5.9), built for real from a warm cache, its lock for this Python; returns (dist, wheels, PyPI's index URL)."""
    up = tmp / "upstream"
    up.mkdir()
    sg = make_wheel(up / "sglang-0.0.1-py3-none-any.whl", "sglang", "0.0.1",
                    {"sglang/__init__.py": b"", "sglang/gate.py": ORIGINAL},
                    requires=["flashinfer-python==0.0.2", "depa>=1.0", "torch==2.9.1", "sgl-kernel==0.3.21"])
    fi = make_wheel(up / "flashinfer_python-0.0.2-py3-none-any.whl", "flashinfer_python", "0.0.2",
                    {"flashinfer/__init__.py": b"", "flashinfer/data/csrc/norm.cu": NORM_CU}, requires=["torch"])
    cache = tmp / "cache"
    (cache / "artifacts").mkdir(parents=True)
    for w in (sg, fi):  # a warm download cache: build fetches nothing
        (cache / "artifacts" / w.name).write_bytes(w.read_bytes())
    torch = make_wheel(server.root / "torch-2.9.1+cu130-py3-none-any.whl", "torch", "2.9.1+cu130",
                       {"torch/__init__.py": b""}, requires=["nvidia-cuda-runtime==13.0.96"])
    kernel = make_wheel(server.root / KERNEL, "sgl_kernel", "0.3.21+cu130", {"sgl_kernel/__init__.py": b""},
                        tag="cp310-abi3-manylinux2014_x86_64")
    base = tmp / "patches" / "9.9.9"
    (base / "sglang").mkdir(parents=True)
    (base / "flashinfer").mkdir()
    (base / "base.toml").write_text(render_base(
        patched=[Patched("sglang", "sglang", "0.0.1", [wheel_pin(sg, server.url)]),
                 Patched("flashinfer", "flashinfer-python", "0.0.2", [wheel_pin(fi, server.url)])],
        runtime=[Runtime("torch", "2.9.1+cu130", "torch==2.9.1+cu130", f"{server.url}/simple/",
                         [{"filename": torch.name, "sha256": "unknown"}]),
                 Runtime("sgl-kernel", "0.3.21+cu130", f"sgl-kernel @ {server.url}/{KERNEL}", f"{server.url}/simple/",
                         [{"filename": KERNEL, "url": f"{server.url}/{KERNEL}", "sha256": sha256(kernel)}])]))
    (base / "sglang" / "0001-gate-accepts-12.patch").write_text(gate_patch())
    (base / "sglang" / "series").write_text("0001-gate-accepts-12.patch\n")
    (base / "flashinfer" / "0001-norm-tag.patch").write_text(norm_patch())
    (base / "flashinfer" / "series").write_text("0001-norm-tag.patch\n")
    write_lock(load_base(base))
    monkeypatch.setenv("SGLANG_BLACKWELL_PATCHES", str(tmp / "patches"))
    monkeypatch.setenv("SGLANG_BLACKWELL_CACHE", str(cache))
    monkeypatch.setenv("SGLANG_BLACKWELL_OFFLINE", "1")
    b = get_base("9.9.9")
    built, _ = build(b, tmp / "dist")
    # PyPI, as far as this build goes: the lock's depa 1.0 and a newer one, newer plain releases of our two, plain
    # builds of the outside pins (torch 2.9.1 is a CUDA 12 build on the real PyPI), the CUDA wheel torch +cu130 needs
    pypi = tmp / "pypi"
    pypi.mkdir()
    depa = make_wheel(pypi / "depa-1.0-py3-none-any.whl", "depa", "1.0", {"depa/__init__.py": b""})
    for name, ver, req in (("depa", "2.0", []), ("sglang", "0.0.9", ["depa", "torch"]),
                           ("flashinfer_python", "0.0.9", ["torch"]), ("torch", "2.9.1", []), ("torch", "2.10.0", []),
                           ("sgl_kernel", "0.3.21", []), ("nvidia_cuda_runtime", "13.0.96", [])):
        make_wheel(pypi / f"{name}-{ver}-py3-none-any.whl", name, ver, {f"{name}/__init__.py": b""}, requires=req)
    simple = build_index(sorted(pypi.glob("*.whl")), tmp / "pypi-index")
    lock = Lock(base="9.9.9", python=PY, platform="manylinux_2_28_x86_64", inputs=inputs_digest(b, PY),
                entries=[LockEntry("depa", "1.0", sha256(depa), ("sglang",))],
                outside=[Outside("torch==2.9.1+cu130", f"{server.url}/simple/", "no hash pinned"),
                         Outside(f"sgl-kernel @ {server.url}/{KERNEL}", f"{server.url}/simple/", "no hash pinned")],
                path=lock_path(b, PY))
    write(lock, f"sglang-blackwell lock --base 9.9.9 --python-version {PY}")
    assert lock_problems(b, PY) == []  # the lock is what `sglang-blackwell lock --check` accepts for this base
    return tmp / "dist", [w.path for w in built], f"file://{simple}"


def _pip(venv_py: Path, cmd: list[str], index_url: str, cwd: Path) -> subprocess.CompletedProcess:
    """Run a printed `pythonX.Y -m pip ...` command for the venv: this interpreter's pip with --python (the venv
    has no pip of its own), pip configured by nothing but PyPI's stand-in."""
    assert cmd[:3] == [f"python{PY}", "-m", "pip"], cmd
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_INDEX_URL=index_url, PIP_NO_CACHE_DIR="1",
               PIP_DISABLE_PIP_VERSION_CHECK="1")
    return subprocess.run([sys.executable, "-m", "pip", "--python", str(venv_py), *cmd[3:]], capture_output=True,
                          text=True, env=env, cwd=cwd, timeout=300)


def test_printed_command_installs_exactly_the_build_and_the_old_one_does_not(tmp_path, server, monkeypatch, capsys):
    dist, wheels, pypi = _world(tmp_path, server, monkeypatch)
    idx = tmp_path / "idx"
    assert cli.main(["index", str(idx), "--dist", str(dist)]) == 0  # what the user runs
    text = capsys.readouterr().out
    simple = idx / "simple"
    assert text.splitlines()[0] == f"# index: {simple.resolve()}"
    (plan,) = plan_install(idx, wheels)
    (py,) = plan.pythons
    assert (plan.base, py.python) == ("9.9.9", PY)
    assert f"# base 9.9.9 ({(dist / 'manifest-9.9.9.json').resolve()})" in text and py.line in text.splitlines()
    assert shlex.split(py.line) == [w for c in py.commands for w in (*c, "&&")][:-1]  # copy-pasteable
    lock_copy, pins = requirements_paths(idx.resolve(), "9.9.9", PY)
    b = get_base("9.9.9")
    ran = install(b, dist, python_exe=sys.executable, dry_run=True)  # what `install` runs, word for word
    same = {str(lock_path(b, PY)): str(lock_copy), str(hashes_path(b, dist, PY)): str(pins),
            sys.executable: f"python{PY}"}
    assert py.commands == [[same.get(w, w) for w in c] for c in ran]
    assert lock_copy.read_bytes() == lock_path(b, PY).read_bytes()
    assert f"sglang==0.0.1+sm120.7 \\\n    --hash=sha256:{sha256(dist / wheels[0].name)}" in pins.read_text()

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    venv_py = env_dir / "bin" / "python"
    elsewhere = tmp_path / "elsewhere"  # pip runs from another directory: the files name theirs (../files)
    elsewhere.mkdir()

    old = f"pip install --extra-index-url file://{simple.resolve()} sglang flashinfer-python"  # what index printed
    r = _pip(venv_py, [f"python{PY}", "-m", *shlex.split(old), "--dry-run", "--quiet", "--report", "-"], pypi,
             elsewhere)
    assert r.returncode == 0, r.stderr
    took = {canonicalize_name(i["metadata"]["name"]): i["metadata"]["version"] for i in json.loads(r.stdout)["install"]}
    assert (took["sglang"], took["flashinfer-python"], took["depa"], took["torch"]) == \
        ("0.0.9", "0.0.9", "2.0", "2.10.0"), took  # PyPI's newest plain releases, not our build
    assert "is ignored" in r.stderr  # one warning per project file://DIR/simple lacks (depa, torch)

    for cmd in py.commands:
        r = _pip(venv_py, cmd, pypi, elsewhere)
        assert r.returncode == 0, f"{shlex.join(cmd)}\n{r.stdout}\n{r.stderr}"
        assert "is ignored" not in r.stderr + r.stdout, r.stderr
    got = json.loads(subprocess.run([str(venv_py), "-c", INSTALLED], capture_output=True, text=True,
                                    check=True).stdout)
    assert got == EXPECTED
    assert server.hits.count(KERNEL) == 1  # the sgl-project wheel came by its URL


def test_no_command_for_a_stale_build_or_a_base_without_lock(tmp_path, server, monkeypatch):
    """Where `install` would rebuild (the label moved since the build) or refuse (no lock), `index` says so in a
    comment instead of printing a command that installs something else."""
    dist, wheels, _ = _world(tmp_path, server, monkeypatch)
    base_toml = tmp_path / "patches/9.9.9/base.toml"
    base_toml.write_text(base_toml.read_text().replace('"sm120.7"', '"sm120.8"'))
    (tmp_path / "patches/9.9.9/LABEL.lock").unlink()
    write_lock(load_base(base_toml.parent))
    (plan,) = plan_install(tmp_path / "idx", wheels)
    assert plan.pythons == [] and f"no install command for Python {PY}:" in plan.notes[0] and \
        "+sm120.7" in plan.notes[0] and "sglang-blackwell build --base 9.9.9" in plan.notes[0]
    lock_path(get_base("9.9.9"), PY).unlink()
    text = write_install_commands(tmp_path / "idx", wheels)
    assert not [ln for ln in text.splitlines() if not ln.startswith("#")], text
    assert "base 9.9.9 has no lock" in text and "sglang-blackwell lock --base 9.9.9" in text
    assert not (tmp_path / "idx" / "requirements").exists()


def test_a_planted_link_is_not_written_through(tmp_path, server, monkeypatch):
    """DIR/requirements/ a symbolic link (to somewhere the user did not name): refused, naming it, nothing written."""
    _, wheels, _ = _world(tmp_path, server, monkeypatch)
    idx = tmp_path / "idx"
    build_index(wheels, idx, built_only=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (idx / "requirements").symlink_to(outside)
    with pytest.raises(UserError, match=f"{idx / 'requirements'}: is not a directory of the index"):
        write_install_commands(idx, wheels)
    assert list(outside.iterdir()) == []
