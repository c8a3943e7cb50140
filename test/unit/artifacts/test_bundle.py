"""`sglang-blackwell bundle`: the kernel strip (RECORD, version label, reproducible, pip installs it), the
manifest + install.sh (a tampered or missing file refuses everything), chunks staged at different times, the
dependency choice against the target's installed list, atomic output. Everything runs for real: the local HTTP
server serves the base's wheels, pip downloads from a local PEP 503 index, install.sh runs under bash and pip
installs into real directories / venvs. No internet (see test_bundle_network.py for the real 0.5.14 base)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from sglang_blackwell.artifacts.bundle import BundleOptions, make_bundle
from sglang_blackwell.artifacts.deps import Target, read_installed, read_pins
from sglang_blackwell.artifacts.strip import load_parts, parse_strip, strip_kernel_wheel
from sglang_blackwell.artifacts.wheel import check_record, wheel_version_ok
from sglang_blackwell.cli import main as cli_main
from sglang_blackwell.errors import IntegrityError, UserError
from sglang_blackwell.patchset.bases import get_base
from support.wheel_check import installer_problems
from support.wheel_world import PATCHED, sha256

from .bundle_fixtures import PY, kernel_wheel, run_install


def _bundle(world, out: Path, **kw) -> dict:
    opts = BundleOptions(python=kw.pop("python", PY), index_url=world.index, **kw)
    return make_bundle(get_base("9.9.9"), out, opts).manifest


def _pins(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "deps.txt"
    p.write_text(text)
    return p


# ---------------------------------------------------------------- strip

def test_strip_rewrites_record_relabels_and_is_reproducible(tmp_path):
    src = kernel_wheel(tmp_path)
    a = strip_kernel_wheel(src, tmp_path / "a", parse_strip("sm100,fa3"))
    b = strip_kernel_wheel(src, tmp_path / "b", parse_strip("fa3,sm100"))
    assert a.path.name == "sglang_kernel-0.0.1+stripped.fa3.sm100-cp310-abi3-manylinux2014_x86_64.whl"
    assert a.sha256 == b.sha256 == sha256(b.path)  # byte-reproducible, order of --strip irrelevant
    assert check_record(a.path) == [] and wheel_version_ok(a.path)
    assert installer_problems(a.path) == []  # an independent reader agrees
    with zipfile.ZipFile(a.path) as z:
        names = set(z.namelist())
        record = z.read("sglang_kernel-0.0.1+stripped.fa3.sm100.dist-info/RECORD").decode()
        marker = json.loads(z.read("sglang_kernel-0.0.1+stripped.fa3.sm100.dist-info/sglang_blackwell.json"))
    assert "sgl_kernel/flash_ops.abi3.so" not in names and not any(n.startswith("sgl_kernel/sm100/") for n in names)
    assert {"sgl_kernel/flashmla_ops.abi3.so", "sgl_kernel/sm90/common_ops.abi3.so"} <= names
    assert "flash_ops" not in record and "sm100" not in record.replace("stripped.fa3.sm100", "")
    assert marker["upstream_sha256"] == sha256(src) and marker["stripped"] == ["fa3", "sm100"]
    assert [r["path"] for r in marker["removed"]] == ["sgl_kernel/flash_ops.abi3.so",
                                                      "sgl_kernel/sm100/common_ops.abi3.so"]


def test_stripped_wheel_installs_into_a_real_venv(tmp_path):
    from pyenvs import make_venv, site_packages

    s = strip_kernel_wheel(kernel_wheel(tmp_path), tmp_path / "out", parse_strip("fa3,flashmla,sm100"))
    py = make_venv(tmp_path / "venv")
    r = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "--no-index",
                        "-q", str(s.path)], capture_output=True, text=True,
                       env={**os.environ, "PIP_CONFIG_FILE": os.devnull})
    assert r.returncode == 0, r.stderr
    ver = subprocess.run([str(py), "-c", "import importlib.metadata as m; print(m.version('sglang-kernel'))"],
                         capture_output=True, text=True).stdout.strip()
    assert ver == "0.0.1+stripped.fa3.flashmla.sm100"
    sp = site_packages(py)
    assert (sp / "sgl_kernel/sm90/common_ops.abi3.so").exists()
    assert not (sp / "sgl_kernel/flash_ops.abi3.so").exists() and not (sp / "sgl_kernel/sm100").exists()
    # pip's own check of RECORD-vs-installed: uninstall removes exactly what was installed
    r = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "uninstall", "-y", "sglang-kernel"],
                       capture_output=True, text=True, env={**os.environ, "PIP_CONFIG_FILE": os.devnull})
    assert r.returncode == 0, r.stderr
    assert not (sp / "sgl_kernel").exists()


def test_strip_refuses_unknown_parts_and_parts_that_match_nothing(tmp_path):
    with pytest.raises(UserError, match=r"--strip fa4: unknown part\(s\) fa4 \(known: fa3, flashmla, sm100"):
        parse_strip("fa4")
    w = kernel_wheel(tmp_path)
    with zipfile.ZipFile(w) as z:
        files = {n: z.read(n) for n in z.namelist() if "flash_ops" not in n and ".dist-info/" not in n}
    from support.wheel_world import make_wheel

    (tmp_path / "x").mkdir()
    other = make_wheel(tmp_path / "x" / w.name, "sglang_kernel", "0.0.1", files, tag="cp310-abi3-manylinux2014_x86_64")
    with pytest.raises(UserError, match=r"--strip fa3: nothing in sglang_kernel-0.0.1-.*matches sgl_kernel/flash_ops"):
        strip_kernel_wheel(other, tmp_path / "out", parse_strip("fa3"))
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def test_kernel_parts_are_data():
    parts = load_parts()
    assert parts["fa3"].matches("sgl_kernel/flash_ops.abi3.so")
    assert parts["flashmla"].matches("sgl_kernel/flashmla_ops.abi3.so")
    assert parts["sm100"].matches("sgl_kernel/sm100/common_ops.abi3.so")
    assert not parts["sm100"].matches("sgl_kernel/sm90/common_ops.abi3.so")
    assert not parts["fa3"].matches("sgl_kernel/flashmla_ops.abi3.so")


# ---------------------------------------------------------------- manifest + install.sh

def test_bundle_installs_and_a_tampered_file_refuses_everything(world, tmp_path):
    out = tmp_path / "bundle"
    deps = _pins(tmp_path, "depa==2.0\ndepb==1.0\ndepc==1.1\n")
    m = _bundle(world, out, strip=parse_strip("fa3,sm100"), deps=deps)
    kinds = {f["path"]: f["kind"] for f in m["files"]}
    assert kinds == {"wheels/sglang-0.0.1+sm120.7-py3-none-any.whl": "patched",
                     "wheels/flashinfer_python-0.0.2+sm120.7-py3-none-any.whl": "patched",
                     "wheels/sglang_kernel-0.0.1+stripped.fa3.sm100-cp310-abi3-manylinux2014_x86_64.whl": "kernel",
                     "wheels/depa-2.0-py3-none-any.whl": "dependency", "wheels/depb-1.0-py3-none-any.whl": "dependency",
                     "wheels/depc-1.1-py3-none-any.whl": "dependency"}
    for f in m["files"]:
        assert sha256(out / f["path"]) == f["sha256"] and (out / f["path"]).stat().st_size == f["size"]
    kernel = next(f for f in m["files"] if f["kind"] == "kernel")
    assert kernel["stripped"] == ["fa3", "sm100"] and kernel["upstream"]["sha256"] == sha256(world.kernel)
    assert kernel["upstream"]["pinned"] is True
    assert m["base"] == "9.9.9" and m["python"] == PY and m["python_tag"] == f"cp{PY.replace('.', '')}"
    assert json.loads((out / "manifest.json").read_text())["bundle_id"] == m["bundle_id"]

    # tamper: flip one byte of the kernel wheel -> exit 4, the file named, nothing installed
    target = tmp_path / "site"
    kw = out / kernel["path"]
    data = bytearray(kw.read_bytes())
    data[len(data) // 2] ^= 0xFF
    good = kw.read_bytes()
    kw.write_bytes(bytes(data))
    r = run_install(out, "--target", str(target))
    assert r.returncode == 4, r.stdout + r.stderr
    assert kernel["path"] in r.stderr and "sha256" in r.stderr and "nothing was staged or installed" in r.stderr
    assert not target.exists()

    # a missing file -> exit 3, nothing installed
    kw.unlink()
    r = run_install(out, "--target", str(target))
    assert r.returncode == 3 and "1 files missing" in r.stderr and kernel["path"] in r.stderr
    assert not target.exists()

    # intact -> installed; the patched code is what imports
    kw.write_bytes(good)
    r = run_install(out, "--target", str(target))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "6 of 6 files present and verified" in r.stdout and f"export PYTHONPATH={target}" in r.stdout
    probe = ("import importlib.metadata as m, sglang.gate as g, depa; "
             "print(g.gate(12), m.version('sglang'), m.version('sglang-kernel'), depa.V)")
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(target)})
    assert res.stdout.split() == ["True", "0.0.1+sm120.7", "0.0.1+stripped.fa3.sm100", "2.0"], res.stderr
    assert (target / "sglang/gate.py").read_bytes() == PATCHED
    assert not (target / "sgl_kernel/flash_ops.abi3.so").exists()
    r = run_install(out, "--target", str(target))
    assert r.returncode == 0 and "already installed" in r.stdout


def test_install_refuses_another_python(world, tmp_path):
    out = tmp_path / "bundle"
    _bundle(world, out, python="3.99", no_kernel=True)
    r = run_install(out, "--target", str(tmp_path / "site"))
    assert r.returncode == 2 and "this bundle is for Python 3.99" in r.stderr
    assert not (tmp_path / "site").exists()


def test_same_inputs_same_bundle_bytes(world, tmp_path):
    deps = _pins(tmp_path, "depa==2.0\ndepb==1.0\ndepc==1.1\n")
    a = _bundle(world, tmp_path / "a", strip=parse_strip("fa3"), deps=deps, chunk_mib=0.7)
    b = _bundle(world, tmp_path / "b", strip=parse_strip("fa3"), deps=deps, chunk_mib=0.7)
    assert a == b and a["chunks"] == ["c1", "c2"]

    def tree(d):
        return {str(p.relative_to(d)): sha256(p) for p in sorted(d.rglob("*")) if p.is_file()}

    assert tree(tmp_path / "a") == tree(tmp_path / "b")


# ---------------------------------------------------------------- chunks

def test_chunks_travel_separately_and_install_from_the_stage(world, tmp_path):
    out = tmp_path / "bundle"
    deps = _pins(tmp_path, "depa==2.0\ndepb==1.0\ndepc==1.1\n")
    m = _bundle(world, out, deps=deps, chunk_mib=0.9)  # kernel wheel 0.72 MiB, depa 0.2 MiB: two chunks
    assert m["chunks"] == ["c1", "c2"] and sorted(p.name for p in out.iterdir()) == ["c1", "c2"]
    for c in m["chunks"]:
        size = sum(p.stat().st_size for p in (out / c).rglob("*") if p.is_file())
        assert size <= 0.9 * 2**20
        assert json.loads((out / c / "manifest.json").read_text())["chunk"] == c
    # call 1: only c1 on the machine
    carry1, carry2, stage, target = (tmp_path / n for n in ("carry1", "carry2", "stage", "site"))
    shutil.copytree(out / "c1", carry1 / "c1")
    r = run_install(carry1 / "c1", "--verify-only")
    assert r.returncode == 3 and "still missing" in r.stdout, r.stdout + r.stderr
    r = run_install(carry1 / "c1", "--stage", str(stage), "--stage-only")
    assert r.returncode == 0 and "still missing" in r.stdout and "c2" in r.stdout, r.stdout + r.stderr
    r = run_install(carry1 / "c1", "--stage", str(stage), "--target", str(target))
    assert r.returncode == 3 and "chunk(s) c2 not here" in r.stderr and not target.exists()
    shutil.rmtree(carry1)  # the carry of call 1 is gone; the stage stays
    # call 2: only c2 arrives
    shutil.copytree(out / "c2", carry2 / "c2")
    r = run_install(carry2 / "c2", "--stage", str(stage), "--target", str(target))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "6 of 6 files present" in r.stdout
    assert (target / "sgl_kernel/sm100/common_ops.abi3.so").exists() and (target / "depc").is_dir()
    # a tampered staged file is caught on the next run
    staged = stage / m["bundle_id"][:16]
    victim = next(f for f in m["files"] if f["chunk"] == "c1")
    (staged / victim["path"]).write_bytes(b"x")
    r = run_install(carry2 / "c2", "--stage", str(stage), "--target", str(tmp_path / "site2"))
    assert r.returncode == 4 and victim["path"] in r.stderr and not (tmp_path / "site2").exists()


def test_chunks_side_by_side_install_without_a_stage(world, tmp_path):
    out = tmp_path / "bundle"
    _bundle(world, out, deps=_pins(tmp_path, "depa==2.0\ndepb==1.0\ndepc==1.1\n"), chunk_mib=0.9)
    assert sorted(p.name for p in out.iterdir()) == ["c1", "c2"]
    r = run_install(out / "c2", "--target", str(tmp_path / "site"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "site/sglang/gate.py").read_bytes() == PATCHED


def test_every_chunk_passes_the_check_line_and_the_id_covers_the_installer(world, tmp_path):
    """The `check first:` line (sha256sum -c, nothing from the bundle) holds for every chunk and for the staged copy
    (the same installer bytes); the manifest, hence the id, records those bytes; the chunks stage then install."""
    from sglang_blackwell.artifacts.bundle import check_line, installer_files

    out = tmp_path / "bundle"
    m = _bundle(world, out, deps=_pins(tmp_path, "depa==2.0\ndepb==1.0\ndepc==1.1\n"), chunk_mib=0.9)
    assert m["installer"] == {n: {"size": len(b), "sha256": hashlib.sha256(b).hexdigest()}
                              for n, b in installer_files().items()}
    stage = tmp_path / "stage"
    for c in m["chunks"]:
        r = subprocess.run(["bash", "-c", check_line(str(out / c), m)], capture_output=True, text=True)
        assert r.returncode == 0 and r.stdout == "install.sh: OK\ninstall_bundle.py: OK\n", r.stdout + r.stderr
        r = run_install(out / c, "--stage", str(stage), "--expect-id", m["bundle_id"][:16],
                        *(["--stage-only"] if c == "c1" else ["--target", str(tmp_path / "site")]))
        assert r.returncode == 0, r.stdout + r.stderr
    staged = stage / m["bundle_id"][:16]
    assert subprocess.run(["bash", "-c", check_line(str(staged), m)], capture_output=True).returncode == 0
    assert (tmp_path / "site/sglang/gate.py").read_bytes() == PATCHED
    (out / "c2" / "install.sh").write_text((out / "c2" / "install.sh").read_text() + "# edited\n")
    r = subprocess.run(["bash", "-c", check_line(str(out / "c2"), m)], capture_output=True, text=True)
    assert r.returncode == 1 and "install.sh: FAILED" in r.stdout


def test_a_file_too_big_for_a_chunk_is_named(world, tmp_path):
    with pytest.raises(UserError, match=r"--chunk-mib 0.5: wheels/sglang_kernel-.* alone is"):
        _bundle(world, tmp_path / "b", chunk_mib=0.5)
    assert not (tmp_path / "b").exists()
    assert [p.name for p in tmp_path.iterdir() if ".bundle-" in p.name] == []


# ---------------------------------------------------------------- dependencies

def test_deps_file_filtered_by_the_installed_list(world, tmp_path):
    installed = tmp_path / "installed.txt"
    # depa 1.5 satisfies sglang's depa>=1.0 -> not carried; depc 1.0 fails depb's depc>=1.1 -> carried
    installed.write_text("torch==2.11.0+cu130\ndepa==1.5\ndepc==1.0\nsomething-else @ file:///x\n")
    deps = _pins(tmp_path, "# lab list\ndepa==2.0\ndepb==1.0\ndepc==1.1\n")
    m = _bundle(world, tmp_path / "b", deps=deps, installed=installed, no_kernel=True)
    carried = sorted(f["distribution"] for f in m["files"] if f["kind"] == "dependency")
    assert carried == ["depb", "depc"]
    d = m["dependencies"]
    assert d["mode"] == "deps-file" and d["dropped"] == [{"name": "depa", "version": "2.0", "installed": "1.5"}]
    depc = next(f for f in m["files"] if f["distribution"] == "depc")
    assert depc["required_by"] == ["depb 1.0"] and depc["source"].endswith("deps.txt:4")
    # torch is installed and accepted; the kernel was left out on purpose and nothing else provides it
    assert [u["name"] for u in d["unmet"]] == ["sglang-kernel"]


def test_installed_kernel_is_not_carried(world, tmp_path):
    installed = tmp_path / "installed.txt"
    installed.write_text("torch==2.11.0\nsglang-kernel==0.0.1\ndepa==2.0\ndepb==1.0\ndepc==1.1\n")
    m = _bundle(world, tmp_path / "b", installed=installed, deps=_pins(tmp_path, "depb==1.0\n"))
    assert sorted(f["kind"] for f in m["files"]) == ["patched", "patched"]
    assert m["dependencies"]["unmet"] == []


def test_automatic_choice_walks_requires_dist_at_the_locks_versions(world, tmp_path):
    installed = tmp_path / "installed.txt"
    installed.write_text("torch==2.11.0\ndepc==1.0\n")
    m = _bundle(world, tmp_path / "b", installed=installed, no_kernel=True)
    carried = {f["distribution"]: f["version"] for f in m["files"] if f["kind"] == "dependency"}
    # the lock's depa 2.0 (the target has none); depb; depc 1.1 because depb needs >=1.1 and the target's 1.0
    # fails it; depwin's marker is false on linux
    assert carried == {"depa": "2.0", "depb": "1.0", "depc": "1.1"}
    assert m["dependencies"]["mode"] == "automatic"
    installed.write_text("depc==1.0\n")
    with pytest.raises(UserError, match="no torch"):
        _bundle(world, tmp_path / "c", installed=installed, no_kernel=True)


def test_a_pin_that_disagrees_with_the_lock_is_an_error_naming_the_line(world, tmp_path):
    deps = _pins(tmp_path, "depb==1.0\ndepc==1.0\n")  # depb needs depc>=1.1: the lock says depc==1.1
    with pytest.raises(UserError, match=r"--deps .*deps.txt:2: depc==1.0 disagrees with the lock .*patches/9.9.9/"
                                        rf"locks/py{PY.replace('.', '')}.txt, which pins depc==1.1"):
        _bundle(world, tmp_path / "b", deps=deps, no_kernel=True)
    with pytest.raises(UserError, match=r"deps.txt:1: depwin==1.0 is not in the lock .*no patched wheel of base "
                                        r"9.9.9 needs depwin"):
        _bundle(world, tmp_path / "b", deps=_pins(tmp_path, "depwin==1.0\n"), no_kernel=True)
    assert not (tmp_path / "b").exists()
    with pytest.raises(UserError, match=r"deps.txt:1: 'depb>=1.0' is not an exact pin"):
        read_pins(_pins(tmp_path, "depb>=1.0\n"))
    bad = tmp_path / "installed.txt"
    bad.write_text("torch==2.11.0\n???\n")
    with pytest.raises(UserError, match=r"--installed .*installed.txt:2: cannot read '\?\?\?'"):
        read_installed(bad)


def test_other_bytes_under_a_locked_name_fail_and_leave_nothing(world, tmp_path):
    out = tmp_path / "b"
    _bundle(world, out, no_kernel=True)
    before = sha256(out / "manifest.json")
    from support.wheel_world import make_wheel

    make_wheel(tmp_path / "index" / "files" / "depa-2.0-py3-none-any.whl", "depa", "2.0", {"depa/x.py": b"EVIL"})
    with pytest.raises(UserError, match=r"pip download failed for depa==2.0"):
        _bundle(world, out, deps=_pins(tmp_path, "depa==2.0\n"), no_kernel=True)
    assert sha256(out / "manifest.json") == before  # the previous bundle is intact
    assert [p.name for p in tmp_path.iterdir() if ".bundle-" in p.name] == []
    assert not (tmp_path / "cache" / "wheelhouse" / "depa-2.0-py3-none-any.whl").exists()


def test_a_wheelhouse_file_is_reused_only_with_the_locked_hash(world, tmp_path):
    from support.wheel_world import make_wheel

    house = tmp_path / "cache" / "wheelhouse"
    house.mkdir(parents=True)
    make_wheel(house / "depa-2.0-py3-none-any.whl", "depa", "2.0", {"depa/x.py": b"stale"})
    m = _bundle(world, tmp_path / "b", deps=_pins(tmp_path, "depa==2.0\n"), no_kernel=True)
    (f,) = [f for f in m["files"] if f["distribution"] == "depa"]
    assert f["sha256"] == sha256(tmp_path / "index" / "files" / "depa-2.0-py3-none-any.whl")
    assert m["dependencies"]["lock"]["path"] == f"patches/9.9.9/locks/py{PY.replace('.', '')}.txt"


def test_no_lock_for_the_target_python_names_the_fix(world, tmp_path):
    with pytest.raises(UserError, match=r"no lock for Python 3.99 .*sglang-blackwell lock --base 9.9.9 "
                                        r"--python-version 3.99"):
        _bundle(world, tmp_path / "b", python="3.99", deps=_pins(tmp_path, "depa==2.0\n"), no_kernel=True)


def test_pip_freeze_and_pip_list_formats(tmp_path):
    f = tmp_path / "i.txt"
    f.write_text("Package    Version\n---------- -------\nTorch      2.11.0+cu130\n"
                 "-e git+https://x/y.git@abc#egg=mypkg\nfoo_bar==1.0\n")
    got = read_installed(f)
    assert str(got["torch"].version) == "2.11.0+cu130" and got["mypkg"].version is None
    assert str(got["foo-bar"].version) == "1.0"


def test_target_tags_select_the_right_wheels():
    t = Target("3.12")
    assert t.fits("sglang-0.5.14-cp312-cp312-manylinux_2_34_x86_64.whl")
    assert t.fits("sglang_kernel-0.4.4-cp310-abi3-manylinux2014_x86_64.whl")
    assert t.fits("pydantic_core-2.41.5-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl")
    assert not t.fits("sglang-0.5.14-cp311-cp311-manylinux_2_34_x86_64.whl")
    assert not t.fits("x-1.0-cp312-cp312-manylinux_2_35_x86_64.whl")
    assert not t.fits("x-1.0-cp312-cp312-macosx_11_0_arm64.whl")


# ---------------------------------------------------------------- kernel choice, CLI

def test_kernel_wheel_option_checks_the_pin(world, tmp_path):
    fake = tmp_path / "fake"
    fake.mkdir()
    w = kernel_wheel(fake, lib_size=10)  # same file name as the pin, other bytes
    with pytest.raises(IntegrityError, match="sha256 .* != the pin"):
        _bundle(world, tmp_path / "b", kernel_wheel=w)


def test_cli_bundle(world, tmp_path, capsys):
    out = tmp_path / "cli"
    rc = cli_main(["bundle", "--python", PY, "--out", str(out), "--strip", "fa3,flashmla,sm100",
                   "--index-url", world.index, "--deps", str(_pins(tmp_path, "depa==2.0\ndepb==1.0\ndepc==1.1\n")),
                   "--chunk-mib", "0.5"])
    o = capsys.readouterr()
    assert rc == 0, o.err
    assert "bundle " in o.out and f"{out}/c1" in o.out and "--stage DIR --stage-only" in o.out
    assert "1 requirement of the bundled wheels are neither carried nor known to be on the target" in o.err
    assert json.loads((out / "c1/manifest.json").read_text())["dependencies"]["unmet"] == [{
        "name": "torch", "status": "not carried (target unknown: no --installed)",
        "requires": "sglang 0.0.1+sm120.7 requires torch; flashinfer-python 0.0.2+sm120.7 requires torch"}]
    rc = cli_main(["bundle", "--python", PY, "--out", str(tmp_path / "x"), "--strip", "fa4"])
    assert rc == 2 and "unknown part(s) fa4" in capsys.readouterr().err
    (tmp_path / "notabundle").mkdir()
    (tmp_path / "notabundle" / "keep.txt").write_text("mine")
    rc = cli_main(["bundle", "--python", PY, "--out", str(tmp_path / "notabundle"), "--no-kernel"])
    assert rc == 2 and "exists and is not a bundle" in capsys.readouterr().err
    assert (tmp_path / "notabundle" / "keep.txt").read_text() == "mine"


@pytest.mark.slow
def test_install_into_the_interpreters_own_environment(world, tmp_path, pip_venv):
    out = tmp_path / "bundle"
    _bundle(world, out, deps=_pins(tmp_path, "depa==2.0\ndepb==1.0\ndepc==1.1\n"))
    py = str(pip_venv(tmp_path / "venv"))  # a venv with pip, as venv.EnvBuilder(with_pip=True) makes it
    r = run_install(out, "--dry-run", python=py)
    assert r.returncode == 0 and "--force-reinstall" in r.stdout and "--target" not in r.stdout, r.stderr
    r = run_install(out, python=py)
    assert r.returncode == 0, r.stdout + r.stderr
    probe = "import importlib.metadata as m; print(m.version('sglang'), m.version('sglang-kernel'), m.version('depc'))"
    res = subprocess.run([py, "-c", probe], capture_output=True, text=True)
    assert res.stdout.split() == ["0.0.1+sm120.7", "0.0.1", "1.1"], res.stderr
