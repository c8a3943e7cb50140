"""An independent reader of the wheels our code writes: PyPA's `installer` (the reference implementation of
installing a wheel) opens the file, matches its name to the one .dist-info directory, and checks every member
against RECORD: listed, well-formed, sha256 and size right. `sglang_blackwell.artifacts.wheel.check_record` is
code under test; this is the second opinion the tests ask for wherever they build a wheel."""

from __future__ import annotations

from pathlib import Path

from installer.exceptions import InstallerError
from installer.sources import WheelFile
from installer.utils import parse_metadata_file, parse_wheel_filename
from packaging.version import Version


def installer_problems(path: Path) -> list[str]:
    """What installer finds wrong with the wheel at `path` (empty: nothing)."""
    try:
        with WheelFile.open(path) as whl:
            whl.validate_record(validate_contents=True)
            meta = parse_metadata_file(whl.read_dist_info("METADATA"))
    except InstallerError as e:  # RECORD problems (all of them) or a bad .dist-info directory
        return list(getattr(e, "issues", None) or [str(e)])
    name = parse_wheel_filename(Path(path).name)
    if Version(meta["Version"]) != Version(name.version):
        return [f"{Path(path).name}: METADATA says version {meta['Version']}, the file name {name.version}"]
    return []
