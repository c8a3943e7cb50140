"""Bases as data: the real patch tree, and bad base.toml files rejected with the file and key named."""

from __future__ import annotations

import pytest

from sglang_blackwell.errors import UserError
from sglang_blackwell.patchset.bases import get_base, list_bases, load_base, series_for
from support.fake_base import Patched, WheelPin, render_base


def test_real_tree_has_exactly_one_default_the_line_with_every_patch(monkeypatch):
    """The default is 0.5.14: the line every EAGLE-3 receipt measured, with P8, P9, P11 and P13 (split-KV verify
    and draft extend, first-use warm-up, context-sized GQA decode splits), which 0.5.9 lacks."""
    monkeypatch.delenv("SGLANG_BLACKWELL_PATCHES", raising=False)
    bases = list_bases()
    assert [b.name for b in bases if b.default] == ["0.5.14"]
    b = get_base(None)
    assert b.name == "0.5.14" and b.package("sglang").version == "0.5.14"
    assert b.package("flashinfer-python").version == "0.6.12"
    assert b.runtime_artifact("torch").requirement == "torch==2.11.0"
    assert b.runtime_artifact("sglang-kernel").requirement == "sglang-kernel==0.4.4"
    carried = {p.logical_id for p in series_for(b, "sglang").patches}
    older = {p.logical_id for p in series_for(get_base("0.5.9"), "sglang").patches}
    assert {"P8", "P9", "P11", "P13"} <= carried and not {"P8", "P9", "P11", "P13"} & older
    for pkg in b.patched:
        for art in pkg.files:
            assert len(art.sha256) == 64 and art.url.startswith("https://files.pythonhosted.org/")


def test_real_tree_pins_the_known_good_stack_on_the_older_line(monkeypatch):
    monkeypatch.delenv("SGLANG_BLACKWELL_PATCHES", raising=False)
    b = get_base("0.5.9")
    assert not b.default
    assert b.package("sglang").version == "0.5.9"
    assert b.package("flashinfer-python").version == "0.6.4"
    assert b.package("sglang").requires_rewrite["flashinfer_python"] == "flashinfer_python==0.6.4"
    torch = b.runtime_artifact("torch")
    assert torch.requirement == "torch==2.9.1+cu130"
    assert torch.index_url == "https://download.pytorch.org/whl/cu130"
    kernel = b.runtime_artifact("sgl-kernel")
    assert "0.3.21+cu130" in kernel.requirement
    for pkg in b.patched:
        for art in pkg.files:
            assert len(art.sha256) == 64 and art.url.startswith("https://files.pythonhosted.org/")


def _write(tmp_path, text: str, name: str = "1.0"):
    d = tmp_path / name
    d.mkdir()
    (d / "base.toml").write_text(text)
    return d


GOOD = render_base("1.0", [Patched("sglang", "sglang", "0.0.1", [WheelPin(
    "sglang-0.0.1-py3-none-any.whl", "https://example.invalid/sglang-0.0.1-py3-none-any.whl", "a" * 64, 1)])],
    label="sm120.1", role="r")


def test_good_base_loads(tmp_path):
    b = load_base(_write(tmp_path, GOOD))
    assert b.local_version(b.package("sglang")) == "0.0.1+sm120.1"


@pytest.mark.parametrize("mutation,needle", [
    (lambda t: t.replace('cuda = "13.0"\n', ""), "[base]: missing key 'cuda'"),
    (lambda t: t.replace('size = 1\n', ""), "missing key 'size'"),
    (lambda t: t.replace("a" * 64, "A" * 64), "is not 64 lowercase hex digits"),
    (lambda t: t.replace('"sm120.1"', '"cu130"'), "local_label 'cu130'"),
    (lambda t: t.replace('name = "1.0"', 'name = "2.0"'), "does not match its directory"),
    (lambda t: t.replace('package = "sglang"', 'package = "vllm"'), "has no path layout"),
    (lambda t: t.replace("sglang-0.0.1-py3", "sglang-0.0.2-py3"), "is not sglang 0.0.1"),
    (lambda t: t + "\n[[[", "not valid TOML"),
    (lambda t: t.replace('default = true', 'default = true\nabsorbed = { P3 = "PR #1" }'),
     "absorbed.P3 = 'PR #1': must start with the upstream release"),
    (lambda t: t.replace('default = true', 'default = true\nabsorbed = { P3 = "vllm 0.1 (x)" }'),
     "absorbed.P3 = 'vllm 0.1 (x)'"),
])
def test_bad_base_names_file_and_key(tmp_path, mutation, needle):
    d = _write(tmp_path, mutation(GOOD))
    with pytest.raises(UserError) as e:
        load_base(d)
    assert needle in str(e.value)
    assert str(d / "base.toml") in str(e.value)


def test_two_defaults_rejected(tmp_path):
    _write(tmp_path, GOOD, "1.0")
    _write(tmp_path, GOOD.replace('name = "1.0"', 'name = "2.0"'), "2.0")
    with pytest.raises(UserError, match="exactly one base.toml must say `default = true`"):
        list_bases(tmp_path)


def test_unknown_base_lists_the_known_ones(tiny_base):
    with pytest.raises(UserError, match=r"unknown base '0.0.0' \(known: 9.9.9\)"):
        get_base("0.0.0")


def test_absorbed_says_since_which_release(tmp_path):
    b = load_base(_write(tmp_path, GOOD.replace(
        "default = true", 'default = true\nabsorbed = { P4 = "sglang 0.5.23+ (layernorm fallback)" }')))
    assert b.absorbed_since("P4") == ("sglang", "0.5.23")


def test_real_tree_absorbed_facts(monkeypatch):
    monkeypatch.delenv("SGLANG_BLACKWELL_PATCHES", raising=False)
    b = get_base("0.5.23")
    assert {lid: b.absorbed_since(lid) for lid in b.absorbed} == {
        "P1": ("flashinfer-python", "0.6.17"), "P3": ("sglang", "0.5.14"), "P4": ("sglang", "0.5.23")}
