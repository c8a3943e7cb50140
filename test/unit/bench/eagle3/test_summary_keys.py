"""A bench-eagle3 receipt's summary keys are declared once (bench/eagle3/summary_keys.py): the builder writes exactly
the declared keys, in their order, and no reader (the README table, the text report, the plots, qualify's eagle3
headline) reads a key that is not declared. Adding a field: declare it, compute it, show it where wanted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sglang_blackwell.bench.eagle3 import plots, readme_table, report, summary_keys
from sglang_blackwell.qualify.steps import EAGLE3_HEADLINE

from .test_committed_receipts import RECEIPTS, rebuild


class ReadRecorder(dict[str, Any]):
    """A summary that remembers every key a reader asked it for (subscript, get, in)."""

    def __init__(self, d: dict[str, Any]) -> None:
        super().__init__(d)
        self.read: set[str] = set()

    def __getitem__(self, key: str) -> Any:
        self.read.add(key)
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        self.read.add(key)
        return super().get(key, default)

    def __contains__(self, key: object) -> bool:
        self.read.add(str(key))
        return super().__contains__(key)


def is_grid(r: dict[str, Any]) -> bool:
    return bool(r["workload"].get("contexts"))


def declared_order(r: dict[str, Any]) -> list[str]:
    return list(summary_keys.SUMMARY) + (list(summary_keys.GRID_SUMMARY) if is_grid(r) else [])


def undeclared_reads(path: Path, r: dict[str, Any], tmp: Path, *, draw: bool = False) -> set[str]:
    """The summary keys the README table (row, grid section, the latest-per-config pick), the text report and
    (draw) the plots read of receipt `r` that summary_keys does not declare."""
    r = {**r, "summary": ReadRecorder(r["summary"])}
    readme_table.markdown_table([(path, r)], link_base=tmp)
    readme_table.grid_markdown([(path, r)], link_base=tmp)
    report.report_text(r)
    if draw:
        plots.plot_receipt(r, tmp / path.stem)
    return r["summary"].read - summary_keys.DECLARED


def test_every_key_is_declared_once_with_its_meaning():
    constants = {name: v for name, v in vars(summary_keys).items() if name.isupper() and isinstance(v, str)}
    assert all(name == v.upper() for name, v in constants.items())  # CONSTANT = "constant": nothing renamed
    assert set(constants.values()) == summary_keys.DECLARED
    assert not set(summary_keys.SUMMARY) & set(summary_keys.GRID_SUMMARY)
    assert all(isinstance(m, str) and m.strip() and "\n" not in m
               for m in [*summary_keys.SUMMARY.values(), *summary_keys.GRID_SUMMARY.values()])


@pytest.mark.parametrize("receipt", RECEIPTS, ids=lambda p: p.name)
def test_the_builder_writes_exactly_the_declared_keys(receipt: Path, tmp_path: Path) -> None:
    old = json.loads(receipt.read_text())
    assert set(old["summary"]) <= summary_keys.DECLARED  # older receipts may lack a key, none has another
    assert list(rebuild(old, tmp_path)["summary"]) == declared_order(old)


def test_the_readers_take_declared_keys_only(tmp_path: Path) -> None:
    assert {k for _, keys in readme_table.COLUMNS for k in keys} <= set(summary_keys.SUMMARY)
    assert set(readme_table._FROM_AGGREGATE) <= set(summary_keys.SUMMARY)
    assert set(EAGLE3_HEADLINE) <= set(summary_keys.SUMMARY)  # qualify takes only config.py from bench
    grid, plain = (next(p for p in RECEIPTS if is_grid(json.loads(p.read_text())) == g) for g in (True, False))
    for p in RECEIPTS:
        assert undeclared_reads(p, json.loads(p.read_text()), tmp_path, draw=p in (grid, plain)) == set(), p.name


def test_a_reader_of_an_undeclared_key_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A README column that shows a key nobody declared is named (the recorder sees what the readers read)."""
    p = RECEIPTS[0]
    monkeypatch.setattr(readme_table, "COLUMNS", (*readme_table.COLUMNS, ("c=2", ("speedup_c2",))))
    assert undeclared_reads(p, json.loads(p.read_text()), tmp_path) == {"speedup_c2"}
