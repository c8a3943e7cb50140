"""patchset/base_bump.py: a component of a base line re-pinned from an index, against a real HTTP server on
localhost that speaks PyPI's JSON API (and PEP 503, for the pip downloads fetch makes), on a small fake base."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sglang_blackwell.patchset.base_bump import run
from sglang_blackwell.patchset.bases import load_base
from support.wheel_world import make_wheel, pip_sees_only, sha256

SGLANG_TAGS = ("cp311-cp311-manylinux_2_28_x86_64", "cp312-cp312-manylinux_2_28_x86_64")


def _wheel(server, dist: str, version: str, tag: str, requires: list[str] = ()) -> Path:
    name = dist.replace("-", "_")
    return make_wheel(server.root / f"{name}-{version}-{tag}.whl", dist, version,
                      {f"{name}/__init__.py": f"VERSION = {version!r}\n".encode()}, requires=list(requires), tag=tag)


def _entry(server, whl: Path, hashed: bool = True) -> dict:
    return {"filename": whl.name, "url": f"{server.url}/{whl.name}", "size": whl.stat().st_size,
            "digests": {"sha256": sha256(whl)} if hashed else {}, "yanked": False}


def _pin(server, whl: Path) -> str:
    return (f'filename = "{whl.name}"\nurl = "{server.url}/{whl.name}"\nsha256 = "{sha256(whl)}"\n'
            f"size = {whl.stat().st_size}\n")


@pytest.fixture
def world(tmp_path, server, monkeypatch):
    """base 1.0.0 pins sglang 0.0.1 (two manylinux_2_28 wheels, requiring flashinfer_python==0.0.1), flashinfer-python
    0.0.1 and a runtime kern 1.0; the index also has flashinfer-python 0.0.2, 0.0.3 (its wheel has no sha256),
    sglang 0.0.2 (manylinux_2_34, plus a cp313 wheel) and kern 1.1."""
    old_sg = [_wheel(server, "sglang", "0.0.1", t, ["flashinfer_python==0.0.1", "numpy"]) for t in SGLANG_TAGS]
    new_sg = [_wheel(server, "sglang", "0.0.2", t.replace("2_28", "2_34"), ["flashinfer_python==0.0.2"])
              for t in (*SGLANG_TAGS, "cp313-cp313-manylinux_2_28_x86_64")]
    fi = {v: _wheel(server, "flashinfer-python", v, "py3-none-any") for v in ("0.0.1", "0.0.2", "0.0.3")}
    kern = {v: _wheel(server, "kern", v, "cp310-abi3-manylinux2014_x86_64") for v in ("1.0", "1.1")}
    docs = {"sglang": {"0.0.1": [_entry(server, w) for w in old_sg], "0.0.2": [_entry(server, w) for w in new_sg]},
            "flashinfer-python": {"0.0.1": [_entry(server, fi["0.0.1"])], "0.0.2": [_entry(server, fi["0.0.2"])],
                                  "0.0.3": [_entry(server, fi["0.0.3"], hashed=False)]},
            "kern": {v: [_entry(server, w)] for v, w in kern.items()}}
    for name, releases in docs.items():
        (server.root / "pypi" / name).mkdir(parents=True)
        (server.root / "pypi" / name / "json").write_text(json.dumps({"info": {"version": max(releases)},
                                                                      "releases": releases}))
    base = tmp_path / "patches" / "1.0.0"
    for pkg in ("sglang", "flashinfer"):
        (base / pkg).mkdir(parents=True)
        (base / pkg / "series").write_text("# empty\n")
    files = "\n".join(f"[[patched.files]]\n{_pin(server, w)}" for w in old_sg)
    (base / "base.toml").write_text(f"""# Base line 1.0.0: sglang 0.0.1, flashinfer 0.0.1.

[base]
name = "1.0.0"
default = true
role = "test base (flashinfer 0.0.1)"
local_label = "sm120.4"
cuda = "13.0"

[[patched]]
package = "sglang"
distribution = "sglang"
version = "0.0.1"

{files}
# flashinfer: no patches on this line
[[patched]]
package = "flashinfer"
distribution = "flashinfer-python"
version = "0.0.1"

[[patched.files]]
{_pin(server, fi["0.0.1"])}
[[runtime]]
name = "kern"
version = "1.0"
requirement = "kern==1.0"
index_url = "https://pypi.org/simple"
files = [
  {{ filename = "{kern['1.0'].name}", url = "{server.url}/{kern['1.0'].name}", sha256 = "{sha256(kern['1.0'])}" }},
]
""")
    monkeypatch.setenv("SGLANG_BLACKWELL_PATCHES", str(base.parent))
    monkeypatch.setenv("SGLANG_BLACKWELL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("SGLANG_BLACKWELL_PYPI_URL", server.url)
    pip_sees_only(monkeypatch, f"{server.url}/simple/")
    return {"base": base, "server": server, "fi": fi, "new_sg": new_sg, "kern": kern}


def _changed(old: str, new: str) -> list[int]:
    """Indices of the old file's lines that the new file does not keep as they were (same length files)."""
    a, b = old.splitlines(), new.splitlines()
    return [i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y] + list(range(len(b), len(a)))


def test_the_entry_is_rendered_from_the_served_files_and_nothing_is_written(world, capsys):
    toml = world["base"] / "base.toml"
    before = toml.read_bytes()
    assert run(["--base", "1.0.0", "flashinfer-python==0.0.2"]) == 0
    out = capsys.readouterr().out
    whl = world["fi"]["0.0.2"]
    entry = out.split("new entry ([[patched]] flashinfer-python 0.0.1 -> 0.0.2):\n", 1)[1].split("--- a/", 1)[0]
    assert (f'version = "0.0.2"\n\n[[patched.files]]\nfilename = "{whl.name}"\n'
            f'url = "{world["server"].url}/{whl.name}"\nsha256 = "{sha256(whl)}"\nsize = {whl.stat().st_size}\n'
            ) in entry
    assert '-version = "0.0.1"\n+version = "0.0.2"' in out and "+++ b/patches/1.0.0/base.toml" in out
    assert toml.read_bytes() == before
    follow = out.split("then:\n", 1)[1]
    assert "bump [base] local_label sm120.4 -> sm120.5" in follow and "label lock --base 1.0.0" in follow
    assert "`sglang-blackwell lock --base 1.0.0`" in follow
    # sglang 0.0.1 pins flashinfer_python==0.0.1 exactly: the rewrite is named, not made
    assert ("sglang 0.0.1 requires 'flashinfer_python==0.0.1' (its METADATA), which 0.0.2 does not satisfy: add "
            'requires_rewrite = { "flashinfer_python" = "flashinfer_python==0.0.2" } to [[patched]] sglang') in follow
    assert "base.toml still says 0.0.1 outside the entry (line 1, 6: " in follow


def test_the_cli_verb_is_the_same_command(world, capsys):
    """`sglang-blackwell base bump` (cli.py) prints what run() prints; a bad base is its one-line error, exit 2."""
    from sglang_blackwell import cli

    assert run(["--base", "1.0.0", "flashinfer-python==0.0.2"]) == 0
    want = capsys.readouterr().out
    assert cli.main(["base", "bump", "--base", "1.0.0", "flashinfer-python==0.0.2"]) == 0
    assert capsys.readouterr().out == want
    assert cli.main(["base", "bump", "--base", "7.7", "flashinfer-python==0.0.2"]) == 2
    assert capsys.readouterr().err.startswith("sglang-blackwell base: error: unknown base '7.7'")


def test_write_changes_only_that_entry(world, capsys):
    toml = world["base"] / "base.toml"
    old = toml.read_text()
    assert run(["--base", "1.0.0", "--write", "flashinfer-python==0.0.2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"wrote {toml}: [[patched]] flashinfer-python 0.0.1 -> 0.0.2\nthen:\n")
    new = toml.read_text()
    lines = old.splitlines()
    start = lines.index('distribution = "flashinfer-python"') - 2
    changed = _changed(old, new)
    assert changed and all(start < i < lines.index("[[runtime]]") for i in changed), changed
    whl = world["fi"]["0.0.2"]
    got = load_base(world["base"])
    assert got.package("flashinfer").version == "0.0.2"
    (art,) = got.package("flashinfer").files
    assert (art.filename, art.sha256, art.size) == (whl.name, sha256(whl), whl.stat().st_size)
    assert got.package("sglang") == load_base_from_text(old, world["base"]).package("sglang")


def load_base_from_text(text: str, like: Path):
    d = like.parent.parent / "old" / like.name
    d.mkdir(parents=True)
    (d / "base.toml").write_text(text)
    return load_base(d)


def test_sglang_bump_takes_the_same_tags_on_the_same_architecture(world, capsys):
    toml = world["base"] / "base.toml"
    assert run(["--base", "1.0.0", "--write", "sglang==0.0.2"]) == 0
    out = capsys.readouterr().out
    files = load_base(world["base"]).package("sglang").files
    want = world["new_sg"][:2]  # manylinux_2_34 for the pinned cp311 / cp312; cp313 is not taken
    assert [(a.filename, a.sha256, a.size) for a in files] == [(w.name, sha256(w), w.stat().st_size) for w in want]
    assert "sglang 0.0.2 also has wheels for cp313, not pinned" in out
    assert "[[patched]] flashinfer-python" not in out
    assert ("sglang 0.0.2 requires 'flashinfer_python==0.0.2', which the base's flashinfer_python 0.0.1 does not "
            "satisfy: bump it too") in out
    assert 'version = "0.0.1"\n\n[[patched.files]]\nfilename = "flashinfer_python-0.0.1' in toml.read_text()


def test_runtime_bump_keeps_the_entry_shape(world, capsys):
    toml = world["base"] / "base.toml"
    assert run(["--base", "1.0.0", "--write", "kern==1.1"]) == 0
    whl = world["kern"]["1.1"]
    text = toml.read_text()
    assert ('version = "1.1"\nrequirement = "kern==1.1"\nindex_url = "https://pypi.org/simple"\nfiles = [\n'
            f'  {{ filename = "{whl.name}", url = "{world["server"].url}/{whl.name}", sha256 = "{sha256(whl)}" }},\n'
            "]\n") in text
    assert "local_label" not in capsys.readouterr().out.split("then:")[1]  # runtime pins are no label input


@pytest.mark.parametrize("argv, words", [
    (["--base", "7.7.7", "sglang==0.0.2"], "unknown base '7.7.7'"),
    (["--base", "1.0.0", "torch==2.0.0"], "base 1.0.0: pins no 'torch' in base.toml"),
    (["--base", "1.0.0", "flashinfer-python==0.0.9"], "flashinfer-python has no release '0.0.9'"),
    (["--base", "1.0.0", "flashinfer-python==0.0.3"], "flashinfer_python-0.0.3-py3-none-any.whl publishes no sha256"),
    (["--base", "1.0.0", "flashinfer-python>=0.0.2"], "expected NAME==VERSION"),
    (["--base", "1.0.0", "flashinfer-python==0.0.1"], "already pins flashinfer-python 0.0.1"),
])
def test_bad_input_exits_2_and_writes_nothing(world, capsys, argv, words):
    toml = world["base"] / "base.toml"
    before = toml.read_bytes()
    assert run([*argv, "--write"]) == 2
    cap = capsys.readouterr()
    assert words in cap.err and cap.out == ""
    assert toml.read_bytes() == before
    assert sorted(p.name for p in world["base"].iterdir()) == ["base.toml", "flashinfer", "sglang"]
