"""The README's patch table is generated from patches/ (carried patch per base, or since which upstream release
upstream has the change); the README's copy must be the current one."""

from __future__ import annotations

from pathlib import Path

import pytest

from sglang_blackwell.cli import main
from sglang_blackwell.errors import UserError
from sglang_blackwell.patchset.bases import list_bases
from sglang_blackwell.patchset.patch_table import BEGIN, END, current_block, markdown_table, rows, update_block

README = Path(__file__).resolve().parents[3] / "README.md"


def test_readme_table_is_current(monkeypatch):
    monkeypatch.delenv("SGLANG_BLACKWELL_PATCHES", raising=False)
    assert current_block(README) == markdown_table(list_bases()), \
        "README.md's patch table is stale: run `sglang-blackwell report --update README.md`"


def test_rows_say_carried_or_absorbed_since(monkeypatch):
    monkeypatch.delenv("SGLANG_BLACKWELL_PATCHES", raising=False)
    by_id = {r.logical_id: r for r in rows(list_bases())}
    assert by_id["P1"].cells == {"0.5.9": "`0001-trtllm-comm-builds-for-sm12x`",
                                 "0.5.14": "`0001-trtllm-comm-builds-for-sm12x`",
                                 "0.5.23": "absorbed: upstream since flashinfer-python 0.6.17"}
    assert by_id["P3"].cells["0.5.14"] == "absorbed: upstream since sglang 0.5.14"
    assert by_id["P4"].cells["0.5.23"] == "absorbed: upstream since sglang 0.5.23"
    assert by_id["P2"].cells["0.5.23"] == "`0001-fusion-gate-accepts-sm12x`"
    # P8 / P9 (split-KV verify, first-use warm-up): the 0.5.14 and 0.5.23 lines only; 0.5.9 has neither the
    # split-KV verify kernels nor the JIT paths they fix, so nothing to carry there yet
    assert by_id["P8"].cells == {"0.5.14": "`0006-splitkv-verify-mla-on-cuda`",
                                 "0.5.23": "`0005-splitkv-verify-mla-on-cuda`"}
    assert by_id["P9"].cells["0.5.14"] == "`0007-warmup-first-use-compiles`"
    assert by_id["P11"].cells == {"0.5.14": "`0008-splitkv-draft-extend-on-cuda`",
                                  "0.5.23": "`0007-splitkv-draft-extend-on-cuda`"}
    # P10 / P12 (request fields checked, admin endpoints closed beyond loopback): every line
    assert by_id["P10"].cells == {"0.5.9": "`0007-request-fields-checked-against-the-model`",
                                  "0.5.14": "`0009-request-fields-checked-against-the-model`",
                                  "0.5.23": "`0008-request-fields-checked-against-the-model`"}
    assert set(by_id["P12"].cells) == {"0.5.9", "0.5.14", "0.5.23"}
    assert by_id["P13"].cells == {"0.5.14": "`0011-triton-gqa-decode-splits-by-context`",
                                  "0.5.23": "`0010-triton-gqa-decode-splits-by-context`"}
    assert [r.logical_id for r in rows(list_bases())] == [f"P{i}" for i in range(1, 15)]


def test_update_block_rewrites_only_the_block(tmp_path, tiny_base, capsys):
    doc = tmp_path / "doc.md"
    doc.write_text(f"# t\nbefore\n{BEGIN}\nold\n{END}\nafter\n")
    assert main(["report", "--update", str(doc)]) == 0
    text = doc.read_text()
    assert text.startswith("# t\nbefore\n") and text.endswith(f"{END}\nafter\n")
    assert "| P9 | sglang | gate: accept 12 | Pending | `0001-gate-accepts-12` |" in text
    assert main(["report", "--update", str(doc)]) == 0
    assert "already current" in capsys.readouterr().out
    doc.write_text("no markers\n")
    with pytest.raises(UserError, match="needs exactly one"):
        update_block(doc, "x")
