"""Helpers for the `bench eagle3` tests: configs that launch test/support/fake_sglang_server.py (a real HTTP
server in a real process, started by the harness exactly like sglang.launch_server) with known speeds."""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path

FAKE_SERVER = Path(__file__).resolve().parents[1] / "support" / "fake_sglang_server.py"


def write_prompts(path: Path, n: int = 8, ids: bool = True) -> Path:
    rng = random.Random(0)
    with open(path, "w") as f:
        for i in range(n):
            obj = ({"input_ids": [rng.randrange(100, 2148) for _ in range(12)]} if ids
                   else {"text": f"prompt number {i}: say something"})
            f.write(json.dumps(obj) + "\n")
    return path


def toml_env(env: dict[str, str]) -> str:
    return "{ " + ", ".join(f'{k} = "{v}"' for k, v in env.items()) + " }"


def write_config(tmp: Path, *, name: str = "fake", eagle_env: dict[str, str] | None = None,
                 fusion_env: dict[str, str] | None = None, baseline_env: dict[str, str] | None = None,
                 repeats: int = 2, concurrency: str = "[1, 2]", stream: bool = False, extra: str = "",
                 verdict_extra: str = "") -> Path:
    """A 3-arm config (or 2 arms with fusion_env=None) against the fake server. Default speeds: baseline 4 ms
    per token; eagle3 3 tokens per 6 ms round (~1.8x); eagle3+fusion 3 tokens per 5 ms round."""
    write_prompts(tmp / "prompts.jsonl")
    eagle_env = eagle_env or {"FAKE_ROUND_MS": "6", "FAKE_ACCEPT_LEN": "3"}
    fusion = ""
    if fusion_env is not None:
        fusion = f'''
[arms."eagle3+fusion"]
speculative = true
args = ["--fake-fusion-on"]
env = {toml_env(fusion_env)}
'''
    text = f'''
name = "{name}"
[model]
target = "/fake/target"
draft = "/fake/draft"
tokenizer = "none"
[server]
tp = 2
launcher = [{json.dumps(sys.executable)}, {json.dumps(str(FAKE_SERVER))}]
port = 0
startup_timeout_s = 20
teardown_grace_s = 2
args = ["--disable-radix-cache"]
env = {{ FAKE_STARTUP_S = "0.2" }}
[speculative]
args = ["--speculative-algorithm", "EAGLE3", "--speculative-num-draft-tokens", "3"]
[arms.baseline]
env = {toml_env(baseline_env or {"FAKE_STEP_MS": "4"})}
[arms.eagle3]
speculative = true
env = {toml_env(eagle_env)}
{fusion}
[workload]
prompts = "prompts.jsonl"
output_len = 32
concurrency = {concurrency}
rounds = 2
repeats = {repeats}
warmup_output_len = 4
stream = {"true" if stream else "false"}
token_range = [100, 2148]
{extra}
[verdict]
baseline = "baseline"
speculative = ["eagle3"]
min_ratio = {{ 1 = 1.3 }}
expect_accept_len = 2.5
expect_break_even = 1.9
{'fusion = ["eagle3+fusion", "eagle3"]' if fusion_env is not None else ""}
{verdict_extra}
'''
    p = tmp / f"{name}.toml"
    p.write_text(text)
    return p


def alive(pid: int) -> bool:
    """True if pid exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2:].split()[0] not in ("Z", "X")


def wait_for_file(path: Path, timeout: float = 20.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.stat().st_size:
            try:
                return json.loads(path.read_text())
            except json.JSONDecodeError:
                pass
        time.sleep(0.05)
    raise TimeoutError(f"{path} did not appear")
