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


def _fake_torch(root, cuda_line: str) -> None:
    """A torch distribution whose package cannot be imported (its __init__ raises) and whose version.py says CUDA."""
    pkg = root / "torch"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise ImportError('this torch must not be imported')\n")
    (pkg / "version.py").write_text(f"from typing import Optional\n__version__ = '9.9.9'\n{cuda_line}\n")
    dist = root / "torch-9.9.9.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 9.9.9\n")


@pytest.mark.parametrize(("cuda_line", "want"), [("cuda: Optional[str] = '13.0'", "13.0"),
                                                 ("cuda = '12.8'", "12.8"),
                                                 ("cuda: Optional[str] = None", None)])
def test_versions_read_torch_cuda_without_importing_torch(tmp_path, cuda_line, want):
    """Without a GPU, collect_versions() names torch's CUDA from its version.py and never imports torch: a fake
    torch whose import raises is read, and sys.modules holds no torch afterwards (a real import would cost every CLI
    process 1-2 s)."""
    import os
    import subprocess
    import sys

    from sglang_blackwell import receipts

    if receipts._gpu_visible():
        pytest.skip("a GPU is visible here: collect_versions imports torch for the NCCL version")
    _fake_torch(tmp_path, cuda_line)
    code = ("import json, sys; from sglang_blackwell.receipts import collect_versions; v = collect_versions(); "
            "print(json.dumps([v['torch'], v['cuda'], 'torch' in sys.modules]))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == ["9.9.9", want, False]
