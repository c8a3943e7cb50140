"""RECORD is a CSV file: file names with commas (sglang ships MoE configs named 'E=1,N=14336,....json') must be
quoted, or pip reads extra columns, warns, and cannot uninstall those files."""

from __future__ import annotations

import zipfile

from sglang_blackwell.artifacts.wheel import Entry, add_files, check_record, make_record, write_wheel
from support.wheel_check import installer_problems

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
    assert installer_problems(whl) == []  # an independent reader agrees
    add_files(whl, {"pkg/data/x.so": b"\x7fELF"}, {})
    assert check_record(whl) == []
    assert installer_problems(whl) == []  # an independent reader agrees


def test_an_unquoted_record_is_reported(tmp_path):
    whl = tmp_path / "pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as z:
        z.writestr(COMMA, b"{}")
        z.writestr("pkg-1.0.dist-info/RECORD", f"{COMMA},sha256=x,2\npkg-1.0.dist-info/RECORD,,\n")
    assert any("does not have 3 columns" in p for p in check_record(whl))
    assert installer_problems(whl)  # the independent reader (PyPA's installer) rejects it too


def test_the_independent_reader_catches_what_record_does_not_cover(tmp_path):
    """installer_problems fails where it should: a member changed after RECORD was written, a member RECORD
    does not list, a version in METADATA the file name does not carry."""
    di = "pkg-1.0.dist-info"

    def wheel(name: str, files: dict[str, bytes], record_of: dict[str, bytes] | None = None):
        entries = [Entry(n, d, 0o644 << 16) for n, d in (record_of or files).items()] + [Entry(f"{di}/RECORD", b"", 0)]
        record = make_record(entries, f"{di}/RECORD")
        whl = tmp_path / name
        with zipfile.ZipFile(whl, "w") as z:
            for n, d in files.items():
                z.writestr(n, d)
            z.writestr(f"{di}/RECORD", record)
        return whl

    meta = {f"{di}/METADATA": b"Name: pkg\nVersion: 1.0\n\n", f"{di}/WHEEL": b"Wheel-Version: 1.0\n"}
    good = wheel("pkg-1.0-py3-none-any.whl", {"pkg/a.py": b"a = 1\n", **meta})
    assert installer_problems(good) == [] and check_record(good) == []
    changed = wheel("pkg-1.0-py3-none-any.whl", {"pkg/a.py": b"a = 2\n", **meta}, {"pkg/a.py": b"a = 1\n", **meta})
    assert any("pkg/a.py" in p for p in installer_problems(changed))
    unlisted = wheel("pkg-1.0-py3-none-any.whl", {"pkg/a.py": b"", "pkg/b.py": b"", **meta}, {"pkg/a.py": b"", **meta})
    assert any("pkg/b.py is not mentioned in RECORD" in p for p in installer_problems(unlisted))
    relabelled = wheel("pkg-1.0-py3-none-any.whl",
                       {"pkg/a.py": b"", f"{di}/METADATA": b"Name: pkg\nVersion: 1.0+sm120.1\n\n"})
    assert installer_problems(relabelled) == ["pkg-1.0-py3-none-any.whl: METADATA says version 1.0+sm120.1, the file "
                                              "name 1.0"]
