"""`[verdict] outputs_match`: every speculative arm's greedy output equal to the baseline's, request by request
(the client's output digests, outputs.py), against real fake-server processes through the CLI; and `[profile]
prompt = "cell"`: the profiler window's request repeats the context's last warm prompt right after its cells (its
prefill served by the radix cache), checked on the prompts the server received."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from bench_fakes import write_config, write_grid_config

from sglang_blackwell.bench.eagle3 import client, outputs, prompts
from sglang_blackwell.bench.eagle3.config import load_config
from sglang_blackwell.bench.eagle3.config_section import ConfigError
from sglang_blackwell.cli import main

from .test_bench_grid_e2e import _write_trace, only, runs_of

FAST = {"FAKE_ROUND_MS": "5", "FAKE_ACCEPT_LEN": "3"}


def bench(*args: str) -> int:
    return main(["bench", "eagle3", *args])


def _run(arm: str, cells: dict, error: str | None = None) -> dict:
    return {"arm": arm, "repeat": 1, "error": error, "cells": cells}


def _cell(first: list, warm: list) -> dict:
    return {"output_digests": warm, "first": {"output_digests": first}}


def test_digest_is_of_the_text_or_the_ids() -> None:
    assert client.output_digest(" t1 t2") == client.output_digest(" t1" + " t2")
    assert client.output_digest(" t1 t2") != client.output_digest(" t1 t3")
    assert client.output_digest([1, 2]) != client.output_digest([2, 1])
    assert len(client.output_digest("")) == 16


def test_check_compares_request_by_request_in_prompt_order() -> None:
    base = _run("baseline", {"16": {"1": _cell(["a"], ["b", "c"])}})
    same = _run("eagle3", {"16": {"1": _cell(["a"], ["b", "c"])}})
    swapped = _run("eagle3", {"16": {"1": _cell(["a"], ["c", "b"])}})
    k = outputs.outputs_check([base, same], "baseline", "eagle3", 16, 1)
    assert (k["passed"], k["compared"], k["differ"]) == (True, 3, 0)
    k = outputs.outputs_check([base, swapped], "baseline", "eagle3", 16, 1)
    assert (k["passed"], k["compared"], k["differ"]) == (False, 3, 2)
    assert k["why"] == ("greedy output differs from the baseline's in 2 of 3 requests with the same prompt (first: "
                        "warm window request 0 (run 1))")
    # a second repeat that differs counts too; a failed run is not read
    k = outputs.outputs_check([base, same, {**swapped, "repeat": 2}, {**swapped, "repeat": 3, "error": "x"}],
                              "baseline", "eagle3", 16, 1)
    assert (k["compared"], k["differ"], k["why"].endswith("(first: warm window request 0 (run 2))")) == (6, 2, True)


def test_check_fails_where_nothing_can_be_compared() -> None:
    base = _run("baseline", {"16": {"1": _cell(["a"], ["b"])}})
    old = _run("eagle3", {"16": {"1": {"first": {}}}})  # recorded before the client kept digests
    k = outputs.outputs_check([base, old], "baseline", "eagle3", 16, 1)
    assert not k["passed"] and "no output digests of the first window recorded" in k["why"]
    k = outputs.outputs_check([base, _run("eagle3", {}, error="boom")], "baseline", "eagle3", 16, 1)
    assert not k["passed"] and k["why"].startswith("no successful run of arm 'eagle3'")
    shorter = _run("eagle3", {"16": {"1": _cell(["a"], [])}})
    assert not outputs.outputs_check([base, shorter], "baseline", "eagle3", 16, 1)["passed"]


def test_lossless_arm_passes_and_every_request_is_compared(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    cfg = write_grid_config(tmp_path, eagle_env=FAST, verdict_extra="outputs_match = true")
    out = tmp_path / "out"
    assert bench("--config", str(cfg), "--out", str(out), "--no-plots") == 0
    r = json.loads(only(out, "*Z.json").read_text())
    checks = [k for k in r["verdict"]["checks"] if k.get("kind") == "outputs"]
    # 4 cells x (c first-burst + 2c warm requests): 3 + 6 + 3 + 6
    assert [(k["context"], k["concurrency"], k["compared"], k["passed"]) for k in checks] == [
        (16, 1, 3, True), (16, 2, 6, True), (64, 1, 3, True), (64, 2, 6, True)]
    run = next(x for x in runs_of(out) if x["arm"] == "baseline")
    assert len(run["cells"]["16"]["2"]["output_digests"]) == 4 and len(run["cells"]["16"]["2"]["first"][
        "output_digests"]) == 2
    assert "outputs: 18 of 18 requests equal to the baseline's greedy output (4 cell x arm checks)" in \
        capsys.readouterr().out


def test_an_arm_whose_output_goes_wrong_fails_the_verdict(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    # the EAGLE-3 server's tokens are one id off from the 20th on, the accept length and speed as good as ever
    cfg = write_grid_config(tmp_path, eagle_env={**FAST, "FAKE_WRONG_FROM": "20"},
                            verdict_extra="outputs_match = true")
    out = tmp_path / "out"
    assert bench("--config", str(cfg), "--out", str(out), "--no-plots") == 1
    r = json.loads(only(out, "*Z.json").read_text())
    assert "context 16, concurrency 1, eagle3 outputs: greedy output differs from the baseline's in 3 of 3 " \
           "requests with the same prompt (first: first window request 0 (run 1))" in r["verdict"]["reasons"]
    assert not [k for k in r["verdict"]["checks"] if not k["passed"] and k.get("kind") != "outputs"]
    assert all(not t["passed"] for t in r["verdict"]["table"])
    assert "outputs: 0 of 18 requests equal" in capsys.readouterr().out


def test_without_the_key_outputs_are_recorded_not_judged(tmp_path: Path) -> None:
    cfg = write_grid_config(tmp_path, eagle_env={**FAST, "FAKE_WRONG_FROM": "20"})
    out = tmp_path / "out"
    assert bench("--config", str(cfg), "--out", str(out), "--no-plots") == 0
    r = json.loads(only(out, "*Z.json").read_text())
    assert not [k for k in r["verdict"]["checks"] if k.get("kind") == "outputs"]
    runs = {x["arm"]: x for x in runs_of(out)}
    assert runs["baseline"]["cells"]["16"]["1"]["output_digests"] != runs["eagle3"]["cells"]["16"]["1"][
        "output_digests"]


def test_outputs_match_is_grid_only(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"\[verdict\] outputs_match: grid mode only"):
        load_config(write_config(tmp_path, verdict_extra="outputs_match = true"))
    with pytest.raises(ConfigError, match=r"\[verdict\] outputs_match"):
        load_config(write_grid_config(tmp_path, verdict_extra="outputs_match = 1"))


def test_profile_prompt_cell_repeats_the_contexts_last_warm_prompt(tmp_path: Path) -> None:
    trace = _write_trace(tmp_path / "t.trace.json.gz", 100.0)
    log = tmp_path / "prompts.log"
    cfg = write_grid_config(
        tmp_path, eagle_env={**FAST, "FAKE_TRACES": str(trace), "FAKE_PROMPT_LOG": str(log)},
        extra='[profile]\nsteps = 2\narms = ["eagle3"]\ncontexts = [16]\ntimeout_s = 20\nprompt = "cell"')
    out = tmp_path / "out"
    assert bench("--config", str(cfg), "--out", str(out), "--no-plots", "--arms", "eagle3") in (0, 1)
    run = runs_of(out)[0]
    assert run["profiles"]["16"]["prompt"] == "cell" and "kernel_classes" in run["profiles"]["16"]
    assert run["prompts"]["used"] == {"16": 9, "64": 9}  # no prompt of its own
    sent = [ln.split() for ln in log.read_text().splitlines()]
    lengths = [n for _, n, _ in sent]
    # ten 16-token requests (the 9 prompts of the cells, then the profiler window's) before every 64-token one
    assert lengths == ["16"] * 10 + ["64"] * 9, lengths
    digests = [d for _, _, d in sent]
    c = load_config(cfg)
    last = prompts.grid_prompt(16, 8, c.workload.prompt_seed, prompts.allowed_ids(c))  # the warm window's last
    assert len(set(digests[:9])) == 9 and digests[9] == hashlib.sha256(
        json.dumps(list(last.input_ids or ())).encode()).hexdigest()[:16]


def test_profile_prompt_refuses_other_values(tmp_path: Path) -> None:
    cfg = write_grid_config(tmp_path, extra='[profile]\nsteps = 2\ncontexts = [16]\nprompt = "reuse"')
    with pytest.raises(ConfigError, match=r"\[profile\] prompt: expected one of 'fresh', 'cell'"):
        load_config(cfg)
