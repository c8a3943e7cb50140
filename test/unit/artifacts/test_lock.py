"""Hashed locks (artifacts/lock.py): made by pip's resolver for a target Python, read back, stale when their inputs
change, used with --require-hashes by `install`. The generator runs for real against a PEP 503 index on
127.0.0.1 (the `server` fixture) of small wheels; the committed locks of the real bases are checked without
network (fresh against base.toml and lock.toml, in agreement with base.toml's hashes and the lab's list)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_blackwell.artifacts.build import build
from sglang_blackwell.artifacts.deps import read_pins
from sglang_blackwell.artifacts.install import install
from sglang_blackwell.artifacts.lock import (
    generate,
    load_lock,
    lock_path,
    lock_problems,
    lock_pythons,
    locked_pins,
    read_lock,
    render,
    write,
)
from sglang_blackwell.cli import main as cli_main
from sglang_blackwell.errors import UserError
from sglang_blackwell.patchset.bases import get_base, list_bases, load_base
from sglang_blackwell.patchset.labellock import write_lock
from support.fake_base import Patched, Runtime, render_base, wheel_pin
from support.wheel_world import ORIGINAL, Server, gate_patch, make_wheel, pip_sees_only, sha256

REPO = Path(__file__).resolve().parents[3]
PY = f"{sys.version_info[0]}.{sys.version_info[1]}"
TAG = f"py{sys.version_info[0]}{sys.version_info[1]}"


@pytest.fixture
def torch_index(tmp_path):
    """A second index on 127.0.0.1, standing in for PyTorch's: the +cu999 builds the package index lacks."""
    (tmp_path / "torchidx").mkdir()
    s = Server(tmp_path / "torchidx")
    yield s
    s.close()


def _world(tmp_path: Path, server, monkeypatch, torch_index=None) -> Path:
    """patches/9.9.9: patched sglang needing depa, depb (-> depc), the kernel (a runtime pin the index serves), a
    marker-gated dependency, and (with a torch_index) torch 2.0.0+cu999 with its companion tv, which only that
    index has; the package index has the plain torch 2.0.0 and tv 1.0 (their requirements feed the resolution)."""
    outside = torch_index is not None
    r = server.root
    deps = {"depa-1.0": [], "depa-2.0": [], "depb-1.0": ["depc>=1.1"], "depc-1.0": [], "depc-1.1": [],
            "newpy-1.0": [], "filelockx-1.0": [], "nvidia-fake-1.0": []}
    for stem, req in deps.items():
        n, v = stem.rsplit("-", 1)
        make_wheel(r / f"{n.replace('-', '_')}-{v}-py3-none-any.whl", n, v, {f"{n.replace('-', '_')}/__init__.py": b""},
                   requires=req)
    kw = make_wheel(r / "sglang_kernel-0.0.1-cp310-abi3-manylinux2014_x86_64.whl", "sglang_kernel", "0.0.1",
                    {"sgl_kernel/__init__.py": b""}, tag="cp310-abi3-manylinux2014_x86_64")
    make_wheel(r / "torch-2.0.0-py3-none-any.whl", "torch", "2.0.0", {"torch/__init__.py": b""},
               requires=["filelockx", "nvidia-fake==1.0"])  # the index's plain build of the release
    make_wheel(r / "tv-1.0-py3-none-any.whl", "tv", "1.0", {"tv/__init__.py": b""}, requires=["torch==2.0.0", "depc"])
    if outside:
        t = torch_index.root
        make_wheel(t / "torch-2.0.0+cu999-py3-none-any.whl", "torch", "2.0.0+cu999", {"torch/__init__.py": b"CU = 9\n"},
                   requires=["filelockx"])
        make_wheel(t / "tv-1.0+cu999-py3-none-any.whl", "tv", "1.0+cu999", {"tv/__init__.py": b"CU = 9\n"},
                   requires=["torch==2.0.0", "depc"])
    reqs = ["depa>=1.0", "depb", "sglang-kernel==0.0.1", 'newpy; python_version >= "3.12"']
    reqs += ["torch==2.0.0", "tv"] if outside else []
    sg = make_wheel(r / "sglang-0.0.1-py3-none-any.whl", "sglang", "0.0.1",
                    {"sglang/__init__.py": b"", "sglang/gate.py": ORIGINAL}, requires=reqs)
    base = tmp_path / "patches" / "9.9.9"
    (base / "sglang").mkdir(parents=True)
    torch_pin = [Runtime("torch", "2.0.0+cu999", "torch==2.0.0+cu999", f"{torch_index.url}/simple/")] if outside else []
    (base / "base.toml").write_text(render_base(
        patched=[Patched("sglang", "sglang", "0.0.1", [wheel_pin(sg, server.url)])],
        runtime=[*torch_pin, Runtime("sglang-kernel", "0.0.1", "sglang-kernel==0.0.1", f"{server.url}/simple/",
                                     [{"filename": kw.name, "sha256": sha256(kw)}])]))
    (base / "sglang" / "0001-gate-accepts-12.patch").write_text(gate_patch())
    (base / "sglang" / "series").write_text("0001-gate-accepts-12.patch\n")
    write_lock(load_base(base))  # the label rule: build (and so lock and install) refuse an unlocked label
    monkeypatch.setenv("SGLANG_BLACKWELL_PATCHES", str(base.parent))
    monkeypatch.setenv("SGLANG_BLACKWELL_CACHE", str(tmp_path / "cache"))
    pip_sees_only(monkeypatch, f"{server.url}/simple/")
    return base


def _lock(server, python: str = PY, exe: str = sys.executable):
    base = get_base("9.9.9")
    lock = generate(base, python, python_exe=exe, index_url=f"{server.url}/simple/")
    write(lock, f"sglang-blackwell lock --base 9.9.9 --python-version {python}")
    return base, lock


def _other_python() -> tuple[str, str] | None:
    """Another CPython >= 3.10 on this machine (version, path), to show markers are the target's."""
    for v in ("3.12", "3.10", "3.13"):
        if v == PY:
            continue
        for c in [shutil.which(f"python{v}"), *sorted(Path.home().glob(f".pyenv/versions/{v}.*/bin/python{v}"))]:
            if c and subprocess.run([str(c), "-c", "import sys"], capture_output=True).returncode == 0:
                return v, str(c)
    return None


# ---------------------------------------------------------------- generating and reading

def test_generate_pins_every_dependency_with_the_file_the_index_serves(tmp_path, server, torch_index, monkeypatch):
    _world(tmp_path, server, monkeypatch, torch_index)
    base, lock = _lock(server)
    got = {e.name: e.version for e in lock.entries}
    # depb pulls depc>=1.1; the stand-in of torch +cu999 pulls filelockx (what the index's torch 2.0.0 needs, less
    # its nvidia-* CUDA wheels); newpy's marker is false below 3.12; ours and the stand-in are not pinned
    assert got == {"depa": "2.0", "depb": "1.0", "depc": "1.1", "filelockx": "1.0", "sglang-kernel": "0.0.1",
                   **({"newpy": "1.0"} if sys.version_info >= (3, 12) else {})}
    for e in lock.entries:
        (f,) = [p for p in server.root.glob("*.whl") if p.name.split("-")[:2] == [e.name.replace("-", "_"),
                                                                                 e.version]]
        assert e.sha256 == sha256(f), e
    assert lock.entry("depc").via == ("depb", "tv") and lock.entry("depa").via == ("sglang",)
    assert lock.entry("filelockx").via == ("torch",)
    # the index cannot serve torch +cu999: outside the lock, with its companion tv (which pins torch==2.0.0)
    assert [o.requirement for o in lock.outside] == ["torch==2.0.0+cu999", "tv==1.0+cu999"]
    assert all(o.index_url == f"{torch_index.url}/simple/" for o in lock.outside)
    assert "no hash pinned" in lock.outside[0].check
    # the file is pip's --require-hashes format and reads back the same
    path = lock_path(base, PY)
    assert path == base.dir / "locks" / f"{TAG}.txt"
    text = path.read_text()
    assert "depc==1.1 \\\n    --hash=sha256:" in text and "    # via depb, tv\n" in text
    back = read_lock(path)
    assert back.entries == [e for e in sorted(lock.entries, key=lambda e: e.name)]
    assert back.outside == lock.outside and back.inputs == lock.inputs and render(back, "x") == render(lock, "x")
    assert lock_problems(base, PY) == []


def test_markers_are_the_target_interpreters(tmp_path, server, torch_index, monkeypatch):
    other = _other_python()
    if other is None:
        pytest.skip("no second CPython >= 3.10 here")
    v, exe = other
    _world(tmp_path, server, monkeypatch, torch_index)
    _, lock = _lock(server, v, exe)
    assert ("newpy" in {e.name for e in lock.entries}) == (tuple(map(int, v.split("."))) >= (3, 12))
    assert lock.python == v and f"CPython {v}." in lock.resolver


def test_a_lock_goes_stale_when_its_inputs_change(tmp_path, server, torch_index, monkeypatch):
    base_dir = _world(tmp_path, server, monkeypatch, torch_index)
    base, _ = _lock(server)
    toml = base_dir / "base.toml"
    orig = toml.read_text()
    toml.write_text(orig.replace('version = "0.0.1"\n\n[[patched.files]]',
                                 'version = "0.0.1"\nrequires_rewrite = { "depa" = "depa==1.0" }\n\n[[patched.files]]'))
    (p,) = lock_problems(load_base(base_dir), PY)
    assert "stale" in p and f"sglang-blackwell lock --base 9.9.9 --python-version {PY}" in p
    toml.write_text(orig)
    assert lock_problems(load_base(base_dir), PY) == []
    # a recipe with a constraint file: its bytes are an input too
    cons = tmp_path / "cons.txt"
    cons.write_text("depa==1.0\n")
    (base_dir / "locks" / "lock.toml").write_text(f'[constraints]\n"{PY}" = "../../../cons.txt"\n')
    assert "stale" in lock_problems(load_base(base_dir), PY)[0]
    base, lock = _lock(server)
    assert lock.entry("depa").version == "1.0" and lock_problems(base, PY) == []
    cons.write_text("depa==2.0\n")
    assert "stale" in lock_problems(load_base(base_dir), PY)[0]


def test_cli_lock_and_check(tmp_path, server, torch_index, monkeypatch, capsys):
    _world(tmp_path, server, monkeypatch, torch_index)
    assert cli_main(["lock", "--check"]) == 1
    assert "missing" in capsys.readouterr().err
    assert cli_main(["lock", "--python", PY, "--python-exe", sys.executable, "--index-url",
                     f"{server.url}/simple/"]) == 0
    out = capsys.readouterr().out
    assert f"{TAG}.txt: 5 hashed pins" in out or f"{TAG}.txt: 6 hashed pins" in out
    assert cli_main(["lock", "--check", "--python", PY]) == 0
    assert capsys.readouterr().out.strip() == f"base 9.9.9 Python {PY}: fresh"
    assert cli_main(["lock", "--python-exe", sys.executable]) == 2
    assert "--python-exe goes with --python" in capsys.readouterr().err


def test_unresolvable_requirements_are_a_clear_error_and_write_nothing(tmp_path, server, torch_index, monkeypatch):
    base_dir = _world(tmp_path, server, monkeypatch, torch_index)
    (server.root / "depc-1.1-py3-none-any.whl").unlink()  # depb needs depc>=1.1
    with pytest.raises(UserError, match=r"(?s)resolving for CPython .*pip failed.*depc"):
        _lock(server)
    assert not (base_dir / "locks").exists()


# ---------------------------------------------------------------- install uses it

def test_install_dry_run_shows_require_hashes(tmp_path, server, torch_index, monkeypatch, capsys):
    _world(tmp_path, server, monkeypatch, torch_index)
    base, lock = _lock(server)
    dist = tmp_path / "dist"
    build(base, dist)  # a dry run builds nothing: dist/ is current here
    assert cli_main(["install", "--dist", str(dist), "--dry-run"]) == 0
    out = capsys.readouterr()
    first, second = out.out.strip().splitlines()
    exe = sys.executable
    hashes = dist / f"hashes-9.9.9-{TAG}.txt"
    assert first == f"{exe} -m pip install --require-hashes --no-deps -r {lock_path(base, PY)} -r {hashes}"
    assert second == (f"{exe} -m pip install --extra-index-url {torch_index.url}/simple/ torch==2.0.0+cu999 "
                      "tv==1.0+cu999")
    assert not hashes.exists() and f"dry run: install writes {hashes} first" in out.err  # a dry run writes nothing
    assert cli_main(["install", "--dist", str(dist), "--dry-run", "--no-deps"]) == 0  # and never builds
    (ours,) = dist.glob("sglang-*.whl")
    assert capsys.readouterr().out.split()[4] == str(ours)


def test_install_without_a_lock_names_what_is_missing(tmp_path, server, torch_index, monkeypatch):
    _world(tmp_path, server, monkeypatch, torch_index)
    with pytest.raises(UserError, match=rf"base 9.9.9: no lock for Python {PY} .*locks exist for: none.*"
                                        rf"sglang-blackwell lock --base 9.9.9 --python-version {PY}"):
        install(get_base("9.9.9"), tmp_path / "dist", dry_run=True)
    assert not (tmp_path / "dist").exists()  # it fails before building anything


@pytest.mark.slow
def test_install_puts_exactly_the_lock_into_a_venv_and_refuses_other_bytes(tmp_path, server, torch_index, monkeypatch,
                                                                           pip_venv):
    _world(tmp_path, server, monkeypatch, torch_index)
    base, lock = _lock(server)
    py = str(pip_venv(tmp_path / "venv"))  # a venv with pip, as venv.EnvBuilder(with_pip=True) makes it
    install(base, tmp_path / "dist", python_exe=py)  # pip reads PIP_INDEX_URL: this index stands in for the user's
    probe = ("import importlib.metadata as m, json, re; print(json.dumps({re.sub(r'[-_.]+', '-', "
             "d.metadata['Name']).lower(): d.version for d in m.distributions()}))")
    import json

    have = json.loads(subprocess.run([py, "-c", probe], capture_output=True, text=True, check=True).stdout)
    assert {k: have[k] for k in ("depa", "depb", "depc", "sglang-kernel", "filelockx")} == {
        "depa": "2.0", "depb": "1.0", "depc": "1.1", "sglang-kernel": "0.0.1", "filelockx": "1.0"}
    assert have["sglang"] == "0.0.1+sm120.7" and have["torch"] == "2.0.0+cu999" and have["tv"] == "1.0+cu999"
    assert "nvidia-fake" not in have
    # the index now serves other bytes under a locked name: pip refuses, nothing of the hashed set goes in
    make_wheel(server.root / "depa-2.0-py3-none-any.whl", "depa", "2.0", {"depa/__init__.py": b"EVIL = 1\n"})
    py2 = str(pip_venv(tmp_path / "venv2"))
    with pytest.raises(UserError, match="pip install failed"):
        install(base, tmp_path / "dist", python_exe=py2)
    have2 = subprocess.run([py2, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert '"depa"' not in have2 and '"sglang"' not in have2


# ---------------------------------------------------------------- the committed locks (no network)

def _real_bases():
    os.environ.pop("SGLANG_BLACKWELL_PATCHES", None)
    return list_bases(REPO / "patches")


def test_every_committed_lock_is_fresh_and_agrees_with_base_toml():
    for b in _real_bases():
        pys = lock_pythons(b)
        assert pys, b.name
        for py in pys:
            assert lock_problems(b, py) == [], (b.name, py)
        have = sorted(p.name for p in (b.dir / "locks").glob("py*.txt"))
        assert have == sorted(lock_path(b, py).name for py in pys), b.name  # no lock for a Python it lacks


def test_a_changed_pin_makes_the_committed_lock_stale(tmp_path):
    (b,) = [b for b in _real_bases() if b.name == "0.5.14"]
    copy = tmp_path / "patches" / "0.5.14"
    shutil.copytree(b.dir, copy)
    lab = tmp_path / "benchmark" / "lab"  # where lock.toml's constraint path points from the copy
    lab.mkdir(parents=True)
    shutil.copy(REPO / "benchmark" / "lab" / "bundle-deps-0.5.14-py312.txt", lab)
    assert lock_problems(load_base(copy), "3.12") == []
    toml = copy / "base.toml"
    torch_sha = "0f68f4ac6d95d12e896c3b7a912b5871619542ec54d3649cf48cc1edd4dd2756"  # cp312, as base.toml pins it
    assert torch_sha in toml.read_text()
    toml.write_text(toml.read_text().replace(torch_sha, "0" * 64))
    probs = lock_problems(load_base(copy), "3.12")
    assert len(probs) == 2 and "stale" in probs[0]
    assert f"torch==2.11.0 is hashed {torch_sha}, base.toml pins {'0' * 64}" in probs[1]
    (lab / "bundle-deps-0.5.14-py312.txt").write_text("pydantic==2.12.5\n")  # the lab list is an input too
    toml.write_text(toml.read_text().replace("0" * 64, torch_sha))
    assert "stale" in lock_problems(load_base(copy), "3.12")[0]


def test_unsupported_pythons_say_why():
    (b,) = [b for b in _real_bases() if b.name == "0.5.14"]
    assert "3.13" not in lock_pythons(b)
    with pytest.raises(UserError, match="no lock for Python 3.13 .*outlines_core==0.1.26"):
        load_lock(b, "3.13")


def test_the_lab_list_agrees_with_the_lock_of_0_5_14_py312():
    (b,) = [b for b in _real_bases() if b.name == "0.5.14"]
    lab = REPO / "benchmark" / "lab" / "bundle-deps-0.5.14-py312.txt"
    lock = load_lock(b, "3.12")
    got = locked_pins(read_pins(lab), lock, lab)  # raises, naming the line, on any disagreement
    assert set(got) == {p.name for p in read_pins(lab)}
    nl = lock.not_lockable_pin("cuda-tile")
    assert nl is not None and got["cuda-tile"].sha256 == nl.sha256 and lock.entry("cuda-tile").version != nl.version
    # sglang 0.5.14 requirements the launch path imports are locked
    for name in ("xgrammar", "openai-harmony", "jiter", "transformers", "flash-attn-4", "torchao"):
        assert lock.entry(name) is not None, name


@pytest.mark.network
@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("SGLANG_BLACKWELL_LOCK_ONLINE") != "1",
                    reason="resolves against PyPI (~25 s): SGLANG_BLACKWELL_LOCK_ONLINE=1 runs it; `make test` "
                           "checks the locks offline")
def test_pip_takes_the_committed_lock_in_hash_checking_mode(tmp_path, monkeypatch):
    """`install`'s own command for base 0.5.14 on this Python, dry-run against PyPI: pip finds every requirement
    of our wheels in the lock, with a hash it agrees with, and nothing else."""
    import json

    (b,) = [b for b in _real_bases() if b.name == "0.5.14"]
    if PY not in lock_pythons(b):
        pytest.skip(f"base 0.5.14 has no lock for Python {PY}")
    (cmd,) = install(b, tmp_path / "dist", python_exe=sys.executable, dry_run=True)
    pip_sees_only(monkeypatch, "https://pypi.org/simple")
    r = subprocess.run([*cmd, "--dry-run", "--ignore-installed", "--quiet", "--report", str(tmp_path / "r.json")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    got = {i["metadata"]["name"].lower().replace("_", "-"): i["metadata"]["version"]
           for i in json.loads((tmp_path / "r.json").read_text())["install"]
           if not i["download_info"]["url"].startswith("file:")}
    assert got == {e.name: e.version for e in load_lock(b, PY).entries}
