"""`serve` on SM12x: a speculative launch gets the attention backend every receipt measured (triton: P8 and P11 are
its kernels) unless the user chose one; the user's choice is read as sglang's own parser reads it (abbreviations,
per-phase flags, the --config file); doctor names the kernel target-verify runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_blackwell.box.serve import plan
from sglang_blackwell.box.topology import GPU, Topology

SM12X = Topology.simulated(8, "12.0", kind="SYS", atomics=False)
HOPPER = Topology.simulated(8, "9.0", kind="NV18", atomics=True)
SPEC = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "d", "--speculative-eagle-topk", "1"]
M = ["--model-path", "m", "--tp", "8"]


def _plan(args: list[str], topology: Topology = SM12X, tmp_path: Path | None = None):
    none = (tmp_path or Path("/nonexistent")) / "no-table.json"
    return plan(args, topology=topology, table_path=none, profile=None, environ={}, sglang_version="0.5.14+sm120.7")


def _backend_flags(flags: list[str]) -> list[str]:
    return [f"{a} {b}" for a, b in zip(flags, flags[1:], strict=False) if a == "--attention-backend"]


def test_a_speculative_launch_on_sm12x_runs_the_measured_backend():
    p = _plan([*M, *SPEC])
    assert _backend_flags(p.added_flags) == ["--attention-backend triton"]
    assert p.argv[-2:] == ["--attention-backend", "triton"]  # after the user's arguments
    why = next(w for w in p.why if w.startswith("--attention-backend triton"))
    assert "speculation (EAGLE3) on SM12x" in why and "verify_shared_kv" in why


@pytest.mark.parametrize("spec", [["--speculative-al", "EAGLE3"], ["--speculative-algorithm=NEXTN"],
                                  ["--speculative-algo", "EAGLE"]])
def test_speculation_is_read_abbreviated_too(spec):
    assert _backend_flags(_plan([*M, *spec]).added_flags) == ["--attention-backend triton"]


@pytest.mark.parametrize("choice", [["--attention-backend", "flashinfer"], ["--attention-backend=fa3"],
                                    ["--attention-b", "flashinfer"], ["--prefill-attention-backend", "flashinfer"],
                                    ["--decode-a=flashinfer"], ["--prefill-a", "triton"]])
def test_the_users_backend_wins(choice):
    p = _plan([*M, *SPEC, *choice])
    assert _backend_flags(p.added_flags) == []
    why = next(w for w in p.why if w.startswith("attention backend: yours"))
    assert " ".join(choice) in why


def test_a_config_files_backend_and_speculation_count(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("speculative-algorithm: EAGLE3\n")
    assert _backend_flags(_plan([*M, "--config", str(cfg)], tmp_path=tmp_path).added_flags) == [
        "--attention-backend triton"]
    cfg.write_text("speculative-algorithm: EAGLE3\nattention-backend: flashinfer\n")
    p = _plan([*M, "--config", str(cfg)], tmp_path=tmp_path)
    assert _backend_flags(p.added_flags) == []
    assert any(f"--attention-backend flashinfer in {cfg}" in w for w in p.why), p.why


@pytest.mark.parametrize("args, topology, said", [
    ([*M], SM12X, "no --speculative-algorithm"),  # no verify, no draft extend: sglang's default
    ([*M, *SPEC], HOPPER, "capability 9.0"),
    ([*M, *SPEC], Topology(gpus=[GPU(0, "RTX PRO 6000", "12.0", "0000:18:00.0"),
                                 GPU(1, "H100", "9.0", "0000:19:00.0")], links=[]), "not an all-SM12x box"),
    ([*M, *SPEC], Topology(gpus=[], links=[]), "no GPU"),
    ([*M, "--", "--speculative-algorithm", "EAGLE3"], SM12X, "no --speculative-algorithm"),  # after --: no flag
])
def test_no_backend_added_where_the_receipts_say_nothing(args, topology, said):
    p = _plan(args, topology)
    assert _backend_flags(p.added_flags) == []
    assert any(w.startswith("attention backend: sglang's default") and said in w for w in p.why), p.why


def test_a_backend_flag_without_its_value_is_named():
    from sglang_blackwell.errors import UserError

    with pytest.raises(UserError, match="expected an attention backend after --attention-backend"):
        _plan([*M, *SPEC, "--attention-backend"])


SGLANG_PARSE = """
import argparse, json, sys
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.server_args_config_parser import ConfigArgumentMerger
out = []
for argv in json.loads(sys.argv[1]):
    p = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(p)
    if "--config" in argv:
        argv = ConfigArgumentMerger(p).merge_config_with_args(argv)
    a = p.parse_args(argv)
    out.append([a.attention_backend is not None or a.prefill_attention_backend is not None
                or a.decode_attention_backend is not None, a.speculative_algorithm])
print(json.dumps(out))
"""


def test_the_choice_is_the_one_sglangs_own_parser_reads(tmp_path, sglang_0523_tree):
    """sglang 0.5.23's own argparse and config merger (its pinned wheel, on CPU) see a backend chosen and the
    speculative algorithm exactly where serve does."""
    (tmp_path / "a.yaml").write_text("attention-backend: flashinfer\nspeculative-algorithm: EAGLE3\n")
    (tmp_path / "b.yaml").write_text("decode-attention-backend: triton\n")
    m = ["--model-path", "m"]
    cases = [m, [*m, "--speculative-al", "EAGLE3"], [*m, "--speculative-algorithm=NEXTN"],
             [*m, "--attention-b", "flashinfer"], [*m, "--attention-backend=fa3"], [*m, "--prefill-a", "triton"],
             [*m, "--decode-a=flashinfer"], [*m, "--prefill-attention-backend", "flashinfer"],
             [*m, "--config", str(tmp_path / "a.yaml")], [*m, "--config", str(tmp_path / "b.yaml")],
             [*m, "--speculative-algorithm", "EAGLE3", "--speculative-algorithm", "NGRAM"],
             [*m, "--attention-context-parallel-size", "1", "--decode-log-interval", "40"]]
    env = {**os.environ, "PYTHONPATH": str(sglang_0523_tree), "CUDA_VISIBLE_DEVICES": ""}
    r = subprocess.run([sys.executable, "-c", SGLANG_PARSE, json.dumps(cases)], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    theirs = json.loads(r.stdout.strip().splitlines()[-1])
    from sglang_blackwell.box.sglang_argv import read

    ours = [[bool(read(argv).attention_settings), read(argv).speculative] for argv in cases]
    assert ours == theirs


def test_serve_dry_run_on_a_simulated_sm12x_box_names_the_backend(tmp_path):
    """The real CLI, as a user runs it: the plan's flags and command carry --attention-backend triton."""
    topo = tmp_path / "box.json"
    topo.write_text(json.dumps(SM12X.to_dict()))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "SGLANG_"))}
    env["SGLANG_BLACKWELL_TOPOLOGY"] = str(topo)
    env["SGLANG_BLACKWELL_ALLREDUCE_TABLE"] = str(tmp_path / "no-table.json")  # upstream dispatch defaults
    r = subprocess.run([sys.executable, "-m", "sglang_blackwell.cli", "serve", "--dry-run", "--", *M, *SPEC],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    flags = next(ln for ln in r.stderr.splitlines() if ln.startswith("  flags added: "))
    command = next(ln for ln in r.stderr.splitlines() if ln.startswith("  command: "))
    assert "--attention-backend triton" in flags and command.endswith("--attention-backend triton")
