"""patchset/index_json.py: what a mirror legitimately serves still reads (relative URLs, uppercase digests, yanked
files with a reason, old sdists and eggs beside the wheels); the hostile shapes are test/unit/hostile/
test_index_runs_no_code.py's. Against the real HTTP server of the tooling tests (support/wheel_world.py)."""

from __future__ import annotations

import json

import pytest

from sglang_blackwell.errors import UserError
from sglang_blackwell.patchset.index_json import project_url, release

SHA = "ab" * 32


def _serve(server, releases: dict, **top) -> None:
    d = server.root / "pypi" / "demo"
    d.mkdir(parents=True)
    (d / "json").write_text(json.dumps({"info": {"version": "1.0"}, "releases": releases, **top}))


def test_a_mirror_document_reads(server):
    _serve(server, {"1.0": [
        {"filename": "demo-1.0-py3-none-any.whl", "url": "../../files/demo-1.0-py3-none-any.whl",
         "digests": {"sha256": SHA.upper()}, "size": 10, "yanked": False},
        {"filename": "demo-1.0-cp312-cp312-manylinux_2_28_x86_64.whl", "url": "x", "digests": {"sha256": SHA},
         "yanked": "broken build"},
        {"filename": "demo-1.0.tar.gz", "url": "y", "digests": {"sha256": "not checked: an sdist is never taken"}},
        {"filename": "demo-1.0-py2.7.egg", "url": "z", "digests": {}, "size": None},
        {"filename": "demo-1.0-py2-none-any.whl", "url": "w", "digests": {"sha256": ""}},
    ]})
    rel = release("demo", "1.0", server.url)
    (art,) = rel.files
    assert art.url == f"{server.url}/files/demo-1.0-py3-none-any.whl"  # resolved against the document's URL
    assert art.sha256 == SHA and art.size == 10
    assert rel.unhashed == ("demo-1.0-py2-none-any.whl",)


def test_the_project_url_is_the_canonical_name():
    assert project_url("Flashinfer_Python", "https://mirror.example/root/") == \
        "https://mirror.example/root/pypi/flashinfer-python/json"


def test_the_newest_final_release_with_wheels_is_taken(server):
    whl = {"filename": "demo-{v}-py3-none-any.whl", "url": "/demo-{v}-py3-none-any.whl", "digests": {"sha256": SHA}}
    _serve(server, {v: [{k: s.format(v=v) if isinstance(s, str) else s for k, s in whl.items()}]
                    for v in ("1.0", "1.1", "2.0rc1")} | {"1.2": [], "nightly": {"read": "never"}})
    assert release("demo", None, server.url).version == "1.1"


def test_a_project_the_index_lacks_is_its_http_status(server):
    with pytest.raises(UserError, match=r"/pypi/demo/json: HTTP 404"):
        release("demo", None, server.url)
