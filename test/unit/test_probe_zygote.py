"""support.probe: probes forked from a zygote behave like fresh `python -c` interpreters (trees first on the path,
the probe's environment, no state carried from one probe to the next, failures and timeouts reported), a probe
that sets TRITON_INTERPRET forks from a zygote that imported triton with it, and the same probes give the same
answers with SGLB_PROBE_ZYGOTE=0."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from bench_fakes import alive

from support.probe import ProbeError, run_probe

PROBE = """
import json, os, sys
import pkgx
import email  # a stdlib module the zygote has loaded: a probe may mutate it ...
seen = getattr(email, "LEAK", None)
email.LEAK = pkgx.VALUE  # ... and the next probe must not see it
print("noise first")
print(json.dumps({"value": pkgx.VALUE, "env": os.environ.get("PROBE_X"), "seen": seen, "name": __name__,
                  "first_path": sys.path[1], "pythonpath": os.environ["PYTHONPATH"].split(os.pathsep)[0]}))
"""


def _tree(root: Path, value: str) -> Path:
    (root / "pkgx").mkdir(parents=True)
    (root / "pkgx" / "__init__.py").write_text(f"import os\nVALUE = {value!r} + os.environ.get('PROBE_X', '')\n")
    return root


@pytest.mark.parametrize("zygote", ["1", "0"])
def test_trees_env_and_isolation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, zygote: str) -> None:
    monkeypatch.setenv("SGLB_PROBE_ZYGOTE", zygote)
    a, b = _tree(tmp_path / "a", "A"), _tree(tmp_path / "b", "B")
    ra = run_probe([a], PROBE, env={"PROBE_X": "1"})
    rb = run_probe([b, a], PROBE)  # the first tree wins, as on PYTHONPATH
    assert (ra["value"], ra["env"], ra["seen"], ra["name"]) == ("A1", "1", None, "__main__")
    assert (rb["value"], rb["env"], rb["seen"]) == ("B", None, None)  # nothing carried over from the first probe
    assert ra["first_path"] == ra["pythonpath"] == str(a) and rb["first_path"] == str(b)


@pytest.mark.parametrize("zygote", ["1", "0"])
def test_failures_carry_exit_code_and_traceback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                zygote: str) -> None:
    monkeypatch.setenv("SGLB_PROBE_ZYGOTE", zygote)
    with pytest.raises(ProbeError, match=r"(?s)probe exited 1.*ZeroDivisionError"):
        run_probe([], "print('{}')\n1 / 0\n")
    with pytest.raises(ProbeError, match="probe exited 3"):
        run_probe([], "import sys\nprint('{}')\nsys.exit(3)\n")
    with pytest.raises(ProbeError, match="probe exited 0"):  # no JSON line at all
        run_probe([], "print('hello')\n")


def test_timeout_kills_the_probe_and_what_it_started(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SGLB_PROBE_ZYGOTE", "1")
    pids = tmp_path / "pids"
    code = f"""
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
open({str(pids)!r}, "w").write(f"{{os.getpid()}} {{child.pid}}")
time.sleep(60)
"""
    t0 = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        run_probe([], code, timeout=4)
    assert time.monotonic() - t0 < 30
    for pid in map(int, pids.read_text().split()):
        deadline = time.monotonic() + 10
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(pid), f"pid {pid} survived the probe's timeout"
    assert run_probe([], "print('{\"ok\": 1}')") == {"ok": 1}  # the zygote still serves


def test_zygote_preloads_what_sglang_imports() -> None:
    # the point of the zygote: torch is already imported when a probe starts (so it costs no import time there)
    if os.environ.get("SGLB_PROBE_ZYGOTE") == "0":
        pytest.skip("SGLB_PROBE_ZYGOTE=0")
    r = run_probe([], "import json, sys\nprint(json.dumps({'torch': 'torch' in sys.modules}))")
    assert r == {"torch": True}


# where the probe runs (its parent, what was imported before it started) and how triton was imported there
WHERE = """
import json, os, sys
out = {"ppid": os.getppid(), "torch": "torch" in sys.modules, "triton": "triton" in sys.modules,
       "interpret": os.environ.get("TRITON_INTERPRET")}
if out["triton"]:
    import triton
    import triton.language as tl
    out["helper"] = type(tl.cdiv).__name__  # made by `@jit` when triton was imported: by the zygote
    if out["interpret"] == "1":
        import torch

        @triton.jit
        def _k(Out, n):
            tl.store(Out + tl.program_id(0), tl.cdiv(n, 4))  # an interpreted kernel calling triton's own helper

        o = torch.zeros(2, dtype=torch.int32)
        _k[(2,)](o, 10)
        out["kernel"], out["knob"], out["cdiv"] = type(_k).__name__, triton.knobs.runtime.interpret, o.tolist()
print(json.dumps(out))
"""


def test_triton_interpret_forks_from_a_zygote_that_imported_triton_interpreted(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """TRITON_INTERPRET is read at `import triton`: a probe that sets it once got a fresh interpreter (all of
    torch's imports again, ~10 s a probe). It now forks from a zygote of its own, started with TRITON_INTERPRET=1
    in its environment, and a probe without it from the other zygote."""
    import support.probe as probe

    monkeypatch.setenv("SGLB_PROBE_ZYGOTE", "1")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    plain = run_probe([], WHERE)
    interp = run_probe([], WHERE, env={"TRITON_INTERPRET": "1"})
    plain2 = run_probe([], WHERE)
    # forked: torch already imported, the parent a zygote (a fresh `python -c` is the pytest process's child)
    assert interp["torch"] and interp["ppid"] != os.getpid(), interp  # before: torch not loaded, pytest's child
    assert plain["torch"] and plain["ppid"] == plain2["ppid"] != interp["ppid"], (plain, plain2, interp)
    assert interp["ppid"] == probe._zygotes[("1",)].proc.pid and plain["ppid"] == probe._zygotes[(None,)].proc.pid
    assert (interp["interpret"], plain["interpret"]) == ("1", None)
    if importlib.util.find_spec("triton") is None:
        return
    assert interp["triton"] and plain["triton"]  # preloaded by each zygote ...
    assert interp["helper"] == "InterpretedFunction" and plain["helper"] == "JITFunction"  # ... as its key says
    assert (interp["kernel"], interp["knob"], interp["cdiv"]) == ("InterpretedFunction", True, [3, 3])


def test_zygote_off_gives_fresh_interpreters_whatever_the_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SGLB_PROBE_ZYGOTE", "0")
    for env in (None, {"TRITON_INTERPRET": "1"}):
        r = run_probe([], WHERE, env=env)
        assert (r["ppid"], r["torch"], r["triton"]) == (os.getpid(), False, False), (env, r)


def test_protocol_lines_written_together_are_all_read() -> None:
    """A probe that ends at once: the zygote writes its "pid" and "rc" lines back to back, and they may arrive in
    one read. Each must be read while the zygote lives on (select() on a buffered file object hung here for the
    whole timeout: the next line was already in the object's buffer). The zygote's end of the pipe is played by a
    program that writes three protocol lines in one write and stays alive."""
    from support.probe import _Zygote

    three = ("import sys, time; sys.stdout.write('{\"ready\": 1}\\n{\"pid\": 1}\\n{\"rc\": 0}\\n'); "
             "sys.stdout.flush(); time.sleep(60)")
    z = _Zygote([sys.executable, "-c", three])  # reads "ready"
    try:
        assert z._read(10) == {"pid": 1}  # before: TimeoutError after 10 s, the line sitting in the file's buffer
        assert z._read(10) == {"rc": 0}
    finally:
        z.close()
