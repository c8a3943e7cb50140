"""pyproject's [tool.setuptools] packages is a hand list (the patches folder is mapped in as a package): every
package folder under python/sglang_blackwell/ must be on it, or the wheel ships without it and the installed CLI
dies on import (bench/setup was left off once: `install-stack` failed with No module named ...bench.setup)."""

from __future__ import annotations

from pathlib import Path

from sglang_blackwell.tomlio import load_file

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_folder_is_in_the_wheel_list():
    listed = set(load_file(ROOT / "pyproject.toml")["tool"]["setuptools"]["packages"])
    src = ROOT / "python"
    have = {".".join(p.parent.relative_to(src).parts) for p in (src / "sglang_blackwell").rglob("__init__.py")}
    missing = sorted(have - listed)
    assert not missing, f"pyproject.toml [tool.setuptools] packages lacks {missing}: add them, or the wheel omits them"
    gone = sorted(p for p in listed - have if not p.startswith("sglang_blackwell._data"))
    assert not gone, f"pyproject.toml [tool.setuptools] packages names folders that are gone: {gone}"


def test_the_license_the_metadata_names_is_shipped():
    project = load_file(ROOT / "pyproject.toml")["project"]
    assert project["license"] == "Apache-2.0"  # an SPDX expression (setuptools >= 77), not the deprecated table
    files = project.get("license-files", [])
    assert files and all((ROOT / f).is_file() for f in files), f"license-files {files}: missing from the checkout"
    assert "Apache License" in (ROOT / files[0]).read_text() and "Version 2.0" in (ROOT / files[0]).read_text()
