"""NCCL's config files as NCCL reads them (box/nccl_conf.py), checked against the real libnccl.so.2 of two
releases on either side of NCCL's change of reader (2.28.9: the lab image's; 2.30.7: base 0.5.23's), on files
built to hit every rule: comments, whitespace, '=' handling, CRLF, latin-1, NUL bytes, long lines, duplicates,
and which file wins."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from sglang_blackwell.box import nccl_conf as conf
from support.real_nccl import WHEELS, nccl_env, nccl_home

# every rule of setEnvFile, one line each (bytes: the file is not text to NCCL)
TRICKY = b"".join([
    b"# a comment=with an equals sign\n",
    b"#NCCL_HASHED=1\n",
    b"  # indented=not a comment\n",
    b"NCCL_PLAIN=1\n",
    b"NCCL_SPACED = 2\n",
    b" NCCL_LEADING=3\n",
    b"NCCL_TRAILING=4 \n",
    b"NCCL_PLAIN=again\n",  # the first line for a name wins
    b"NCCL_CRLF=5\r\n",
    b"NCCL_NO_EQUALS 6\n",
    b"NCCL_EMPTY=\n",
    b"NCCL_EQ=a=b\n",
    b"=no name\n",
    b"NCCL_LATIN1=caf\xe9\n",
    b"NCCL_NUL=ab\x00cd\n",
    b"NCCL_QUOTED=\"q\" # not an inline comment\n",
    b"NCCL_LONG=" + b"x" * 5000 + b"\n",  # value cut at 1023; with fgets the rest is a line of its own
    b"NCCL_SPLIT=" + b"y" * (4095 - 11) + b"NCCL_PIECE=z\n",  # fgets: the 2nd piece is read as a line
    b"N" * 1100 + b"=long name\n",
    b"\n",
    b"   \n",
    b"NCCL_LAST=no newline at the end",
])
USER_FILE = b"NCCL_USER_ONLY=u\nNCCL_BOTH=from the user file\nNCCL_FROM_ENV=file\n"


def model(environ: dict[str, str], version: str) -> dict[str, str]:
    rules = conf.rules_for(version, "test")
    return {k: e.value for k, (e, _) in conf.from_files(conf.read_all(environ, rules), environ).items()}


@pytest.fixture(scope="module", params=sorted(WHEELS))
def real(request) -> tuple[str, Path]:
    home, why = nccl_home(request.param)
    if home is None:
        pytest.skip(why)
    return request.param, home


def base_env(tmp: Path) -> dict[str, str]:
    keep = ("PATH", "LANG", "LC_ALL")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env["HOME"] = str(tmp / "home")
    (tmp / "home").mkdir(exist_ok=True)
    return env


@pytest.mark.network
def test_the_model_reads_every_rule_as_the_real_nccl_does(real, tmp_path) -> None:
    version, home = real
    f = tmp_path / "tricky.conf"
    f.write_bytes(TRICKY)
    env = dict(base_env(tmp_path), NCCL_CONF_FILE=str(f))
    got = nccl_env(home, env)["set"]
    assert got == model(env, version)
    # the points that matter to a user, spelled out (each both in NCCL and in the model)
    assert got["NCCL_PLAIN"] == "1" and "NCCL_SPACED " in got and " NCCL_LEADING" in got
    assert got["NCCL_TRAILING"] == "4 " and got["NCCL_EQ"] == "a=b" and got["NCCL_EMPTY"] == ""
    assert "NCCL_HASHED" not in got and "  # indented" in got and "NCCL_NO_EQUALS 6" not in got
    assert got["NCCL_QUOTED"] == '"q" # not an inline comment' and got["NCCL_NUL"] == "ab"
    assert got["NCCL_LATIN1"] == "caf\udce9" and got["NCCL_LAST"] == "no newline at the end"
    assert len(got["NCCL_LONG"]) == 1023 and len(next(k for k in got if k.startswith("NNN"))) == 1023
    if version >= "2.30":  # fgets: CR stripped, long lines in 4095-byte pieces
        assert got["NCCL_CRLF"] == "5" and got["NCCL_PIECE"] == "z"
    else:  # getline: the CR stays, a long line stays one line
        assert got["NCCL_CRLF"] == "5\r" and "NCCL_PIECE" not in got


@pytest.mark.network
def test_which_file_wins_and_the_environment_over_both(real, tmp_path) -> None:
    version, home = real
    named = tmp_path / "named.conf"
    named.write_bytes(USER_FILE)
    home_file = tmp_path / "home" / ".nccl.conf"
    env = base_env(tmp_path)
    home_file.write_bytes(b"NCCL_HOME_FILE=h\nNCCL_BOTH=from the home file\n")
    with_named = dict(env, NCCL_CONF_FILE=str(named), NCCL_FROM_ENV="env")
    got = nccl_env(home, with_named)["set"]
    assert got == model(with_named, version)
    assert "NCCL_FROM_ENV" not in got, "the environment wins: NCCL leaves the variable as it was"
    assert "NCCL_HOME_FILE" not in got, "NCCL_CONF_FILE set: the home file is not read"
    unset = nccl_env(home, env)["set"]
    assert unset == model(env, version)
    if version >= "2.30":  # $HOME
        assert unset.get("NCCL_HOME_FILE") == "h"
    else:  # the passwd entry's home, not $HOME
        assert "NCCL_HOME_FILE" not in unset
    missing = dict(env, NCCL_CONF_FILE=str(tmp_path / "missing.conf"))
    assert nccl_env(home, missing)["set"] == model(missing, version)  # no fallback to the home file
    assert "NCCL_HOME_FILE" not in model(missing, version)
    empty = dict(env, NCCL_CONF_FILE="")
    assert nccl_env(home, empty)["set"] == model(empty, version)  # empty = unset


def test_precedence_between_files_in_the_model(tmp_path, monkeypatch) -> None:
    """The user's file before /etc/nccl.conf (not writable here: the reading order and merge are checked)."""
    user, etc = tmp_path / "user.conf", tmp_path / "etc.conf"
    user.write_bytes(b"NCCL_A=user\nNCCL_EMPTY=\n")
    etc.write_bytes(b"NCCL_A=etc\nNCCL_B=etc\nNCCL_EMPTY=etc\nNCCL_ENV=etc\n")
    assert [p for p, _ in conf.files_read({"NCCL_CONF_FILE": str(user)})] == [user, conf.ETC_CONF]
    files = [conf.read(user, "NCCL_CONF_FILE"), conf.read(etc, "/etc/nccl.conf")]
    got = {k: (e.value, cf.path) for k, (e, cf) in conf.from_files(files, {"NCCL_ENV": "x"}).items()}
    assert got == {"NCCL_A": ("user", user), "NCCL_EMPTY": ("", user), "NCCL_B": ("etc", etc)}


@pytest.mark.parametrize("version, crlf, hashed", [("2.23.4", "5\r", True), ("2.26.2", "5\r", False),
                                                   ("2.29.7", "5\r", False), ("2.30.3", "5", False)])
def test_rules_follow_the_release(version, crlf, hashed) -> None:
    """The rules as read from each release's param.cc ('#' comments from 2.26, CR stripped from 2.30)."""
    entries, _ = conf.parse(b"#NCCL_HASHED=1\nNCCL_CRLF=5\r\n", conf.rules_for(version))
    vals = {e.name: e.value for e in entries}
    assert vals["NCCL_CRLF"] == crlf and ("#NCCL_HASHED" in vals) is hashed
    assert conf.rules_for(version).conf_file_env
    assert not conf.rules_for("2.22.3").conf_file_env
    assert conf.files_read({"NCCL_CONF_FILE": "/x"}, conf.rules_for("2.22.3"))[0][1] == "~/.nccl.conf"


def test_hazards_name_the_line_and_what_nccl_does() -> None:
    _, hazards = conf.parse(TRICKY, conf.rules_for("2.28.9"))
    text = "\n".join(hazards)
    assert "line 5: NCCL sets 'NCCL_SPACED ' (spaces included), not NCCL_SPACED" in text
    assert "line 6: NCCL sets ' NCCL_LEADING'" in text
    assert "line 7: NCCL_TRAILING='4 ': the value keeps its spaces" in text
    assert "line 8: NCCL_PLAIN again: NCCL keeps the first one (line 4)" in text
    assert "line 9: NCCL_CRLF='5\\r': the value keeps its carriage return" in text
    assert "line 10: no '='" in text and "line 13: empty name" in text
    assert "line 3: only a '#' in the first column starts a comment" in text
    _, newer = conf.parse(TRICKY, conf.rules_for("2.30.7"))  # the CR is dropped there, and still reported
    assert any(h.startswith("line 9: a CRLF line end: NCCL >= 2.30 drops") for h in newer), newer
    _, clean = conf.parse(b"# ok\nNCCL_PROTO=LL\n\nNCCL_ALGO=Ring")
    assert clean == []


def test_unreadable_and_unknown_versions() -> None:
    assert conf.rules_for(None).version == conf.NEWEST and "no NCCL found" in conf.rules_for(None).source
    assert conf.rules_for("2.28.9-1").version == (2, 28, 9)
    assert conf.rules_for("garbage").version == conf.NEWEST
    cf = conf.read(Path("/nonexistent/nccl.conf"), "NCCL_CONF_FILE")
    assert not cf.exists and cf.error is None and cf.values == {}


@pytest.mark.network
def test_the_lab_check_builds_here_against_the_lab_images_nccl(tmp_path) -> None:
    """benchmark/lab/nccl_conf_check.sh --compile-only: the C program compiles and links with nvcc against the
    nccl.h and libnccl.so.2 of nvidia-nccl-cu13 2.28.9 (the lab image's), so the lab call is known to build."""
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    home, why = nccl_home("2.28.9")
    if home is None:
        pytest.skip(why)
    script = Path(__file__).resolve().parents[3] / "benchmark" / "lab" / "nccl_conf_check.sh"
    r = subprocess.run(["bash", str(script), "--compile-only", str(tmp_path / "out")], capture_output=True,
                       text=True, env=dict(os.environ, NCCL_HOME=str(home)), timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"against {home}" in (tmp_path / "out" / "build.log").read_text()
    bad = subprocess.run(["bash", str(script), "--compile-only", str(tmp_path / "out2")], capture_output=True,
                         text=True, env=dict(os.environ, NCCL_HOME=str(tmp_path)), timeout=60)
    assert bad.returncode == 2 and "no nccl.h + libnccl.so.2" in bad.stderr
