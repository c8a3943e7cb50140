"""`bundle` warns when the bundle plus the target's --installed list lacks a distribution that a normal launch of
the base line imports (patches/<base>/launch_deps.toml): one line each, naming it and what the launch needs it for.
The real 0.5.14 list against the real lab files; the warning end to end on the small test base (no internet)."""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from sglang_blackwell.artifacts.bundle import (
    BundleOptions,
    launch_path_gaps,
    load_launch_deps,
    make_bundle,
)
from sglang_blackwell.artifacts.deps import read_installed, read_pins
from sglang_blackwell.errors import UserError
from sglang_blackwell.patchset.bases import get_base, list_bases

from .bundle_fixtures import isolated_pip_env, lock_world, make_world
from .test_bundle import PY, _pins

REPO = Path(__file__).resolve().parents[3]
LAB = REPO / "benchmark" / "lab"
OURS = {"sglang", "flashinfer-python", "sglang-kernel"}  # the bundle's patched wheels and the kernel


def test_the_lab_bundle_covers_the_0514_launch_path():
    known = load_launch_deps(get_base("0.5.14"))
    assert known is not None and len(known) > 50
    for name in ("xgrammar", "openai-harmony", "jiter"):  # what the lab's first normal launch lacked
        assert name in known and known[name]
    assert not OURS & set(known) and "torch" not in known
    pins = {p.name for p in read_pins(LAB / "bundle-deps-0.5.14-py312.txt")}
    image = read_installed(LAB / "installed-lab-image.txt")
    assert launch_path_gaps(known, pins | OURS, image) == []
    gaps = launch_path_gaps(known, (pins | OURS) - {"xgrammar"}, image)
    assert gaps == [{"name": "xgrammar", "needed_for": known["xgrammar"], "status": "not carried, not installed"}]
    assert "grammar backend" in known["xgrammar"]
    no_target = launch_path_gaps(known, pins | OURS, None)  # without --installed every uncarried one is listed
    assert {g["name"] for g in no_target} == set(known) - pins and all("target unknown" in g["status"]
                                                                       for g in no_target)


def test_launch_deps_is_data_per_real_base_line():
    from sglang_blackwell.tomlio import tomllib

    for base in list_bases():
        f = base.dir / "launch_deps.toml"
        if f.exists():
            deps = tomllib.loads(f.read_text())["launch_deps"]
            assert all(canonicalize_name(k) == k for k in deps), base.name  # canonical: what --installed matches
    assert load_launch_deps(get_base("0.5.9")) is None  # not probed: no list, and bundle says so


def test_a_broken_launch_deps_file_is_named(tmp_path):
    bad = tmp_path / "launch_deps.toml"
    bad.write_text('[launch_deps]\nxgrammar = 3\n')
    with pytest.raises(UserError, match=r"launch_deps.toml: \[launch_deps\] must map"):
        load_launch_deps(get_base("0.5.14"), bad)
    bad.write_text("[lines\n")
    with pytest.raises(UserError, match="launch_deps.toml: not valid TOML"):
        load_launch_deps(get_base("0.5.14"), bad)


def test_bundle_warns_one_line_per_missing_launch_dependency(tmp_path, server, monkeypatch):
    world = make_world(tmp_path, server)
    monkeypatch.setenv("SGLANG_BLACKWELL_PATCHES", str(world.base.parent))
    monkeypatch.setenv("SGLANG_BLACKWELL_CACHE", str(tmp_path / "cache"))
    isolated_pip_env(monkeypatch)
    lock_world(world, PY)  # bundle --deps checks every pin against the base's lock
    known = tmp_path / "launch_deps.toml"
    known.write_text('[launch_deps]\ndepb = "the b endpoint"\ndepc = "the c backend"\n'
                     'Dep_Z = "the z grammar: the server dies at start"\nnumpy = "everything"\n')
    installed = tmp_path / "installed.txt"
    installed.write_text("torch==2.11.0\nnumpy==2.0\n")
    said: list[str] = []
    opts = BundleOptions(python=PY, index_url=world.index, no_kernel=True, installed=installed,
                         deps=_pins(tmp_path, "depa==2.0\ndepb==1.0\ndepc==1.1\n"), launch_deps=known)
    m = make_bundle(get_base("9.9.9"), tmp_path / "b", opts, progress=said.append).manifest
    warnings = [s for s in said if s.startswith("warning:")]
    assert warnings == ["warning: dep-z is neither in the bundle nor on the target (--installed); a normal launch "
                        "needs it: the z grammar: the server dies at start"]
    lp = m["dependencies"]["launch_path"]
    assert lp["known"] == 4 and [g["name"] for g in lp["missing"]] == ["dep-z"]
    # the same bundle without --installed: one note, no per-package warnings (the target is unknown)
    said.clear()
    opts.installed = None
    m = make_bundle(get_base("9.9.9"), tmp_path / "b", opts, progress=said.append).manifest
    assert not [s for s in said if s.startswith("warning:")]
    assert any("no --installed: 2 of the 4 distributions" in s for s in said)
    assert [g["name"] for g in m["dependencies"]["launch_path"]["missing"]] == ["dep-z", "numpy"]
