"""Run one script as N ranks (one process per GPU), each in its own session, bounded: the ranks are taken down
by session (SIGTERM, then SIGKILL) when the time is up or one rank fails, and it is checked that no process of
theirs survives and that nvidia-smi lists none of them (bench/eagle3/server.py: terminate_session). Each rank writes its
result as JSON to the path given in --result; its stdout+stderr go to a log file."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

from sglang_blackwell.bench.eagle3.server import ServerError, free_port, log_tail, terminate_session


def run_ranks(python: str, script: Path, world: int, args: list[str], *, env: dict[str, str], out_dir: Path,
              timeout_s: float, tag: str) -> dict[str, Any]:
    out_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    procs: list[subprocess.Popen] = []
    logs, results = [], []
    t0 = time.monotonic()
    report: dict[str, Any] = {"world": world, "port": port, "timeout_s": round(timeout_s, 1), "ranks": [],
                              "timed_out": False}
    try:
        for r in range(world):
            log = out_dir / f"{tag}-rank{r}.log"
            res = out_dir / f"{tag}-rank{r}.json"
            res.unlink(missing_ok=True)
            logs.append(log)
            results.append(res)
            cmd = [python, str(script), "--rank", str(r), "--world", str(world), "--port", str(port),
                   "--result", str(res), *args]
            with open(log, "wb") as f:
                f.write(("$ " + " ".join(cmd) + "\n").encode())
                f.flush()
                procs.append(subprocess.Popen(cmd, env=env, stdout=f, stderr=subprocess.STDOUT,
                                              stdin=subprocess.DEVNULL, start_new_session=True))
        while time.monotonic() - t0 < timeout_s:
            codes = [p.poll() for p in procs]
            if all(c is not None for c in codes):
                break
            if any(c not in (None, 0) for c in codes):  # one rank failed: the others would wait forever
                time.sleep(3.0)  # let the others finish writing what they have
                break
            time.sleep(0.2)
        else:
            report["timed_out"] = True
    finally:
        teardowns = []
        for p in procs:
            try:
                teardowns.append(terminate_session(p, grace_s=5.0, gpu_release_s=30.0))
            except ServerError as e:
                teardowns.append({"error": str(e), "group_gone": False})
    report["wall_s"] = round(time.monotonic() - t0, 1)
    for r, p in enumerate(procs):
        res = None
        if results[r].is_file():
            try:
                res = json.loads(results[r].read_text())
            except ValueError as e:
                res = {"error": f"result file unreadable: {e}"}
        report["ranks"].append({"rank": r, "returncode": p.returncode, "result": res, "log": str(logs[r]),
                                "teardown": teardowns[r] if r < len(teardowns) else None,
                                "log_tail": None if res and res.get("ok") else log_tail(logs[r], 25)})
    return report
