"""RECORD is a CSV file: file names with commas (sglang ships MoE configs named 'E=1,N=14336,....json') must be
quoted, or pip reads extra columns, warns, and cannot uninstall those files."""

from __future__ import annotations

import zipfile

from sglang_blackwell.artifacts.wheel import Entry, add_files, check_record, make_record, write_wheel

COMMA = "pkg/configs/E=1,N=14336,device_name=NVIDIA_H200.json"


def test_record_quotes_names_with_commas(tmp_path):
    di = "pkg-1.0+sm120.1.dist-info"
    entries = [Entry(COMMA, b"{}", 0o644 << 16), Entry(f"{di}/METADATA", b"Name: pkg\nVersion: 1.0+sm120.1\n\n", 0),
               Entry(f"{di}/sglang_blackwell.json", b"{}\n", 0), Entry(f"{di}/RECORD", b"", 0)]
    entries[-1].data = make_record(entries, f"{di}/RECORD")
    assert entries[-1].data.decode().splitlines()[0].startswith(f'"{COMMA}",sha256=')
    whl = tmp_path / "pkg-1.0+sm120.1-py3-none-any.whl"
    write_wheel(whl, entries)
    assert check_record(whl) == []
    add_files(whl, {"pkg/data/x.so": b"\x7fELF"}, {})
    assert check_record(whl) == []


def test_an_unquoted_record_is_reported(tmp_path):
    whl = tmp_path / "pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as z:
        z.writestr(COMMA, b"{}")
        z.writestr("pkg-1.0.dist-info/RECORD", f"{COMMA},sha256=x,2\npkg-1.0.dist-info/RECORD,,\n")
    assert any("does not have 3 columns" in p for p in check_record(whl))
