"""Hostile input for `bench eagle3`, `bench allreduce`, `bench table`, `serve` and `doctor` (issue 18 items 1, 8,
9, 10 and what trying them turned up), each run as a user runs it (a fresh CLI process) and judged by
support/hostile.py: one line naming the thing at fault, exit 2, nothing written or left behind.

Servers the cases start (a port held by someone else, a foreign server answering for ours) are taken down by
pid at the end of each case."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from bench_fakes import dead_port, kill_foreign, race_launcher_config, write_config

from support import hostile
from support.hostile import Case, assert_clean

CONFIG = "fake.toml"  # what write_config writes in the case directory
OUT = "out"  # where a bench case writes (watched: must stay absent on refusal)


@pytest.fixture
def held() -> Iterator[list]:
    """Sockets and foreign pid files a case's setup opens; closed / killed when the test ends."""
    things: list = []
    yield things
    for t in things:
        if isinstance(t, socket.socket):
            t.close()
        elif isinstance(t, Path):
            kill_foreign(t)


def cfg_setup(*edits: tuple[str, str], model_dirs: bool = True, api: str | None = None,
              then: Callable[[Path], None] | None = None) -> Callable[[Path], None]:
    """Write the fake 3-arm config (repeats 1, c=1) into the case directory and apply text edits."""
    def setup(tmp: Path) -> None:
        p = write_config(tmp, model_dirs=model_dirs, repeats=1, concurrency="[1]", api=api)
        text = p.read_text()
        for old, new in edits:
            assert old in text, old
            text = text.replace(old, new)
        p.write_text(text)
        if then is not None:
            then(tmp)
    return setup


def bench_case(id: str, item: str, extra: list[str], names: tuple[str, ...], setup: Callable[[Path], None],
               *, rc: int = 2, watch: tuple[str, ...] = (OUT,), **kw) -> Case:
    return Case(id, item, ["bench", "eagle3", "--config", "{tmp}/" + CONFIG, "--out", "{tmp}/" + OUT, "--no-plots",
                           *extra], names=names, rc=rc, setup=setup, watch=watch, **kw)


# ---- item 1: a busy port, a server that is not ours -------------------------------------------------------------

def test_1_a_busy_explicit_port_is_refused_before_anything_is_written(tmp_path, held):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    held.append(s)
    port = s.getsockname()[1]
    assert_clean(bench_case("bench-busy-port", "1", [], ("[server] port", "in use", f"pid {os.getpid()}"),
                            cfg_setup(("port = 0", f"port = {port}"))), tmp_path)


def _foreign_failed_the_arm(tmp: Path, r: subprocess.CompletedProcess) -> str | None:
    runs = [json.loads(ln)["run"] for f in (tmp / OUT).glob("*_runs.jsonl") for ln in f.read_text().splitlines()]
    if not runs or any(x["levels"] for x in runs):
        return f"the foreign server was measured: {[x['levels'] for x in runs]}"
    if not list(tmp.glob("foreign-*.json")):
        return "no foreign server answered (the case did not happen)"
    return None


def test_1_a_foreign_server_answering_for_ours_fails_the_arm(tmp_path, held):
    held.append(tmp_path)
    case = bench_case("bench-foreign-server-answers", "1", ["--arms", "baseline"], ("not of our server's session",),
                      cfg_setup(then=lambda tmp: race_launcher_config(tmp, tmp / CONFIG)), rc=1, watch=(),
                      after=_foreign_failed_the_arm)
    assert_clean(case, tmp_path)


# ---- item 8: bench input errors are bad input, not regressions --------------------------------------------------

def _write(name: str, data: bytes) -> Callable[[Path], None]:
    def w(tmp: Path) -> None:
        (tmp / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp / name).write_bytes(data)
    return w


RUN_LINE = {"schema": "sglang-blackwell/bench-eagle3-run/1", "config": "fake"}

BENCH_CASES = [
    bench_case("bench-missing-target", "8", [], ("[model] target", "/nonexistent/target", "no such file"),
               cfg_setup(("target = ", 'target = "/nonexistent/target"\n#'))),
    bench_case("bench-missing-draft", "8", [], ("[model] draft", "/nonexistent/draft"),
               cfg_setup(("draft = ", 'draft = "/nonexistent/draft"\n#'))),
    bench_case("bench-missing-launcher", "8", [], ("[server] launcher", "no-such-launcher-xyz", "no such program"),
               cfg_setup(("launcher = ", 'launcher = ["no-such-launcher-xyz"]\n#'))),
    bench_case("bench-launcher-module-missing", "8", [], ("[server] launcher", "no module named no_such_pkg_xyz"),
               cfg_setup(("launcher = ", f'launcher = [{json.dumps(sys.executable)}, "-m", '
                                         '"no_such_pkg_xyz.launch_server"]\n#'))),
    bench_case("bench-launcher-script-missing", "8", [], ("[server] launcher", "/nonexistent/server.py"),
               cfg_setup(("launcher = ", f'launcher = [{json.dumps(sys.executable)}, "/nonexistent/server.py"]\n#'))),
    bench_case("bench-host-not-here", "8", [], ("[server] host", "192.0.2.1"),
               cfg_setup(("[server]", '[server]\nhost = "192.0.2.1"'))),
    bench_case("bench-dead-attach", "8", ["--attach", f"http://127.0.0.1:{dead_port()}",
                                          f"http://127.0.0.1:{dead_port()}"],
               ("--attach", "no healthy server there"), cfg_setup(model_dirs=False)),
    bench_case("bench-attach-not-http", "8", ["--attach", "ftp://x", "ftp://y"], ("--attach", "ftp://x"),
               cfg_setup(model_dirs=False)),
    bench_case("bench-deadline-zero", "8", ["--deadline-s", "0"], ("--deadline-s",), cfg_setup()),
    bench_case("bench-deadline-nan", "8", ["--deadline-s", "nan"], ("--deadline-s",), cfg_setup()),
    bench_case("bench-no-arm", "8", ["--arms", ","], ("--arms",), cfg_setup()),
    bench_case("bench-unknown-arm", "8", ["--arms", "nope"], ("--arms", "nope"), cfg_setup()),
    bench_case("bench-repeats-zero", "8", ["--repeats", "0"], ("--repeats",), cfg_setup()),
    bench_case("bench-out-is-a-file", "8", [], ("--out", "not a directory"), cfg_setup(then=_write(OUT, b"x\n"))),
    bench_case("bench-config-not-utf8", "11", [], (CONFIG, "not UTF-8"),
               cfg_setup(then=_write(CONFIG, b'name = "\xff"\n')), watch=(OUT, CONFIG)),
    bench_case("bench-prompts-not-utf8", "11", [], ("[workload] prompts", "prompts.jsonl", "not UTF-8"),
               cfg_setup(then=_write("prompts.jsonl", b'{"input_ids": [1]}\n\xff\n'))),
    Case("bench-config-missing", "8", ["bench", "eagle3", "--config", "{tmp}/nope.toml", "--out", "{tmp}/" + OUT],
         names=("nope.toml", "not found"), watch=(OUT,)),
    bench_case("bench-from-runs-not-utf8", "11", ["--from-runs", "{tmp}/r_runs.jsonl"],
               ("r_runs.jsonl", "not UTF-8"), cfg_setup(model_dirs=False, then=_write("r_runs.jsonl", b"\xff\n"))),
    bench_case("bench-from-runs-not-objects", "11", ["--from-runs", "{tmp}/r_runs.jsonl"],
               ("r_runs.jsonl:1", "expected a JSON object"),
               cfg_setup(model_dirs=False, then=_write("r_runs.jsonl", b"[1, 2]\n"))),
    bench_case("bench-from-runs-missing", "8", ["--from-runs", "{tmp}/none_runs.jsonl"],
               ("--from-runs", "none_runs.jsonl"), cfg_setup(model_dirs=False)),
]


@pytest.mark.parametrize("case", BENCH_CASES, ids=[c.id for c in BENCH_CASES])
def test_8_bench_eagle3_bad_input(tmp_path, case):
    assert_clean(case, tmp_path)


def test_11_bench_eagle3_from_runs_with_a_bad_run(tmp_path):
    # a runs line of this config (its sha256) whose run is not what the harness writes
    def setup(tmp: Path) -> None:
        from sglang_blackwell.bench.eagle3.config import load_config

        cfg_setup(model_dirs=False)(tmp)
        sha = load_config(tmp / CONFIG).sha256
        line = {**RUN_LINE, "config_sha256": sha, "run": {"arm": "baseline", "mode": "launch", "levels": {"1": 5}}}
        (tmp / "r_runs.jsonl").write_text(json.dumps(line) + "\n")

    assert_clean(bench_case("bench-from-runs-bad-run", "11", ["--from-runs", "{tmp}/r_runs.jsonl"],
                            ("r_runs.jsonl:1", "levels.1"), setup), tmp_path)


# ---- item 9: serve plans for the TP size sglang will run with --------------------------------------------------

def _sglang_here(tmp: Path) -> None:
    """A stand-in sglang 0.5.14 install (its dist-info: serve reads the version) and a simulated 8-GPU PCIe box."""
    from sglang_blackwell.box.topology import Topology

    site = tmp / "site"
    (site / "sglang").mkdir(parents=True)
    (site / "sglang" / "__init__.py").write_text("")
    di = site / "sglang-0.5.14.dist-info"
    di.mkdir()
    (di / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.14\n")
    (tmp / "box.json").write_text(json.dumps(Topology.simulated(8, "12.0", kind="SYS", atomics=False).to_dict()))


SERVE_ENV = {"PYTHONPATH": "{tmp}/site" + os.pathsep + str(hostile.REPO / "python"),
             "SGLANG_BLACKWELL_TOPOLOGY": "{tmp}/box.json", "XDG_CONFIG_HOME": "{tmp}/config"}


def serve_case(id: str, sglang_args: list[str], names: tuple[str, ...], *, rc: int = 2, files: dict | None = None,
               after=None, serve_args: tuple[str, ...] = ()) -> Case:
    def setup(tmp: Path) -> None:
        _sglang_here(tmp)
        for name, data in (files or {}).items():
            (tmp / name).write_bytes(data)

    return Case(id, "9", ["serve", *serve_args, "--dry-run", "--", "--model-path", "m", *sglang_args], names=names,
                rc=rc, setup=setup, env=SERVE_ENV, after=after)


def _plans(tp: int, flag: bool):
    def check(tmp: Path, r: subprocess.CompletedProcess) -> str | None:
        command = next((ln for ln in r.stderr.splitlines() if "command:" in ln), "")
        if f"TP={tp}" not in r.stderr:
            return f"the plan is not for TP={tp}"
        if ("--disable-custom-all-reduce" in command) != flag:
            return f"--disable-custom-all-reduce {'missing from' if flag else 'added to'} {command}"
        return None
    return check


SERVE_CASES = [
    serve_case("serve-last-tp-wins", ["--tp", "2", "--tp", "8"], ("--tp 8",), rc=0, after=_plans(8, True)),
    serve_case("serve-tp-alias-last", ["--tp-size", "8", "--tensor-parallel-size", "2"], ("--tensor-parallel-size 2",),
               rc=0, after=_plans(2, False)),
    serve_case("serve-config-yaml", ["--config", "{tmp}/s.yaml"], ("in {tmp}/s.yaml",), rc=0,
               files={"s.yaml": b"tp-size: 8\n"}, after=_plans(8, True)),
    serve_case("serve-cli-beats-config", ["--tp", "2", "--config", "{tmp}/s.yaml"], ("--tp 2",), rc=0,
               files={"s.yaml": b"tp-size: 8\n"}, after=_plans(2, False)),
    serve_case("serve-tp-not-a-number", ["--tp", "abc"], ("--tp abc",)),
    serve_case("serve-tp-zero", ["--tp", "0"], ("--tp 0",)),
    serve_case("serve-tp-negative", ["--tp=-3"], ("--tp=-3",)),
    serve_case("serve-tp-no-value", ["--tp"], ("--tp",)),
    serve_case("serve-config-missing", ["--config", "{tmp}/nope.yaml"], ("--config", "nope.yaml")),
    serve_case("serve-config-not-yaml", ["--config", "{tmp}/s.json"], ("--config", "s.json", ".yaml"),
               files={"s.json": b'{"tp-size": 8}\n'}),
    serve_case("serve-config-equals", ["--config={tmp}/s.yaml"], ("--config=",), files={"s.yaml": b"tp: 8\n"}),
    serve_case("serve-config-twice", ["--config", "{tmp}/s.yaml", "--config", "{tmp}/s.yaml"], ("--config",),
               files={"s.yaml": b"tp: 8\n"}),
    serve_case("serve-config-bad-yaml", ["--config", "{tmp}/s.yaml"], ("s.yaml", "not valid YAML"),
               files={"s.yaml": b"tp: [8\n"}),
    serve_case("serve-config-not-mapping", ["--config", "{tmp}/s.yaml"], ("s.yaml", "mapping"),
               files={"s.yaml": b"- 8\n"}),
    serve_case("serve-config-tp-not-a-number", ["--config", "{tmp}/s.yaml"], ("s.yaml", "tp-size"),
               files={"s.yaml": b"tp-size: eight\n"}),
    serve_case("serve-config-not-utf8", ["--config", "{tmp}/s.yaml"], ("s.yaml", "not UTF-8"),
               files={"s.yaml": b"tp: \xff\n"}),
    serve_case("serve-table-missing", ["--tp", "8"], ("--table", "t.json"), serve_args=("--table", "{tmp}/t.json")),
    serve_case("serve-table-not-utf8", ["--tp", "8"], ("t.json", "not UTF-8"), serve_args=("--table", "{tmp}/t.json"),
               files={"t.json": b"\xff"}),
    serve_case("serve-table-is-a-directory", ["--tp", "8"], ("site",), serve_args=("--table", "{tmp}/site")),
    serve_case("serve-unknown-profile", ["--tp", "8"], ("--profile nope",), serve_args=("--profile", "nope")),
]


@pytest.mark.parametrize("case", SERVE_CASES, ids=[c.id for c in SERVE_CASES])
def test_9_serve(tmp_path, case):
    assert_clean(case, tmp_path)


# ---- item 10: doctor --tp, bench --tp; doctor's other options ------------------------------------------------

DOCTOR_CASES = [
    Case("doctor-tp-negative", "10", ["doctor", "--tp", "-3", "--out", "{tmp}/d.json"], names=("--tp", "-3"),
         watch=("d.json",)),
    Case("doctor-tp-zero", "10", ["doctor", "--tp", "0", "--out", "{tmp}/d.json"], names=("--tp", "0"),
         watch=("d.json",)),
    Case("doctor-python-missing", "10", ["doctor", "--python", "{tmp}/no/python3"], names=("--python", "no/python3")),
    Case("doctor-out-is-a-directory", "11", ["doctor", "--out", "{tmp}/dir"], names=("--out", "is a directory"),
         setup=lambda tmp: (tmp / "dir").mkdir(), watch=("dir",)),
    bench_case("bench-tp-zero", "10", ["--tp", "0"], ("--tp",), cfg_setup()),
    bench_case("bench-tp-negative", "10", ["--tp", "-3"], ("--tp", "-3"), cfg_setup()),
    Case("allreduce-tp-one", "10", ["bench", "allreduce", "--tp", "1"], names=("--tp",),
         env={"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}),
]


@pytest.mark.parametrize("case", DOCTOR_CASES, ids=[c.id for c in DOCTOR_CASES])
def test_10_tp_and_doctor_options(tmp_path, case):
    assert_clean(case, tmp_path)


# ---- found by trying: bench allreduce --from-receipt, bench table ------------------------------------------------

def _receipt(tmp: Path) -> None:
    from sglang_blackwell.bench.allreduce import report as ar_report
    from sglang_blackwell.receipts import write_receipt
    from support.allreduce_results import H200_NET_US, build_results

    write_receipt(ar_report.build_receipt(build_results(H200_NET_US), layers=61), tmp / "ar.json")


def allreduce_case(id: str, data: bytes | None, names: tuple[str, ...], extra: tuple[str, ...] = ()) -> Case:
    setup = _write("ar.json", data) if data is not None else _receipt
    return Case(id, "11", ["bench", "allreduce", "--from-receipt", "{tmp}/ar.json", "--no-plot", *extra], names=names,
                setup=setup, watch=("ar.json", "dir"))


OTHER_CASES = [
    Case("allreduce-receipt-missing", "11", ["bench", "allreduce", "--from-receipt", "{tmp}/nope.json"],
         names=("--from-receipt", "nope.json")),
    allreduce_case("allreduce-receipt-not-json", b"{\n", ("ar.json", "not JSON")),
    allreduce_case("allreduce-receipt-not-utf8", b"\xff\xfe", ("ar.json", "not UTF-8")),
    allreduce_case("allreduce-receipt-a-list", b"[1]\n", ("ar.json", "not a bench-allreduce receipt")),
    allreduce_case("allreduce-receipt-bad-results", b'{"results": {"config": {"tp": 2}}}\n',
                   ("ar.json", "'results' is not what bench allreduce writes")),
    allreduce_case("allreduce-out-is-a-directory", None, ("--out", "is a directory"), ("--out", "{tmp}/dir")),
    Case("table-receipt-not-utf8", "11", ["bench", "table", "--results", "{tmp}/results"],
         names=("bad.json", "not UTF-8 text"), setup=_write("results/bad.json", b"\xff{}"), watch=("results",)),
    Case("table-update-not-utf8", "11", ["bench", "table", "--results", "{tmp}/results", "--update", "{tmp}/R.md"],
         names=("--update", "R.md", "not UTF-8"), setup=lambda tmp: ((tmp / "results").mkdir(),
                                                                    (tmp / "R.md").write_bytes(b"\xff")),
         watch=("R.md",)),
]


@pytest.mark.parametrize("case", OTHER_CASES, ids=[c.id for c in OTHER_CASES])
def test_11_bench_allreduce_and_table(tmp_path, case):
    if "dir" in case.argv[-1]:
        (tmp_path / "dir").mkdir()
    assert_clean(case, tmp_path)


def test_11_table_update_through_a_symlink_keeps_the_link(tmp_path):
    from sglang_blackwell.bench.eagle3.readme_table import BEGIN, END

    def setup(tmp: Path) -> None:
        (tmp / "results").mkdir()
        (tmp / "real.md").write_text(f"# R\n{BEGIN}\nold\n{END}\n")
        (tmp / "R.md").symlink_to(tmp / "real.md")

    def after(tmp: Path, r: subprocess.CompletedProcess) -> str | None:
        if not (tmp / "R.md").is_symlink():
            return "R.md is no longer a symlink"
        return None if "(no receipts yet)" in (tmp / "real.md").read_text() else "the linked file was not updated"

    assert_clean(Case("table-update-symlink", "11", ["bench", "table", "--results", "{tmp}/results", "--update",
                                                     "{tmp}/R.md"], names=(), rc=0, setup=setup, after=after),
                 tmp_path)
