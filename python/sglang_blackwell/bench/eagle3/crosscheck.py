"""`[crosscheck]`: upstream's own client, `python -m sglang.bench_serving`, on the server a grid arm just measured,
for the listed (context, concurrency) cells, next to the harness's warm tok/s of the same cell. Two clients that
disagree on the same server is a finding in itself (upstream's tool measured 1.19x where ours said 1.38x).

The command (flags as sglang 0.5.14's bench_serving.py defines them):

    <python> -m sglang.bench_serving --backend sglang-oai --base-url <url> --dataset-name random-ids
        --random-input-len <context> --random-output-len <output_len> --random-range-ratio 1.0
        --num-prompts <n> --max-concurrency <c> --tokenizer <tokenizer dir> --output-file <tmp>
        --disable-tqdm --flush-cache

It names the model from GET /v1/models (no --model), sends `--warmup-requests` (default 1) requests of the first
prompt first, then, with --flush-cache, flushes the radix cache (else that prompt's prefill would hit it), and draws
its prompts with its default --seed 42: random ids decoded to text that the server tokenizes again (sglang-oai
sends text; --tokenize-prompt is for its native backend only), so their length is about, not exactly, the context.
It appends one JSON object per run to --output-file (keys below). A failure (a missing module, a timeout, no result
line) is recorded with its exit code, a one-line reason and the output's last lines: it never fails the arm run.
It runs no longer than its [crosscheck] timeout_s nor past the run's --deadline-s (whichever comes first; past it,
its whole process group is killed), and does not start once the deadline has come.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from ... import procs
from . import transport
from .config import BenchConfig, CrosscheckSpec

# what the result line of bench_serving.py (0.5.14, `benchmark()`) holds that the receipt keeps
RESULT_KEYS = ("output_throughput", "median_tpot_ms", "p99_tpot_ms", "median_ttft_ms", "p99_ttft_ms",
               "median_itl_ms", "p99_itl_ms", "median_e2e_latency_ms", "completed", "duration",
               "total_input_tokens", "total_output_tokens", "max_concurrency", "accept_length")
TAIL_LINES = 8
ERROR_LINE = re.compile(r"^\s*(?:[\w.]+(?:Error|Exception|Exit)|error)\b:?.*$", re.IGNORECASE)
MISSING_MODULE = re.compile(r"No module named '([^']+)'")


def command(x: CrosscheckSpec, url: str, tokenizer: str, context: int, concurrency: int, output_len: int,
            output_file: Path) -> list[str]:
    return [x.python, "-m", "sglang.bench_serving", "--backend", "sglang-oai", "--base-url", url,
            "--dataset-name", "random-ids", "--random-input-len", str(context), "--random-output-len",
            str(output_len), "--random-range-ratio", "1.0", "--num-prompts", str(x.num_prompts),
            "--max-concurrency", str(concurrency), "--tokenizer", tokenizer, "--output-file", str(output_file),
            "--disable-tqdm", "--flush-cache"]


def parse_result(text: str) -> dict[str, Any] | None:
    """The last JSON object line of bench_serving's --output-file, reduced to RESULT_KEYS; None if there is
    none (lines that are not JSON objects are skipped: the file is appended to, and may hold other runs)."""
    for line in reversed(text.splitlines()):
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict) and "output_throughput" in obj:
            return {k: obj.get(k) for k in RESULT_KEYS}
    return None


def failure_reason(rc: int | None, output: str, python: str) -> str:
    """One line: why bench_serving produced no result."""
    missing = MISSING_MODULE.findall(output)
    if missing:
        return (f"sglang.bench_serving cannot start: No module named '{missing[-1]}' ({python} lacks it; "
                f"exit {rc})")
    errors = [ln.strip() for ln in output.splitlines() if ERROR_LINE.match(ln)]
    last = errors[-1] if errors else next((ln.strip() for ln in reversed(output.splitlines()) if ln.strip()), "")
    return f"exit {rc}: {last[:200]}" if last else f"exit {rc}, no output"


def _env(url: str) -> dict[str, str]:
    """Ours, with the server's host added to no_proxy (its clients, requests and aiohttp, read the proxy vars)."""
    env = dict(os.environ)
    host = re.sub(r"^https?://", "", url).split("/")[0].rsplit(":", 1)[0].strip("[]")
    for key in ("no_proxy", "NO_PROXY"):
        env[key] = ",".join(x for x in (env.get(key), host, "127.0.0.1", "localhost") if x)
    return env


def _bound(timeout_s: float) -> tuple[float, str]:
    """How long the command may run: its own [crosscheck] timeout_s, or what is left of the run's --deadline-s
    when that comes first; and the words for running past it."""
    at, _ = transport._run_at()
    left = at - time.monotonic()
    if left < timeout_s:
        return max(left, 0.0), f"--deadline-s {transport._RUN['seconds'] or 0:g} reached: the run's time was up"
    return timeout_s, f"timed out after {timeout_s:g} s ([crosscheck] timeout_s)"


def _run(cmd: list[str], env: dict[str, str], log: Path, timeout_s: float) -> tuple[int | None, float, str | None]:
    """Run in its own session, bounded by _bound(timeout_s); (exit code or None, wall seconds, why it was killed
    or None). Past the bound its whole process group is killed (SIGKILL, then whatever left the group); so it is
    on any exception here (Ctrl-C): nothing of it outlives this call."""
    t0 = time.monotonic()
    limit, why = _bound(timeout_s)
    if limit <= 0:
        return None, 0.0, why + " before it started: not run"
    with open(log, "wb") as out:
        try:
            proc = procs.start(cmd, env=env, stdout=out)
        except OSError as e:
            out.write(f"{cmd[0]}: {e.strerror or e}\n".encode())
            return None, 0.0, None
        killed = None
        try:
            proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            killed = f"{why}, after {time.monotonic() - t0:.1f} s: its process group was killed"
        finally:
            if killed or proc.returncode is None:  # past its time (or Ctrl-C): the whole group, at once
                procs.stop(proc, 1.0, first=signal.SIGKILL)
            else:  # it exited: whatever it left in its session goes too
                procs.stop(proc, 5.0)
    return proc.returncode, round(time.monotonic() - t0, 2), killed


def run_cell(cfg: BenchConfig, url: str, tokenizer: str, context: int, concurrency: int,
             ours_tok_s: float | None) -> dict[str, Any]:
    """One cell: bench_serving's figures next to ours (ours_over_theirs = our warm tok/s / its output_throughput).
    Bounded by [crosscheck] timeout_s and by what is left of the run's --deadline-s: past either it is a failed
    cross-check with its reason, never a failed arm."""
    x = cfg.crosscheck
    assert x is not None
    rec: dict[str, Any] = {"context": context, "concurrency": concurrency, "num_prompts": x.num_prompts,
                           "ours_tok_s": ours_tok_s, "theirs": None, "ours_over_theirs": None, "error": None}
    with tempfile.TemporaryDirectory(prefix="sgl-bench-crosscheck-") as d:
        out_file, log = Path(d) / "result.jsonl", Path(d) / "output.log"
        cmd = command(x, url, tokenizer, context, concurrency, cfg.workload.output_len, out_file)
        rec["command"] = cmd
        rc, wall, killed = _run(cmd, _env(url), log, x.timeout_s)
        output = log.read_bytes().decode(errors="replace")
        result = parse_result(out_file.read_text(errors="replace")) if out_file.is_file() else None
    rec.update(rc=rc, wall_s=wall)
    if result is None or killed:
        rec["error"] = killed or failure_reason(rc, output, x.python)
        rec["output_tail"] = [ln[:300] for ln in output.splitlines()[-TAIL_LINES:]]
        return rec
    rec["theirs"] = result
    theirs = result.get("output_throughput")
    if ours_tok_s and isinstance(theirs, (int, float)) and theirs > 0:
        rec["ours_over_theirs"] = round(ours_tok_s / theirs, 4)
    return rec


def line(rec: dict[str, Any]) -> str:
    """The progress / report line of one cross-checked cell."""
    head = f"crosscheck ctx={rec['context']} c={rec['concurrency']}: "
    if rec.get("error"):
        return head + f"FAILED ({rec['error']})"
    t = rec["theirs"] or {}

    def f(v: Any) -> str:
        return f"{v:.2f}" if isinstance(v, (int, float)) else "-"

    return (head + f"bench_serving {f(t.get('output_throughput'))} tok/s (TPOT p50 {f(t.get('median_tpot_ms'))} "
            f"ms, TTFT p50 {f(t.get('median_ttft_ms'))} ms, ITL p99 {f(t.get('p99_itl_ms'))} ms), ours "
            f"{f(rec.get('ours_tok_s'))} tok/s: ours / theirs {f(rec.get('ours_over_theirs'))}")
