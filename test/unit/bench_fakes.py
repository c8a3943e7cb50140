"""Helpers for the `bench eagle3` tests: configs that launch test/support/fake_sglang_server.py (a real HTTP
server in a real process, started by the harness exactly like sglang.launch_server) with known speeds, and
OpenAI-only servers (test/support/fake_openai_server.py, like `vllm serve`) to attach to."""

from __future__ import annotations

import contextlib
import json
import os
import random
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

FAKE_SERVER = Path(__file__).resolve().parents[1] / "support" / "fake_sglang_server.py"
FAKE_OPENAI = Path(__file__).resolve().parents[1] / "support" / "fake_openai_server.py"


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
                 verdict_extra: str = "", api: str | None = None, output_len: int = 32,
                 model_dirs: bool = False) -> Path:
    """A 3-arm config (or 2 arms with fusion_env=None) against the fake server. Default speeds: baseline 4 ms
    per token; eagle3 3 tokens per 6 ms round (~1.8x); eagle3+fusion 3 tokens per 5 ms round. Without `api`
    (or with api = "generate"): tokenizer "none", input_ids prompts, /generate; with api = "completions" or
    "chat": the target's tokenizer, text prompts, the OpenAI API. model_dirs: [model] names real directories
    <tmp>/models/target and draft (a launch refuses model paths that do not exist), else /fake/target and
    /fake/draft (enough to parse, attach or rebuild from runs)."""
    openai = api in ("completions", "chat")
    target, draft = "/fake/target", "/fake/draft"
    if model_dirs:
        for d in ("target", "draft"):
            (tmp / "models" / d).mkdir(parents=True, exist_ok=True)
            (tmp / "models" / d / "config.json").write_text("{}\n")
        target, draft = str(tmp / "models" / "target"), str(tmp / "models" / "draft")
    write_prompts(tmp / "prompts.jsonl", ids=not openai)
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
target = {json.dumps(target)}
draft = {json.dumps(draft)}
tokenizer = "{"target" if openai else "none"}"
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
output_len = {output_len}
concurrency = {concurrency}
rounds = 2
repeats = {repeats}
warmup_output_len = 4
{f'api = "{api}"' if api else ""}
{"" if openai else f'stream = {"true" if stream else "false"}'}
{"" if openai else "token_range = [100, 2148]"}
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


def write_grid_config(tmp: Path, *, name: str = "fakegrid", baseline_env: dict[str, str] | None = None,
                      eagle_env: dict[str, str] | None = None, contexts: str = "[16, 64]",
                      concurrency: str = "[1, 2]", min_ratio: str = "{ 16 = { 1 = 1.3, 2 = 1.1 }, 64 = { 1 = 1.2 } }",
                      verdict_extra: str = "", extra: str = "", api: str = "completions", repeats: int = 1,
                      token_range: str | None = "[100, 2148]") -> Path:
    """A 2-arm grid config ([workload] contexts) against the fake SGLang server, launched; model directories are
    real (<tmp>/models/target with a tokenizer.json when token_range is None: ids 100..2147 special-free)."""
    for d in ("target", "draft"):
        (tmp / "models" / d).mkdir(parents=True, exist_ok=True)
        (tmp / "models" / d / "config.json").write_text("{}\n")
    vocab = {f"t{i}": i for i in range(2148)}
    added = [{"id": i, "content": f"t{i}", "special": True} for i in range(100)]
    (tmp / "models" / "target" / "tokenizer.json").write_text(json.dumps({"model": {"vocab": vocab},
                                                                          "added_tokens": added}))
    text = f'''
name = "{name}"
[model]
target = {json.dumps(str(tmp / "models" / "target"))}
draft = {json.dumps(str(tmp / "models" / "draft"))}
tokenizer = "{"none" if api == "generate" else "target"}"
[server]
tp = 1
launcher = [{json.dumps(sys.executable)}, {json.dumps(str(FAKE_SERVER))}]
port = 0
startup_timeout_s = 20
teardown_grace_s = 2
env = {{ FAKE_STARTUP_S = "0.2" }}
[speculative]
args = ["--speculative-algorithm", "EAGLE3", "--speculative-num-draft-tokens", "3"]
[arms.baseline]
env = {toml_env(baseline_env or {"FAKE_STEP_MS": "4"})}
[arms.eagle3]
speculative = true
env = {toml_env(eagle_env or {"FAKE_ROUND_MS": "5", "FAKE_ACCEPT_LEN": "3"})}
[workload]
api = "{api}"
contexts = {contexts}
output_len = 24
concurrency = {concurrency}
rounds = 2
repeats = {repeats}
{f"token_range = {token_range}" if token_range else ""}
{extra}
[verdict]
baseline = "baseline"
speculative = ["eagle3"]
min_ratio = {min_ratio}
expect_accept_len = 2.5
expect_break_even = 1.5
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


def dead_port() -> int:
    """A loopback port nothing listens on (bound and closed: refused until someone else takes it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


PROXY_VARS = ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY")


def dead_proxy_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """`env` (default: ours) with every proxy variable pointing at a dead loopback port and no no_proxy."""
    out = {k: v for k, v in (env if env is not None else os.environ).items()
           if k.lower() not in ("no_proxy",)}
    proxy = f"http://127.0.0.1:{dead_port()}"
    out.update({k: proxy for k in PROXY_VARS})
    return out


@contextlib.contextmanager
def openai_servers(tmp: Path, specs: dict[str, dict[str, str]], *,
                   model: str = "fake-model") -> Iterator[dict[str, str]]:
    """Start one fake_openai_server.py per name (env overrides each), each in its own session, taken down on
    the way out; yields name -> URL. Each logs its request bodies to <tmp>/<name>.requests.jsonl."""
    from sglang_blackwell.bench.eagle3.server import Server, free_port, launched_server

    urls: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        for name, env in specs.items():
            port = free_port()
            server = Server(url=f"http://127.0.0.1:{port}", log_path=tmp / f"{name}.log")
            cmd = [sys.executable, str(FAKE_OPENAI), "--port", str(port), "--model", model]
            full = {**os.environ, "FAKE_REQUEST_LOG": str(tmp / f"{_safe(name)}.requests.jsonl"), **env}
            stack.enter_context(launched_server(server, cmd, full, startup_timeout_s=20, grace_s=1,
                                                gpu_release_s=0))
            urls[name] = server.url
        yield urls


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in name)


def requests_of(tmp: Path, name: str) -> list[dict]:
    path = tmp / f"{_safe(name)}.requests.jsonl"
    return [json.loads(ln) for ln in path.read_text().splitlines()] if path.exists() else []


# A launcher that loses the race for its port: someone else's fake SGLang server (its own session, not ours) takes
# the port first and answers; "ours" dies a few seconds later the way sglang does when the port is in use.
RACE_LAUNCHER = """\
import os, subprocess, sys, time, urllib.request
port = sys.argv[sys.argv.index("--port") + 1]
pidfile = os.path.join(sys.argv[1], f"foreign-{port}.json")
subprocess.Popen([sys.executable, sys.argv[2], *sys.argv[3:]], start_new_session=True,
                 env={**os.environ, "FAKE_STARTUP_S": "0", "FAKE_PID_FILE": pidfile},
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
for _ in range(200):
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
        break
    except OSError:
        time.sleep(0.05)
time.sleep(3)
print("OSError: [Errno 98] Address already in use", flush=True)
sys.exit(1)
"""


def race_launcher_config(tmp: Path, cfg: Path) -> None:
    """Make `cfg` (from write_config) launch through RACE_LAUNCHER; the foreign servers' pid files go to tmp."""
    (tmp / "race_launcher.py").write_text(RACE_LAUNCHER)
    old = f"launcher = [{json.dumps(sys.executable)}, {json.dumps(str(FAKE_SERVER))}]"
    new = f"launcher = {json.dumps([sys.executable, str(tmp / 'race_launcher.py'), str(tmp), str(FAKE_SERVER)])}"
    text = cfg.read_text()
    assert old in text
    cfg.write_text(text.replace(old, new))


def kill_foreign(tmp: Path) -> list[int]:
    """SIGKILL the foreign servers RACE_LAUNCHER started (by the pids they wrote); the pids found."""
    import signal

    pids = [json.loads(f.read_text())["server"] for f in tmp.glob("foreign-*.json")]
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
    return pids
