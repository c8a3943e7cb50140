"""The qualify tests' shared fixture: a real pytest JUnit XML (test_suite_receipt, test_gpu_suite_receipt,
test_userpath_receipt read it)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def junit_xml(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("junit")
    (d / "test_sample.py").write_text(textwrap.dedent("""
        import pytest

        @pytest.fixture
        def broken():
            raise RuntimeError("server did not start")

        @pytest.fixture
        def bad_teardown():
            yield
            raise RuntimeError("session left behind")

        def test_ok():
            pass

        def test_ok_too():
            pass

        def test_fails():
            assert 1 == 2, "fused kernel launched 18 times"

        def test_skipped():
            pytest.skip("deadline: 40 s left")

        def test_fixture_error(broken):
            pass

        def test_teardown_error(bad_teardown):
            pass
    """))
    xml = d / "junit.xml"
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(d / "test_sample.py"),
                        f"--junitxml={xml}", "-o", "junit_family=xunit2"], cwd=d, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    return xml
