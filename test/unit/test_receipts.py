"""The one receipt envelope."""

from __future__ import annotations

import json

import pytest

from sglang_blackwell.receipts import ENVELOPE_KEYS, make_receipt, validate_receipt, write_receipt


def test_envelope_has_every_key_and_validates(tmp_path):
    r = make_receipt("test", {"x": 1}, base="0.5.9", tp=2, machine={"gpu_name": "H200", "gpu_count": 2},
                     versions={"sglang": "0.5.14"}, extra_detail=[1, 2])
    assert set(ENVELOPE_KEYS) <= set(r) and r["extra_detail"] == [1, 2]
    assert validate_receipt(r) == []
    assert r["versions"]["torch"] is None and r["machine"]["links"] is None  # keys present even if unknown
    p = write_receipt(r, tmp_path / "out" / "r.json")
    assert json.loads(p.read_text())["summary"] == {"x": 1}


@pytest.mark.parametrize("drop", ["summary", "machine", "schema", "tp"])
def test_invalid_receipt_is_not_written(tmp_path, drop):
    r = make_receipt("test", {"x": 1}, versions={})
    del r[drop]
    with pytest.raises(ValueError, match="invalid receipt"):
        write_receipt(r, tmp_path / "r.json")
    assert not (tmp_path / "r.json").exists()
