"""`bench eagle3` launches the default launcher, `python3 -m sglang.launch_server`, with the interpreter that has
sglang (issue 24 item 5), and says which in the receipt. Real processes throughout: a stand-in
`sglang/launch_server.py` (it runs test/support/fake_sglang_server.py) on PYTHONPATH, `python3` programs first on
PATH that lack it (this interpreter under -I: no PYTHONPATH) or have it (a wrapper that sets PYTHONPATH), and the
harness launching them in its own sessions."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from bench_fakes import FAKE_SERVER, write_config

from sglang_blackwell.bench.eagle3 import launcher
from sglang_blackwell.bench.eagle3.config import load_config
from sglang_blackwell.bench.eagle3.preflight import module_found
from sglang_blackwell.cli import main

DEFAULT = 'launcher = ["python3", "-m", "sglang.launch_server"]'


@pytest.fixture
def stand_in(tmp_path: Path) -> Path:
    """A directory that, on PYTHONPATH, makes `python -m sglang.launch_server` the fake SGLang server."""
    pkg = tmp_path / "standin" / "sglang"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "launch_server.py").write_text(f"import runpy\nrunpy.run_path({str(FAKE_SERVER)!r}, run_name='__main__')\n")
    return pkg.parent


def python3(d: Path, pythonpath: Path | None) -> Path:
    """d/python3: this interpreter, with `pythonpath` as its only PYTHONPATH, or isolated (-I: none) without."""
    d.mkdir(parents=True, exist_ok=True)
    exe = d / "python3"
    run = f'PYTHONPATH={pythonpath} exec {sys.executable} "$@"' if pythonpath else f'exec {sys.executable} -I "$@"'
    exe.write_text(f"#!/bin/sh\n{run}\n")
    exe.chmod(0o755)
    return exe


def config(tmp_path: Path, launcher_line: str | None) -> Path:
    """The fake pair's 2-arm config launching `launcher_line` (None: no launcher key, the default)."""
    cfg = write_config(tmp_path, model_dirs=True, repeats=1, concurrency="[1]", output_len=16)
    lines = cfg.read_text().splitlines()
    (i,) = [n for n, ln in enumerate(lines) if ln.startswith("launcher = ")]
    lines[i:i + 1] = [launcher_line] if launcher_line else []
    cfg.write_text("\n".join(lines) + "\n")
    return cfg


def receipt(out: Path) -> dict:
    (p,) = sorted(out.glob("bench-eagle3_*Z.json"))
    return json.loads(p.read_text())


def test_the_default_launcher_runs_in_the_interpreter_running_bench(tmp_path, stand_in, monkeypatch, capsys):
    """The issue's case: the first python3 on PATH lacks sglang, the CLI's own interpreter has it."""
    bare = python3(tmp_path / "bin", None)
    monkeypatch.setenv("PATH", str(bare.parent))
    monkeypatch.setenv("PYTHONPATH", str(stand_in))
    out = tmp_path / "out"
    rc = main(["bench", "eagle3", "--config", str(config(tmp_path, None)), "--arms", "eagle3", "--out", str(out),
               "--no-plots"])
    assert rc == 1  # one arm: no baseline to judge against; the launch itself worked
    r = receipt(out)
    want = {"command": [sys.executable, "-m", "sglang.launch_server"], "interpreter": sys.executable,
            "chosen": launcher.RUNNING.format(module="sglang.launch_server"), "tried": []}
    assert r["launchers"] == [{**want, "runs": ["eagle3 repeat 1"]}]
    (run,) = r["runs"]
    assert run["launcher"] == want and run["error"] is None and run["levels"]["1"]["tok_s"] > 0
    assert r["config"]["content"]["server"].get("launcher") is None  # the config as written: its hash unchanged
    assert f"launcher: {sys.executable} -m sglang.launch_server (the interpreter running" in capsys.readouterr().err
    log = (out / f"{sorted(out.glob('*_runs.jsonl'))[0].name[:-len('_runs.jsonl')]}_logs" / "r1-eagle3.log")
    assert log.read_text().startswith(f"$ {sys.executable} -m sglang.launch_server --model-path ")


def test_else_the_first_python3_on_path_that_has_it(tmp_path, stand_in, monkeypatch):
    if module_found(sys.executable, "sglang.launch_server", dict(os.environ)):
        pytest.skip(f"{sys.executable} has sglang installed: it would be chosen first")
    lacking = python3(tmp_path / "bin1", None)
    having = python3(tmp_path / "bin2", stand_in)
    monkeypatch.setenv("PATH", os.pathsep.join([str(lacking.parent), str(having.parent)]))
    monkeypatch.delenv("PYTHONPATH", raising=False)
    out = tmp_path / "out"
    rc = main(["bench", "eagle3", "--config", str(config(tmp_path, DEFAULT)), "--arms", "baseline", "--out", str(out),
               "--no-plots"])
    assert rc == 1  # one arm: no speculative arm to judge; the launch itself worked
    (got,) = receipt(out)["launchers"]
    assert got["command"] == [str(having), "-m", "sglang.launch_server"] and got["interpreter"] == str(having)
    assert got["chosen"] == launcher.ON_PATH.format(module="sglang.launch_server")
    assert got["tried"] == [f"{sys.executable} (sys.executable): no sglang.launch_server",
                            f"{lacking} (on PATH): no sglang.launch_server"]
    assert receipt(out)["runs"][0]["error"] is None


def test_no_interpreter_with_sglang_is_exit_2_naming_what_was_tried(tmp_path, monkeypatch, capsys):
    if module_found(sys.executable, "sglang.launch_server", dict(os.environ)):
        pytest.skip(f"{sys.executable} has sglang installed")
    lacking = python3(tmp_path / "bin", None)
    monkeypatch.setenv("PATH", str(lacking.parent))
    monkeypatch.delenv("PYTHONPATH", raising=False)
    cfg = config(tmp_path, None)
    out = tmp_path / "out"
    assert main(["bench", "eagle3", "--config", str(cfg), "--out", str(out)]) == 2
    (line,) = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert line.startswith(f"sglang-blackwell bench: error: {cfg}: [server] launcher: python3 -m "
                           f"sglang.launch_server: no interpreter finds sglang.launch_server: tried "
                           f"{sys.executable} (sys.executable): no sglang.launch_server; "
                           f"{lacking} (on PATH): no sglang.launch_server; install"), line
    assert line.endswith("install sglang into one of them, or give the interpreter's path as the first word of "
                         "[server] launcher")
    assert not out.exists()


def test_a_launcher_given_by_path_runs_as_written(tmp_path, stand_in, monkeypatch, capsys):
    """An interpreter named by its path is the user's choice, even where the CLI's own one has sglang."""
    lacking = python3(tmp_path / "bin", None)
    monkeypatch.setenv("PYTHONPATH", str(stand_in))
    cfg = config(tmp_path, f'launcher = ["{lacking}", "-m", "sglang.launch_server"]')
    assert main(["bench", "eagle3", "--config", str(cfg), "--out", str(tmp_path / "out")]) == 2
    assert (f"[server] launcher: no module named sglang.launch_server in the environment of {lacking}"
            in capsys.readouterr().err)
    as_written = launcher.Launcher((str(lacking), "-m", "sglang.launch_server"), launcher.AS_WRITTEN)
    assert launcher.resolve(load_config(cfg), [dict(os.environ)]) == as_written
