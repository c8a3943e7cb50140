"""qualify's issue files (qualify/attachments.py): `python -m sglang.check_env` run for real from upstream sglang
trees (0.5.23 runs on a CPU; 0.5.9's check_env fails there, a real failure), `nvidia-smi topo -m` from a
stand-in nvidia-smi on PATH (no driver here), and NCCL's topology dump from the allreduce step (a stand-in
bench writes it where NCCL would: the real one needs GPUs; benchmark/lab/nccl_conf_check.sh shows NCCL writing
it on the lab). Where a file cannot be had, the receipt says why."""

from __future__ import annotations

import json
import os
import stat
import sys
import tarfile
from pathlib import Path

import pytest

from sglang_blackwell.box.topology import TOPOLOGY_ENV, Topology
from sglang_blackwell.cli import build_parser, main
from sglang_blackwell.qualify import attachments as att
from sglang_blackwell.qualify import plan as qplan
from sglang_blackwell.qualify import steps as qsteps
from support.trees import TreeFactory

TOPO_M = """\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity
GPU0\t X \tSYS\t0-31\t0
GPU1\tSYS\t X \t32-63\t1

Legend:
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes
"""


def _plan(tmp: Path, *args: str, gpus: int = 2) -> qplan.Plan:
    a = build_parser().parse_args(["qualify", "--out", str(tmp / "q"), "--quiet", *args])
    p = qplan.make_plan(a, topology=Topology.simulated(gpus) if gpus else Topology(notes=["test"]))
    p.out.mkdir(parents=True)
    return p


def executable(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def fake_nvidia_smi(bindir: Path, *, fail: bool = False) -> Path:
    body = ('echo "NVIDIA-SMI has failed because it couldn\'t communicate with the NVIDIA driver."; exit 9'
            if fail else f'[ "$*" = "topo -m" ] || exit 3\ncat <<"EOF"\n{TOPO_M}EOF')
    return executable(bindir / "nvidia-smi", f"#!/bin/sh\n{body}\n")


@pytest.fixture(scope="module")
def sglang_trees(tree_factory: TreeFactory) -> dict[str, Path]:
    return {base: tree_factory.tree(base, "sglang", 0) for base in ("0.5.23", "0.5.9")}


@pytest.mark.slow
def test_check_env_runs_for_real_and_a_failing_one_says_why(tmp_path, monkeypatch, sglang_trees) -> None:
    monkeypatch.syspath_prepend(str(sglang_trees["0.5.23"]))
    monkeypatch.setenv("PYTHONPATH", str(sglang_trees["0.5.23"]))
    plan = _plan(tmp_path / "a")
    a = att.check_env(plan)
    assert (a.status, a.file, a.rc) == ("recorded", att.CHECK_ENV_FILE, 0), a
    text = (plan.out / a.file).read_text()
    assert "sglang: 0.5.23" in text and "PyTorch: " in text and text.startswith("$ ")
    assert a.command == [sys.executable, "-m", "sglang.check_env"]

    monkeypatch.setenv("PYTHONPATH", str(sglang_trees["0.5.9"]))  # its check_env has no CPU path
    plan = _plan(tmp_path / "b")
    a = att.check_env(plan)
    assert a.status == "failed" and a.rc == 1 and a.file == att.CHECK_ENV_FILE
    assert "NameError: name 'env' is not defined" in a.reason and "its output is in the file" in a.reason
    assert "Traceback" in (plan.out / a.file).read_text()


def test_check_env_without_sglang_says_so(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(att.importlib.util, "find_spec", lambda name: None if name == "sglang" else object())
    a = att.check_env(_plan(tmp_path))
    assert (a.status, a.file) == ("unavailable", None) and a.reason == f"sglang is not installed in {sys.executable}"


def test_nvidia_smi_topo_from_path_and_why_not(tmp_path, monkeypatch) -> None:
    bindir = tmp_path / "bin"
    fake_nvidia_smi(bindir)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    plan = _plan(tmp_path / "a")
    a = att.nvidia_smi_topo(plan)
    assert (a.status, a.file, a.command) == ("recorded", att.TOPO_FILE, [str(bindir / "nvidia-smi"), "topo", "-m"])
    assert TOPO_M in (plan.out / a.file).read_text()
    fake_nvidia_smi(bindir, fail=True)
    a = att.nvidia_smi_topo(_plan(tmp_path / "b"))
    assert a.status == "failed" and a.rc == 9 and "couldn't communicate with the NVIDIA driver" in a.reason
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    a = att.nvidia_smi_topo(_plan(tmp_path / "c", gpus=0))
    assert a.status == "unavailable" and a.reason == "nvidia-smi is not on PATH (no NVIDIA driver here: no GPU)"


# a stand-in for `python -m sglang_blackwell.cli bench allreduce ...`: it writes its receipt and, where NCCL
# would (rank 0, at communicator init), the topology dump named by NCCL_TOPO_DUMP_FILE
FAKE_BENCH = r'''#!/usr/bin/env python3
import json, os, sys
args = sys.argv[1:]
out = args[args.index("--out") + 1]
with open(os.environ["NCCL_TOPO_DUMP_FILE"], "w") as f:
    f.write('<system version="1"><cpu numaid="0"><pci busid="0000:01:00.0"><gpu dev="0"/></pci></cpu></system>\n')
json.dump({"summary": {"tp": 2}}, open(out, "w"))
'''


def test_the_allreduce_step_gets_nccl_topo_dump_file_and_the_dump_is_recorded(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv(att.NCCL_TOPO_ENV, raising=False)
    plan = _plan(tmp_path / "a")
    plan.python = str(executable(tmp_path / "fakepy", FAKE_BENCH))
    r = qsteps.step_allreduce(plan)
    assert r.verdict == "passed" and r.details[att.NCCL_TOPO_ENV] == str(plan.out / att.NCCL_TOPO_FILE)
    a = att.nccl_topo_dump(plan, vars(r), dict(os.environ))
    assert (a.status, a.file, a.reason) == ("recorded", att.NCCL_TOPO_FILE, None)
    assert "<system" in (plan.out / a.file).read_text()
    # the user's own NCCL_TOPO_DUMP_FILE is left as it is, and a copy goes into the pack
    users = tmp_path / "mine.xml"
    monkeypatch.setenv(att.NCCL_TOPO_ENV, str(users))
    plan = _plan(tmp_path / "b")
    plan.python = str(executable(tmp_path / "fakepy", FAKE_BENCH))
    r = qsteps.step_allreduce(plan)
    assert att.NCCL_TOPO_ENV not in r.details and users.is_file()
    a = att.nccl_topo_dump(plan, vars(r), dict(os.environ))
    assert a.status == "recorded" and a.reason == f"copied from the user's NCCL_TOPO_DUMP_FILE={users}"
    assert (plan.out / a.file).read_bytes() == users.read_bytes()


def test_no_topology_dump_says_why(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv(att.NCCL_TOPO_ENV, raising=False)
    one = _plan(tmp_path / "a", gpus=1)
    a = att.nccl_topo_dump(one, vars(qsteps.step_allreduce(one)), {})
    assert a.status == "unavailable" and a.reason == ("the allreduce step did not run NCCL: TP=1 (one GPU here): "
                                                      "an all-reduce needs two GPUs")
    ran = {"verdict": "failed", "rc": 2, "reason": "bench allreduce exited with 2: 0 visible"}
    a = att.nccl_topo_dump(_plan(tmp_path / "b"), ran, {})
    assert a.status == "unavailable" and a.reason.startswith("bench allreduce ran (exit 2) but NCCL wrote no "
                                                             "NCCL_TOPO_DUMP_FILE")


def test_the_receipt_lists_every_issue_file_and_the_pack_carries_them(tmp_path, monkeypatch) -> None:
    """qualify end to end with a stand-in nvidia-smi; the steps skipped (--skip, one GPU
    simulated, no model paths), so the topology dump's absence is explained."""
    bindir = tmp_path / "bin"
    fake_nvidia_smi(bindir)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    topo = tmp_path / "one.json"
    topo.write_text(json.dumps(Topology.simulated(1).to_dict()))
    monkeypatch.setenv(TOPOLOGY_ENV, str(topo))
    monkeypatch.delenv(att.NCCL_TOPO_ENV, raising=False)
    out, tarball = tmp_path / "q", tmp_path / "q.tar.gz"
    rc = main(["qualify", "--out", str(out), "--pack", str(tarball), "--skip", "doctor,gpu-tests", "--quiet"])
    assert rc == 0
    receipt = json.loads((out / "qualify.json").read_text())
    listed = {a["name"]: a for a in receipt["attachments"]}
    assert list(listed) == ["check_env", "nvidia_smi_topo", "nccl_topo_dump"]
    assert all(a["asked_by"] for a in listed.values())
    assert receipt["summary"]["attachments"]["nvidia_smi_topo"] == {"status": "recorded", "file": att.TOPO_FILE,
                                                                    "reason": None}
    assert listed["nccl_topo_dump"]["status"] == "unavailable" and "one GPU here" in listed["nccl_topo_dump"]["reason"]
    ce = listed["check_env"]
    if ce["status"] == "unavailable":
        assert ce["reason"].startswith("sglang is not installed")
    with tarfile.open(tarball) as tf:
        names = set(tf.getnames())
    files = {a["file"] for a in listed.values() if a["file"]}
    assert {f"q/{f}" for f in files} <= names and f"q/{att.TOPO_FILE}" in names
