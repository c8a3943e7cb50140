"""`sglang-blackwell serve`: table -> knobs -> the launch command, for a simulated 8x RTX PRO 6000 PCIe box;
the real CLI exec's a stand-in `sglang.launch_server` that reports what it received."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_blackwell.box.allreduce_table import TopologyKey, build_entry, merge_entry, new_table, save_table
from sglang_blackwell.box.serve import plan
from sglang_blackwell.box.topology import Topology
from support.allreduce_results import H200_NET_US, build_results

BOX = Topology.simulated(8, "12.0", kind="SYS", atomics=False)
KEY = TopologyKey("NVIDIA RTX PRO 6000 Blackwell Server Edition", "12.0", 8, "pcie")


@pytest.fixture
def table(tmp_path) -> Path:
    # the lab's measured shape (fused wins small messages) stands in for a PCIe box's measurement
    results = build_results({k: v for k, v in H200_NET_US.items() if not k.startswith("symm")}, tp=8)
    return save_table(merge_entry(new_table(), build_entry(results, KEY)), tmp_path / "table.json")


def test_plan_turns_the_table_into_knobs_flags_and_nccl_profile(table):
    p = plan(["--model-path", "m", "--tp", "8"], topology=BOX, table_path=table, profile=None, environ={},
             sglang_version="0.5.9+sm120.1")
    assert p.line == "0.5.9" and p.tp == 8
    assert "--enable-flashinfer-allreduce-fusion" in p.added_flags
    assert "--disable-custom-all-reduce" in p.added_flags
    assert int(p.env["SGLANG_FLASHINFER_ALLREDUCE_FUSION_MAX_TOKENS"]) >= 3
    assert p.env["NCCL_PROTO"] == "LL" and p.env["NCCL_P2P_LEVEL"] == "SYS"  # pcie-ll for a PCIe-only box
    assert p.argv[1:3] == ["-m", "sglang.launch_server"]
    assert any("table" in w for w in p.why)


def test_lab_line_speaks_its_own_fusion_flag(table):
    p = plan(["--tp", "8"], topology=BOX, table_path=table, profile=None, environ={},
             sglang_version="0.5.14+sm120.1")
    assert "--flashinfer-allreduce-fusion-backend" in p.added_flags and "trtllm" in p.added_flags


def test_user_settings_win(table):
    p = plan(["--tp", "8", "--enforce-disable-flashinfer-allreduce-fusion"], topology=BOX, table_path=table,
             profile=None, environ={"NCCL_PROTO": "Simple", "SGLANG_FLASHINFER_ALLREDUCE_FUSION_MAX_TOKENS": "4"},
             sglang_version="0.5.14")
    assert "--flashinfer-allreduce-fusion-backend" not in p.added_flags
    assert "NCCL_PROTO" not in p.env and "SGLANG_FLASHINFER_ALLREDUCE_FUSION_MAX_TOKENS" not in p.env
    assert any("keeping your 4" in w for w in p.why)


def test_without_a_table_upstream_defaults_plus_nccl(tmp_path):
    p = plan(["--tp", "2"], topology=Topology.simulated(2, "9.0", kind="NV18", atomics=True),
             table_path=tmp_path / "none.json", profile=None, environ={}, sglang_version="0.5.14")
    assert p.added_flags == [] and not any(k.startswith("SGLANG_") for k in p.env)
    assert not any(k.startswith("NCCL_") for k in p.env)  # NVLink: profile none


def test_cli_execs_sglang_with_the_plan(table, tmp_path):
    site = tmp_path / "site"
    (site / "sglang").mkdir(parents=True)
    (site / "sglang" / "__init__.py").write_text("")
    (site / "sglang" / "launch_server.py").write_text(
        "import json, os, sys\n"
        "print(json.dumps({'argv': sys.argv[1:], 'env': {k: v for k, v in os.environ.items() "
        "if k.startswith(('NCCL_', 'SGLANG_FLASHINFER', 'SGLANG_TORCH'))}}))\n")
    di = site / "sglang-0.5.9+sm120.1.dist-info"
    di.mkdir()
    (di / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.9+sm120.1\n")
    topo = tmp_path / "box.json"
    topo.write_text(json.dumps(BOX.to_dict()))
    env = {k: v for k, v in os.environ.items() if not k.startswith("NCCL_")}
    env.update(PYTHONPATH=os.pathsep.join([str(site), env.get("PYTHONPATH", "")]), SGLANG_BLACKWELL_TOPOLOGY=str(topo))
    r = subprocess.run([sys.executable, "-m", "sglang_blackwell.cli", "serve", "--table", str(table), "--",
                        "--model-path", "m", "--tp", "8"], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["argv"][:4] == ["--model-path", "m", "--tp", "8"]
    assert "--enable-flashinfer-allreduce-fusion" in got["argv"]
    assert got["env"]["NCCL_PROTO"] == "LL" and "SGLANG_FLASHINFER_ALLREDUCE_FUSION_MAX_TOKENS" in got["env"]
    assert "sglang-blackwell serve:" in r.stderr and "command:" in r.stderr


def _no_sglang_env(tmp_path: Path) -> dict[str, str]:
    """This interpreter's environment (no sglang in it) on the simulated PCIe box."""
    from sglang_blackwell.box.serve import installed_sglang_version

    assert installed_sglang_version() is None, "needs an environment without sglang"
    topo = tmp_path / "box.json"
    topo.write_text(json.dumps(BOX.to_dict()))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "SGLANG_"))}
    return dict(env, SGLANG_BLACKWELL_TOPOLOGY=str(topo))


def test_dry_run_prints_the_plan_without_sglang(table, tmp_path):
    """Issue 24 item 6: `serve --dry-run -- ...` in an environment without sglang prints the plan (the default
    base line's flags, the table's knobs, the NCCL profile, the command) and exits 0; starting it still needs
    sglang (exit 2, saying so), after the arguments are checked."""
    from sglang_blackwell.patchset.bases import default_base

    env = _no_sglang_env(tmp_path)
    r = subprocess.run([sys.executable, "-m", "sglang_blackwell.cli", "serve", "--table", str(table), "--dry-run",
                        "--", "--model-path", "m", "--tp", "8"], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    line = default_base().name
    assert f"sglang not installed (flags of the {line} line), TP=8" in r.stderr
    assert f"planned for the default base line {line}" in r.stderr
    env_added = next(ln for ln in r.stderr.splitlines() if ln.startswith("  env added: "))
    assert "NCCL_PROTO=LL" in env_added and "SGLANG_FLASHINFER_ALLREDUCE_FUSION_MAX_TOKENS=" in env_added
    flags = next(ln for ln in r.stderr.splitlines() if ln.startswith("  flags added: "))
    assert "--disable-custom-all-reduce" in flags
    command = next(ln for ln in r.stderr.splitlines() if ln.startswith("  command: "))
    assert f"{sys.executable} -m sglang.launch_server --model-path m --tp 8" in command and "NCCL_PROTO=LL" in command
    launch = subprocess.run([sys.executable, "-m", "sglang_blackwell.cli", "serve", "--table", str(table), "--",
                             "--model-path", "m", "--tp", "8"], capture_output=True, text=True, env=env, timeout=60)
    assert launch.returncode == 2 and launch.stderr.strip() == (
        "sglang-blackwell serve: error: sglang is not installed in this environment (sglang-blackwell install); "
        "--dry-run prints the plan without it")
    bad = subprocess.run([sys.executable, "-m", "sglang_blackwell.cli", "serve", "--", "--tp", "0"],
                         capture_output=True, text=True, env=env, timeout=60)
    assert bad.returncode == 2 and "--tp 0: expected a positive integer" in bad.stderr, bad.stderr


def test_missing_table_named(tmp_path):
    r = subprocess.run([sys.executable, "-m", "sglang_blackwell.cli", "serve", "--table", str(tmp_path / "t.json"),
                        "--dry-run", "--", "--tp", "2"], capture_output=True, text=True)
    assert r.returncode == 2 and "t.json: no such file" in r.stderr


def test_pcie_ipc_only_on_the_line_that_has_it(tmp_path):
    """A table where the PCIe-IPC all-reduce wins small messages: serve turns it on for sglang 0.5.23, and
    leaves the older lines alone (they have no such backend)."""
    results = build_results({"nccl": [40, 40, 40], "nccl_norm": [42, 42, 42], "fi_pcie_ipc": [5, 6, 60],
                             "fi_pcie_ipc_norm": [7, 8, 62]}, tokens=[1, 3, 48], tp=8)
    table = save_table(merge_entry(new_table(), build_entry(results, KEY)), tmp_path / "t.json")
    new = plan(["--tp", "8"], topology=BOX, table_path=table, profile=None, environ={}, sglang_version="0.5.23")
    assert new.env["SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"] == "1"
    assert new.env["SGLANG_PCIE_IPC_MAX_NUMEL"] == str(3 * 7168)
    old = plan(["--tp", "8"], topology=BOX, table_path=table, profile=None, environ={}, sglang_version="0.5.14")
    assert "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE" not in old.env
    mine = plan(["--tp", "8"], topology=BOX, table_path=table, profile=None, sglang_version="0.5.23",
                environ={"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": "0"})
    assert "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE" not in mine.env and any("keeping your 0" in w for w in mine.why)


# ---- the TP size sglang will run with (issue 18 item 9) ------------------------------------------------------

def _plan(args: list[str], table: Path):
    return plan(args, topology=BOX, table_path=table, profile=None, environ={}, sglang_version="0.5.14")


def test_the_last_tp_flag_wins_as_in_sglang(table):
    # `-- --tp 2 --tp 8` runs TP=8 in sglang: an 8-GPU PCIe plan, custom all-reduce off
    p = _plan(["--model-path", "m", "--tp", "2", "--tp", "8"], table)
    assert p.tp == 8 and "--disable-custom-all-reduce" in p.added_flags
    assert "TP=8 (--tp 8: sglang keeps the last of --tp 2, --tp 8)" in p.why[0]


@pytest.mark.parametrize("args, tp", [
    (["--tp-size", "8"], 8), (["--tensor-parallel-size=8"], 8), (["--tp=2", "--tensor-parallel-size", "8"], 8),
    (["--te", "8"], 8), (["--tp-s", "4", "--tp", "2"], 2), (["--model-path", "m"], 1),
    (["--tp", "8", "--", "--tp", "2"], 8),  # after a bare --, nothing is a flag
])
def test_tp_aliases_and_abbreviations(table, args, tp):
    assert _plan(args, table).tp == tp


def test_the_yaml_config_is_read_the_way_sglang_merges_it(table, tmp_path):
    cfg = tmp_path / "sglang.yaml"
    cfg.write_text("model-path: m\ntp-size: 8\n")
    p = _plan(["--config", str(cfg)], table)
    assert p.tp == 8 and "--disable-custom-all-reduce" in p.added_flags and f"in {cfg}" in p.why[0]
    assert p.argv[3:5] == ["--config", str(cfg)]  # sglang reads the file itself
    assert _plan(["--tp", "2", "--config", str(cfg)], table).tp == 2  # the command line wins, before or after
    assert _plan(["--config", str(cfg), "--tp", "2"], table).tp == 2
    cfg.write_text("tp: 8\ndisable-custom-all-reduce: true\n")
    p = _plan(["--config", str(cfg)], table)
    assert p.tp == 8 and "--disable-custom-all-reduce" not in p.added_flags  # the file sets it already


@pytest.mark.parametrize("args, yaml, message", [
    (["--tp", "abc"], None, "--tp abc: expected a positive integer (the tensor-parallel size), got 'abc'"),
    (["--tp", "0"], None, "--tp 0: expected a positive integer"),
    (["--tp=-3"], None, "--tp=-3: expected a positive integer"),
    (["--tp", "-3"], None, "--tp -3: expected a positive integer"),
    (["--model-path", "m", "--tp"], None, "--tp: expected the tensor-parallel size after --tp"),
    (["--tp", "--model-path", "m"], None, "--tp: expected the tensor-parallel size after --tp"),
    (["--config", "{tmp}/nope.yaml"], None, "--config {tmp}/nope.yaml: no such file"),
    (["--config", "{tmp}/c.json"], "tp: 8", "--config {tmp}/c.json: sglang reads only .yaml / .yml"),
    (["--config"], None, "--config: expected a YAML file after it"),
    (["--config", "{tmp}/c.yaml", "--config", "{tmp}/c.yaml"], "tp: 8", "--config given twice"),
    (["--config={tmp}/c.yaml"], "tp: 8", "--config={tmp}/c.yaml: sglang merges a config file only as two words"),
    (["--config", "{tmp}/c.yaml"], "tp: [8", "--config {tmp}/c.yaml: not valid YAML"),
    (["--config", "{tmp}/c.yaml"], "- tp\n- 8\n", "--config {tmp}/c.yaml: expected a mapping"),
    (["--config", "{tmp}/c.yaml"], "tp-size: eight\n", "--config {tmp}/c.yaml: tp-size: expected a positive integer"),
    (["--config", "{tmp}/c.yaml"], "tp-size: true\n", "--config {tmp}/c.yaml: tp-size: expected a positive integer"),
    (["--config", "{tmp}/c.yaml"], "8: tp\n", "--config {tmp}/c.yaml: key 8 is not a string"),
])
def test_bad_tp_and_config_input_is_named(table, tmp_path, args, yaml, message):
    from sglang_blackwell.errors import UserError

    for name in ("c.yaml", "c.json"):
        if yaml is not None:
            (tmp_path / name).write_text(yaml)
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    with pytest.raises(UserError) as e:
        _plan(args, table)
    assert message.replace("{tmp}", str(tmp_path)) in str(e.value) and "\n" not in str(e.value)


SGLANG_PARSE = """
import argparse, json, sys
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.server_args_config_parser import ConfigArgumentMerger
out = []
for argv in json.loads(sys.argv[1]):
    p = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(p)
    try:
        if "--config" in argv:
            argv = ConfigArgumentMerger(p).merge_config_with_args(argv)
        out.append(p.parse_args(argv).tp_size)
    except (SystemExit, ValueError):
        out.append("error")
print(json.dumps(out))
"""


def test_the_tp_size_is_the_one_sglangs_own_parser_reads(table, tmp_path, sglang_0523_tree):
    """sglang 0.5.23's own argparse and config merger (its pinned wheel, run on CPU: 0.5.9 and 0.5.14 import
    torchvision at this point) read the same TP size from each command line, and refuse what serve refuses."""
    from sglang_blackwell.errors import UserError

    (tmp_path / "a.yaml").write_text("tp-size: 8\n")
    (tmp_path / "b.yaml").write_text("tp: 4\ntensor-parallel-size: 2\n")
    (tmp_path / "c.yaml").write_text("tp-size: eight\n")
    m = ["--model-path", "m"]
    cases = [[*m, "--tp", "2", "--tp", "8"], [*m, "--tp-size=8", "--tp", "4"], [*m, "--tensor-parallel-size", "8"],
             [*m, "--te", "2"], [*m, "--tp-s", "4"], m, [*m, "--config", str(tmp_path / "a.yaml")],
             [*m, "--tp", "2", "--config", str(tmp_path / "a.yaml")], [*m, "--config", str(tmp_path / "b.yaml")],
             [*m, "--config", str(tmp_path / "b.yaml"), "--tp", "8"], [*m, "--tp", "abc"], [*m, "--tp"],
             [*m, "--tp", "--trust-remote-code"], [*m, "--config", str(tmp_path / "c.yaml")],
             [*m, "--config", str(tmp_path / "a.yaml"), "--config", str(tmp_path / "b.yaml")]]
    env = {**os.environ, "PYTHONPATH": str(sglang_0523_tree), "CUDA_VISIBLE_DEVICES": ""}
    r = subprocess.run([sys.executable, "-c", SGLANG_PARSE, json.dumps(cases)], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    theirs = json.loads(r.stdout.strip().splitlines()[-1])
    ours = []
    for argv in cases:
        try:
            ours.append(_plan(argv, table).tp)
        except UserError:
            ours.append("error")
    assert ours == theirs
