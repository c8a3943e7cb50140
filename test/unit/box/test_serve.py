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
