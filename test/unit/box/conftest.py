"""What the box tests share: sglang 0.5.23's own Python sources (its pinned wheel, fetched through our cache) for
the tests that ask sglang's own argument parser what it reads."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest


@pytest.fixture
def sglang_0523_tree(tmp_path: Path) -> Path:
    """A directory with the pinned sglang 0.5.23 wheel's .py files (skips without the network and no cache)."""
    from sglang_blackwell.patchset.bases import get_base
    from sglang_blackwell.patchset.fetch import fetch

    art = get_base("0.5.23").package("sglang").files_for(None)[0]
    try:
        whl = fetch(art)
    except Exception as e:  # no network in this run
        pytest.skip(f"cannot fetch {art.filename}: {e}")
    tree = tmp_path / "tree"
    with zipfile.ZipFile(whl) as z:
        z.extractall(tree, [n for n in z.namelist() if n.startswith("sglang/") and n.endswith(".py")])
    return tree
