"""`[verdict] accept_len_arms`: the speculative arms whose accept length the verdict checks. An arm whose draft
length changes at run time (sglang's --speculative-adaptive picks the draft steps per batch size) is judged on its
rate like the others, but has no accept length known before the run: it is left out of the accept check and its
accept length only reported. End to end against the fake SGLang server: the same measured grid passes with the
adaptive arm left out and fails on that arm's accept length without the key; bad values are one line naming it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_fakes import toml_env, write_grid_config

from sglang_blackwell.bench.eagle3.config import ConfigError, load_config
from sglang_blackwell.bench.eagle3.grid_verdict import evaluate_grid
from sglang_blackwell.cli import main

# baseline: a token per 4 ms; eagle3: 2.5 tokens per 5 ms round (2x); the adaptive arm: 2 tokens per 5 ms (1.6x),
# its accept length 2.0 outside the expected 2.5 +- 0.3 that the fixed-length arm meets
ADAPTIVE = f"""
[arms.eagle3-adaptive]
speculative = true
args = ["--speculative-adaptive"]
env = {toml_env({"FAKE_ROUND_MS": "5", "FAKE_ACCEPT_LEN": "2"})}
"""
# low bars: the rates of a fake on a loaded 2-core machine vary by tens of percent, and this test is about which arms
# the accept check judges, not about rates
BARS = "{ 16 = { 1 = 0.8, 2 = 0.8 }, 64 = { 1 = 0.8 } }"


def _config(tmp: Path, verdict_extra: str) -> Path:
    cfg = write_grid_config(tmp, eagle_env={"FAKE_ROUND_MS": "5", "FAKE_ACCEPT_LEN": "2.5"}, min_ratio=BARS,
                            extra=ADAPTIVE, verdict_extra="accept_len_tolerance = 0.3\n" + verdict_extra)
    text = cfg.read_text().replace('speculative = ["eagle3"]', 'speculative = ["eagle3-adaptive", "eagle3"]')
    cfg.write_text(text)
    return cfg


def test_an_adaptive_arm_is_judged_on_its_rate_and_left_out_of_the_accept_check(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = _config(tmp_path, 'accept_len_arms = ["eagle3"]')
    out = tmp_path / "out"
    assert main(["bench", "eagle3", "--config", str(cfg), "--out", str(out)]) == 0
    assert "VERDICT: PASS" in capsys.readouterr().out
    (path,) = sorted(out.glob("bench-eagle3_fakegrid_*Z.json"))
    r = json.loads(path.read_text())
    checks = r["verdict"]["checks"]
    accept = [k for k in checks if k.get("kind") == "accept_len"]
    assert accept and {k["arm"] for k in accept} == {"eagle3"}  # every cell, the fixed-length arm only
    ratio = [k for k in checks if k.get("kind") not in ("accept_len", "first_burst")]
    assert {k["arm"] for k in ratio} == {"eagle3", "eagle3-adaptive"} and all(k["passed"] for k in ratio)
    rows = [row for row in r["verdict"]["table"] if row["arm"] == "eagle3-adaptive"]
    # reported, not judged: the fake's first token comes from the prefill, the other 23 in 12 rounds of 2
    assert rows and all(abs(row["accept_len"] - 23 / 12) < 1e-3 for row in rows), rows

    # the same measurement without the key: every speculative arm's accept length is checked, the adaptive one fails
    plain = load_config(_config(tmp_path / "plain", ""))
    w = plain.workload
    again = evaluate_grid(r["aggregate"], plain.verdict, w.contexts, w.concurrency)
    assert not again["passed"]
    assert any("eagle3-adaptive" in why and "accept length" in why for why in again["reasons"]), again["reasons"]


@pytest.mark.parametrize(("line", "message"), [
    ('accept_len_arms = ["baseline"]', "arm 'baseline' must have speculative = true"),
    ('accept_len_arms = ["eagle4"]', "names arm 'eagle4', which has no [arms.eagle4] table"),
    ("accept_len_arms = []", "lists no arm"),
    ('accept_len_arms = ["eagle3", "eagle3"]', "lists an arm twice"),
    ('accept_len_arms = "eagle3"', "expected a list of strings"),
])
def test_bad_accept_len_arms_is_one_line_naming_the_key(tmp_path: Path, line: str, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        load_config(_config(tmp_path, line))
    text = str(e.value)
    assert "[verdict] accept_len_arms" in text and message in text and "\n" not in text


def test_accept_len_arms_needs_the_check_it_picks_arms_for(tmp_path: Path) -> None:
    cfg = _config(tmp_path, 'accept_len_arms = ["eagle3"]')
    cfg.write_text(cfg.read_text().replace("accept_len_tolerance = 0.3\n", ""))
    with pytest.raises(ConfigError, match=r"\[verdict\] accept_len_arms: needs accept_len_tolerance"):
        load_config(cfg)
