"""`bundle` warns when the bundle plus the target's --installed list lacks a distribution that a normal launch of
the base line imports (patches/<base>/launch_deps.toml, [launch_deps]) or that `python -m sglang.bench_serving`
imports beyond it ([bench_serving_deps]): one line each, naming it and what it is needed for. The real 0.5.14 lists
against the real lab files; the warnings end to end on the small test base (no internet)."""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from sglang_blackwell.artifacts.bundle import (
    BundleOptions,
    launch_path_gaps,
    load_deps_sections,
    load_launch_deps,
    make_bundle,
)
from sglang_blackwell.artifacts.deps import read_installed, read_pins
from sglang_blackwell.artifacts.lock import load_lock
from sglang_blackwell.errors import UserError
from sglang_blackwell.patchset.bases import get_base, list_bases

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


def test_the_lab_bundle_covers_bench_serving_of_0514():
    """sglang 0.5.14's bench_serving imports datasets at module load (benchmark/datasets/mmmu.py): the lab list
    carries it and multiprocess (which the image lacks) at the lock's versions; pandas, pyarrow, xxhash are the
    image's."""
    base = get_base("0.5.14")
    bench = load_launch_deps(base, table="bench_serving_deps")
    assert bench is not None and {"datasets", "multiprocess", "pandas", "pyarrow", "xxhash"} <= set(bench)
    assert "dies at import" in bench["datasets"]
    assert not set(bench) & set(load_launch_deps(base))  # only what bench_serving adds to a launch
    pins = {p.name: str(p.version) for p in read_pins(LAB / "bundle-deps-0.5.14-py312.txt")}
    lock = load_lock(base, "3.12")
    for name in ("datasets", "multiprocess"):
        assert pins[name] == lock.entry(name).version, name
    assert pins["datasets"] == "5.2.0" and pins["multiprocess"] == "0.70.19"
    image = read_installed(LAB / "installed-lab-image.txt")
    assert "datasets" not in image and "multiprocess" not in image  # hence carried
    assert launch_path_gaps(bench, set(pins) | OURS, image) == []
    gaps = launch_path_gaps(bench, (set(pins) | OURS) - {"datasets", "multiprocess"}, image)
    assert [g["name"] for g in gaps] == ["datasets", "multiprocess"]


def test_launch_deps_is_data_per_real_base_line():
    from sglang_blackwell.tomlio import tomllib

    for base in list_bases():
        f = base.dir / "launch_deps.toml"
        if f.exists():
            data = tomllib.loads(f.read_text())
            for table in ("launch_deps", "bench_serving_deps"):
                deps = data.get(table, {})
                assert all(canonicalize_name(k) == k for k in deps), (base.name, table)  # what --installed matches
            assert load_deps_sections(base) is not None
    assert load_launch_deps(get_base("0.5.9")) is None  # not probed: no list, and bundle says so


def test_a_broken_launch_deps_file_is_named(tmp_path):
    bad = tmp_path / "launch_deps.toml"
    bad.write_text('[launch_deps]\nxgrammar = 3\n')
    with pytest.raises(UserError, match=r"launch_deps.toml: \[launch_deps\] must map"):
        load_launch_deps(get_base("0.5.14"), bad)
    bad.write_text("[lines\n")
    with pytest.raises(UserError, match="launch_deps.toml: not valid TOML"):
        load_launch_deps(get_base("0.5.14"), bad)
    bad.write_text('[launch_deps]\nxgrammar = "x"\n[bench_serving_deps]\ndatasets = ""\n')
    with pytest.raises(UserError, match=r"\[bench_serving_deps\] must map .* `python -m sglang.bench_serving`"):
        load_launch_deps(get_base("0.5.14"), bad, table="bench_serving_deps")
    bad.write_text('[launch_deps]\nxgrammar = "x"\n[bench_serving]\ndatasets = "y"\n')  # a misspelt table
    with pytest.raises(UserError, match=r"unknown table\(s\) bench_serving \(known: launch_deps, bench_serving_deps\)"):
        load_launch_deps(get_base("0.5.14"), bad)
    bad.write_text('[launch_deps]\nxgrammar = "x"\n')  # the bench section is optional
    assert load_deps_sections(get_base("0.5.14"), bad) == {"launch_deps": {"xgrammar": "x"}, "bench_serving_deps": {}}


def test_bundle_warns_one_line_per_missing_launch_dependency(tmp_path, world):
    # world: make_world + its lock (conftest.py; bundle --deps checks every pin against the base's lock)
    known = tmp_path / "launch_deps.toml"
    known.write_text('[launch_deps]\ndepb = "the b endpoint"\ndepc = "the c backend"\n'
                     'Dep_Z = "the z grammar: the server dies at start"\nnumpy = "everything"\n'
                     '[bench_serving_deps]\ndepa = "the a dataset"\npandas = "imported by dep-y"\n'
                     'dep-y = "bench_serving dies at import"\n')
    installed = tmp_path / "installed.txt"
    installed.write_text("torch==2.11.0\nnumpy==2.0\npandas==3.0\n")
    said: list[str] = []
    opts = BundleOptions(python=PY, index_url=world.index, no_kernel=True, installed=installed,
                         deps=_pins(tmp_path, "depa==2.0\ndepb==1.0\ndepc==1.1\n"), launch_deps=known)
    m = make_bundle(get_base("9.9.9"), tmp_path / "b", opts, progress=said.append).manifest
    warnings = [s for s in said if s.startswith("warning:")]
    assert warnings == ["warning: dep-z is neither in the bundle nor on the target (--installed); a normal launch "
                        "needs it: the z grammar: the server dies at start",
                        "warning: dep-y is neither in the bundle nor on the target (--installed); `python -m "
                        "sglang.bench_serving` needs it: bench_serving dies at import"]
    lp, bs = m["dependencies"]["launch_path"], m["dependencies"]["bench_serving"]
    assert lp["known"] == 4 and [g["name"] for g in lp["missing"]] == ["dep-z"]
    assert bs["known"] == 3 and [g["name"] for g in bs["missing"]] == ["dep-y"]
    # the same bundle without --installed: one note per list, no per-package warnings (the target is unknown)
    said.clear()
    opts.installed = None
    m = make_bundle(get_base("9.9.9"), tmp_path / "b", opts, progress=said.append).manifest
    assert not [s for s in said if s.startswith("warning:")]
    assert any("no --installed: 2 of the 4 distributions a normal launch of 9.9.9" in s for s in said)
    assert any("no --installed: 2 of the 3 distributions `python -m sglang.bench_serving` of 9.9.9" in s for s in said)
    assert [g["name"] for g in m["dependencies"]["launch_path"]["missing"]] == ["dep-z", "numpy"]
    assert [g["name"] for g in m["dependencies"]["bench_serving"]["missing"]] == ["dep-y", "pandas"]
