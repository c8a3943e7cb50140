"""cli.main's last-resort net: an exception no code path turned into a UserError is one line that says what was
at fault and where it was raised, plus a crash report with what a bug report needs; never silent."""

from __future__ import annotations

import errno
import re
from pathlib import Path

import pytest

from sglang_blackwell import __version__, cli
from sglang_blackwell.patchset import commands as patchset_commands


@pytest.fixture(autouse=True)
def _tmpdir(monkeypatch, tmp_path):
    """Crash reports go to this test's directory (tempfile reads TMPDIR afresh)."""
    import tempfile

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    monkeypatch.delenv(cli.DEBUG_ENV, raising=False)


def _boom(exc: BaseException):
    def fn(a):
        raise exc
    return fn


def _report_path(err: str) -> Path:
    m = re.search(r"(/\S+-crash-\S+\.txt)", err)
    assert m, err
    return Path(m[1])


def test_a_bug_is_one_line_exit_70_with_a_crash_report(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(patchset_commands, "cmd_report", _boom(ValueError("the table has no column 7")))
    assert cli.main(["report", "--base", "0.5.9"]) == cli.EXIT_INTERNAL
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("sglang-blackwell report: internal error: ValueError: the table has no column 7")
    assert "(unexpected ValueError at test_net.py:" in lines[0] and "a bug of sglang-blackwell" in lines[0]
    report = _report_path(err)
    assert report.parent == tmp_path
    text = report.read_text()
    assert f"sglang-blackwell {__version__}" in text and "command: sglang-blackwell report --base 0.5.9" in text
    assert "Traceback (most recent call last)" in text and "the table has no column 7" in text
    assert "python: " in text and "platform: " in text


def test_a_filesystem_error_names_the_file_exit_2(monkeypatch, capsys, tmp_path):
    gone = tmp_path / "gone.json"
    monkeypatch.setattr(patchset_commands, "cmd_report",
                        _boom(FileNotFoundError(errno.ENOENT, "No such file or directory", str(gone))))
    assert cli.main(["report"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err.startswith(f"sglang-blackwell report: error: {gone}: No such file or directory (unexpected "
                          "FileNotFoundError at test_net.py:")
    assert _report_path(err).is_file()


def test_debug_env_lets_the_traceback_through(monkeypatch):
    monkeypatch.setenv(cli.DEBUG_ENV, "1")
    monkeypatch.setattr(patchset_commands, "cmd_report", _boom(KeyError("x")))
    with pytest.raises(KeyError):
        cli.main(["report"])


def test_an_unwritable_tmpdir_still_says_how_to_get_the_traceback(monkeypatch, capsys, tmp_path):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no" / "such" / "dir"))
    monkeypatch.setattr(patchset_commands, "cmd_report", _boom(RuntimeError("x")))
    assert cli.main(["report"]) == cli.EXIT_INTERNAL
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{cli.DEBUG_ENV}=1" in err, err


def test_usage_errors_are_one_line(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["build", "--python", "3.x"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == ["sglang-blackwell build: error: argument --python: '3.x' is not a CPython "
                                "MAJOR.MINOR, e.g. 3.12 (see sglang-blackwell build --help)"]
