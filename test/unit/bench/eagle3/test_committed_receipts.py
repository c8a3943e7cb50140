"""Every committed `bench eagle3` receipt (benchmark/results/bench-eagle3_*.json) is re-derived on every CI run
(issue 24 item 9): from the config it records (`config.content`, hash-checked against `config.sha256`, so a config
edited since the run does not matter) and its own runs, written back as a runs file and read by --from-runs' reader,
today's code gives the verdict, summary, aggregate, completeness and cross-check the receipt says. Keys the code
added after a receipt was written may appear; no recorded value may change or go missing."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from sglang_blackwell.bench.eagle3 import launcher
from sglang_blackwell.bench.eagle3.config import recorded_config
from sglang_blackwell.bench.eagle3.config_section import ConfigError
from sglang_blackwell.bench.eagle3.receipt import build_receipt
from sglang_blackwell.bench.eagle3.runs_file import RUN_SCHEMA, runs_from_files

REPO = Path(__file__).resolve().parents[4]
# results/partial/: receipts of lab runs that did not measure every arm (kept out of the README tables), rebuilt too
RECEIPTS = sorted([*(REPO / "benchmark" / "results").glob("bench-eagle3_*.json"),
                   *(REPO / "benchmark" / "results" / "partial").glob("bench-eagle3_*.json")])
JUDGED = ("verdict", "summary", "aggregate", "complete", "crosscheck")


def differences(recorded: Any, rebuilt: Any, at: str) -> list[str]:
    """Where `rebuilt` does not reproduce `recorded`: a value changed, a key or list entry missing (keys only in
    `rebuilt` are additions, not differences)."""
    if isinstance(recorded, dict) and isinstance(rebuilt, dict):
        return [d for k, v in recorded.items()
                for d in (differences(v, rebuilt[k], f"{at}.{k}") if k in rebuilt else [f"{at}.{k}: missing"])]
    if isinstance(recorded, list) and isinstance(rebuilt, list) and len(recorded) == len(rebuilt):
        return [d for i, (a, b) in enumerate(zip(recorded, rebuilt, strict=True))
                for d in differences(a, b, f"{at}[{i}]")]
    return [] if recorded == rebuilt else [f"{at}: recorded {recorded!r:.120}, rebuilt {rebuilt!r:.120}"]


def rebuild(old: dict[str, Any], tmp: Path) -> dict[str, Any]:
    """The receipt --from-runs makes today from the receipt's own config and runs."""
    cfg = recorded_config(old["config"], REPO)
    runs_file = tmp / f"{old['config']['name']}_runs.jsonl"
    with open(runs_file, "w") as f:
        for run in old["runs"]:  # as run_all appended it: the reader adds source and repeat
            rec = {k: v for k, v in run.items() if k not in ("source", "repeat")}
            f.write(json.dumps({"schema": RUN_SCHEMA, "config": cfg.name, "config_sha256": old["config"]["sha256"],
                                "run": rec}) + "\n")
    arms = list(old["arms"])
    runs, mode = runs_from_files(cfg, arms, [runs_file])
    assert mode == old["mode"]
    return build_receipt(cfg, arms, runs, repeats=old["workload"]["repeats"], mode=mode)


def test_every_committed_receipt_is_here():
    assert len(RECEIPTS) >= 8 and {json.loads(p.read_text())["kind"] for p in RECEIPTS} == {"bench-eagle3"}


@pytest.mark.parametrize("receipt", RECEIPTS, ids=lambda p: p.name)
def test_committed_receipt_rebuilds_unchanged(receipt: Path, tmp_path: Path) -> None:
    old = json.loads(receipt.read_text())
    new = rebuild(old, tmp_path)
    assert differences({k: old[k] for k in JUDGED if k in old}, new, "receipt") == []
    assert ("crosscheck" in new) == bool(old["workload"].get("contexts"))  # grid receipts carry the cross-check
    # the API the runs were measured with (receipts before the OpenAI client: /generate) is the recorded config's
    measured_api = old["workload"].get("api", "generate")
    cfg = recorded_config(old["config"], REPO)
    assert cfg.workload.api == measured_api and (measured_api == "generate") == (cfg.model.tokenizer == "none")
    assert new["summary"]["api"] == ("generate" if measured_api == "generate" else "openai")
    if any(not r.get("error") for r in old["runs"]):  # a receipt whose every run failed measured no ITL at all
        assert (new["summary"]["itl_ms_p99"] is None) == (measured_api == "generate")  # only streams have ITL
    # runs recorded before the launcher was: unknown, every launched run counted
    unknown = [r for r in old["runs"] if r["mode"] == "launch" and "launcher" not in r]
    if unknown:
        (entry,) = new["launchers"]
        assert entry["chosen"] == launcher.UNKNOWN and len(entry["runs"]) == len(unknown)


def test_a_changed_result_or_config_is_caught(tmp_path: Path) -> None:
    """The comparison and the hash check can fail: a receipt whose summary was edited, or whose recorded config
    was (the bar raised after the run, as lab-kimi61's was), is not reproduced."""
    old = json.loads((REPO / "benchmark/results/bench-eagle3_lab-kimi61_20261201T105128Z.json").read_text())
    edited = copy.deepcopy(old)
    edited["summary"]["speedup_c1"] = 1.5
    assert differences({k: edited[k] for k in JUDGED if k in edited}, rebuild(old, tmp_path), "receipt") == [
        "receipt.summary.speedup_c1: recorded 1.5, rebuilt 1.3807"]
    bar = copy.deepcopy(old)
    bar["config"]["content"]["verdict"]["min_ratio"]["1"] = 1.3
    with pytest.raises(ConfigError, match=r"'benchmark/lab-kimi61.toml'.*: its content hashes to .*, but the receipt "
                                          r"records sha256 b05c9d1ce760\.\.\.: not the config it was measured with"):
        recorded_config(bar["config"], REPO)
