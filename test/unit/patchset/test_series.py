"""Series and DEP-3 headers as data: the real series are valid; each missing header is named."""

from __future__ import annotations

import pytest

from sglang_blackwell.errors import UserError
from sglang_blackwell.patchset.bases import list_bases, series_for
from sglang_blackwell.patchset.series import header_problems, load_series, parse_patch, validate_series
from support.wheel_world import gate_patch


def test_every_real_series_is_valid_and_has_the_dep3_fields(monkeypatch):
    monkeypatch.delenv("SGLANG_BLACKWELL_PATCHES", raising=False)
    ids = set()
    for b in list_bases():
        for pkg in b.patched:
            s = series_for(b, pkg.package)
            assert validate_series(s) == []
            for p in s.patches:
                assert p.author and p.subject and p.fields["Upstream-Status"] and p.fields["Origin"]
                ids.add((b.name, p.logical_id))
    assert {lid for base, lid in ids if base == "0.5.9"} == {"P1", "P2", "P3", "P4", "P5", "P6", "P7", "P10", "P12",
                                                             "P14"}


@pytest.mark.parametrize("field,needle", [
    ("Upstream-Status: Pending", "missing DEP-3 field Upstream-Status:"),
    ("Origin: vendor, sglang-blackwell tests", "missing DEP-3 field Origin:"),
    ("Forwarded: no", "missing DEP-3 field Forwarded:"),
    ("Last-Update: 2026-11-30", "missing DEP-3 field Last-Update:"),
])
def test_missing_field_named(tmp_path, field, needle):
    p = tmp_path / "0001-x.patch"
    p.write_text(gate_patch().replace(field + "\n", ""))
    assert needle in header_problems(parse_patch(p))


@pytest.mark.parametrize("status,ok", [
    ("Pending", True), ("Backport [https://github.com/x/y/pull/1]", True), ("Submitted [https://x]", True),
    ("Inappropriate [downstream only]", True), ("Maybe", False), ("Backport", False),
])
def test_upstream_status_vocabulary(tmp_path, status, ok):
    p = tmp_path / "0001-x.patch"
    p.write_text(gate_patch().replace("Upstream-Status: Pending", f"Upstream-Status: {status}"))
    probs = [x for x in header_problems(parse_patch(p)) if "Upstream-Status" in x]
    assert (probs == []) is ok, probs


def test_backport_must_cite_a_url(tmp_path):
    p = tmp_path / "0001-x.patch"
    p.write_text(gate_patch().replace("Upstream-Status: Pending", "Upstream-Status: Backport [PR 1]"))
    assert "a Backport must cite the upstream PR or commit URL in Origin:" in header_problems(parse_patch(p))


def test_series_and_files_must_agree(tmp_path):
    d = tmp_path / "sglang"
    d.mkdir()
    (d / "0001-a.patch").write_text(gate_patch())
    (d / "series").write_text("0001-a.patch\n0002-gone.patch\n")
    with pytest.raises(UserError, match=r"lists \['0002-gone.patch'\] but no such file"):
        load_series(d, "b", "sglang")
    (d / "series").write_text("")
    with pytest.raises(UserError, match=r"\['0001-a.patch'\] not listed in series"):
        load_series(d, "b", "sglang")
    (d / "series").write_text("not-a-patch-name\n")
    with pytest.raises(UserError, match="series:1: 'not-a-patch-name' is not a patch name"):
        load_series(d, "b", "sglang")
