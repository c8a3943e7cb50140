"""A served sglang server as the GPU suites that send it requests see it (hostile/, soak/): the Target (served_target:
its URL, key, model name, session leader), and its state before (Baseline) and after (After) what they send:
/health, the scheduler process (found by its title `sglang::scheduler` among the server session's processes,
/proc), the reference greedy request's text and the KV pool's used tokens (/v1/loads, 0.5.14; /get_load before
it), which are released asynchronously, so polled for a while. Standard library only (and the package's procs)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import server_http as http

from sglang_blackwell import procs

SCHEDULER_TITLE = "sglang::scheduler"  # sglang's setproctitle in run_scheduler_process
HEALTH_TRIES = 3  # a busy server may miss one /health: a dead one misses them all


@dataclass
class Target:
    """A running server as the cases see it."""

    url: str  # http://127.0.0.1:<port> (it listens on 0.0.0.0)
    key: str  # its --api-key
    model: str  # the served model name
    pid: int  # the session leader (the launch_server process `serve` execs)
    vocab_size: int
    context_len: int
    truth: Any = None  # lab_truth.GroundTruth, or None where there is none (the CPU tests)
    out: Path = field(default_factory=lambda: Path("/tmp"))


def get_text(url: str, path: str, key: str) -> str | None:
    """GET url+path with the key: the body's text on a 200, else None."""
    r = http.get(url, path, key=key)
    return r.body.decode(errors="replace") if r.status == 200 else None


def served_target(url: str, key: str, pid: int, model_dir: Path, context_len: int, *, truth: Any = None,
                  out: Path = Path("/tmp")) -> Target:
    """The Target of a server that answers /health: the model name /v1/models lists, the vocabulary of the model
    directory it serves."""
    models = json.loads(get_text(url, "/v1/models", key) or "{}").get("data") or [{}]
    vocab = json.loads((model_dir / "config.json").read_text())["vocab_size"]
    return Target(url=url, key=key, model=models[0].get("id", "default"), pid=pid, vocab_size=vocab,
                  context_len=context_len, truth=truth, out=out)


def server_info(t: Target) -> dict[str, Any]:
    """/server_info, {} where it does not answer JSON."""
    try:
        return json.loads(get_text(t.url, "/server_info", t.key) or "{}")
    except ValueError:
        return {}


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _start_time(pid: int) -> str | None:
    f = procs._stat_fields(pid)
    return f[19] if f and len(f) > 19 else None  # field 22 of /proc/<pid>/stat: starttime


def scheduler_identity(leader: int) -> tuple[int, str | None] | None:
    """(pid, start time) of the server's scheduler process (the leader's own when no process of its session has
    the scheduler's title); None when the leader does not run."""
    if not procs.alive(leader):
        return None
    members = procs.session_members(leader) if procs.has_proc() else [leader]
    sched = [p for p in members if _cmdline(p).startswith(SCHEDULER_TITLE) and procs.alive(p)]
    pid = min(sched) if sched else leader
    return pid, _start_time(pid)


def health(t: Target) -> int | str:
    last: int | str = "no answer"
    for _ in range(HEALTH_TRIES):
        r = http.get(t.url, "/health", timeout=5.0)
        if r.status == 200:
            return 200
        last = r.status if r.status is not None else (r.error or "no answer")
        if r.error == "connection refused":
            break  # nothing listens: no use asking again
        time.sleep(1.0)
    return last


def reference_text(t: Target, prompt: str, tokens: int) -> str | None:
    r = http.post_json(t.url, "/v1/completions", {"model": t.model, "prompt": prompt, "max_tokens": tokens,
                                                  "temperature": 0}, key=t.key, timeout=30.0)
    doc = r.json()
    try:
        return doc["choices"][0]["text"] if r.status == 200 else None
    except (TypeError, KeyError, IndexError):
        return None


def kv_state(t: Target) -> tuple[int | None, int | None]:
    """(used KV tokens, running + waiting requests) of DP rank 0, or (None, None) where neither endpoint tells."""
    r = http.get(t.url, "/v1/loads?include=core", key=t.key)
    doc = r.json()
    if r.status == 200 and isinstance(doc, dict) and doc.get("loads"):
        load = doc["loads"][0]
        return load.get("num_used_tokens"), load.get("num_running_reqs", 0) + load.get("num_waiting_reqs", 0)
    r = http.get(t.url, "/get_load", key=t.key)
    doc = r.json()
    if r.status == 200 and isinstance(doc, list) and doc:
        load = doc[0]
        return load["num_tokens"] - load["num_pending_tokens"], load.get("num_reqs")
    return None, None


@dataclass
class Baseline:
    scheduler: tuple[int, str | None] | None
    reference: str | None
    kv_used: int | None
    kv_requests: int | None = 0

    @classmethod
    def take(cls, t: Target, prompt: str, tokens: int) -> Baseline:
        text = reference_text(t, prompt, tokens)
        used, requests = kv_state(t)
        return cls(scheduler_identity(t.pid), text, used, requests)

    def leaked_to(self, after: After) -> None:
        """A leak is one case's verdict: the cases after it are measured against the pool as that case left it."""
        self.kv_used, self.kv_requests = after.kv_used, after.kv_requests

    def as_facts(self) -> dict[str, Any]:
        return {"scheduler_pid": self.scheduler[0] if self.scheduler else None, "reference_text": self.reference,
                "kv_used_idle": self.kv_used, "kv_requests_idle": self.kv_requests}


@dataclass
class After:
    alive: bool  # the session leader runs
    scheduler_same: bool
    health: int | str
    reference_text: str | None = None
    reference_same: bool = True
    kv_used: int | None = None
    kv_idle_used: int | None = None
    kv_requests: int | None = None
    kv_idle: bool = True

    def died(self) -> bool:
        return not self.alive or not self.scheduler_same or self.health != 200

    def why_dead(self) -> str:
        parts = [] if self.alive else ["the server process is gone"]
        if self.alive and not self.scheduler_same:
            parts.append("the scheduler process is gone or another one runs")
        if self.health != 200:
            parts.append(f"/health: {self.health}")
        return "; ".join(parts)

    def as_facts(self) -> dict[str, Any]:
        return {"alive": self.alive, "scheduler_same": self.scheduler_same, "health": self.health,
                "reference_same": self.reference_same, "kv_used": self.kv_used, "kv_requests": self.kv_requests,
                "kv_idle": self.kv_idle}


def check_after(t: Target, base: Baseline, prompt: str, tokens: int, kv_wait_s: float) -> After:
    """The server's state after a case, against the baseline; a dead server is not asked anything more."""
    alive = procs.alive(t.pid)
    same = alive and scheduler_identity(t.pid) == base.scheduler
    st = health(t) if alive else "not asked: the server process is gone"
    a = After(alive=alive, scheduler_same=same, health=st, kv_idle_used=base.kv_used)
    if a.died():
        return a
    # the KV pool first: the reference request itself takes (and gives back) KV tokens
    end = time.monotonic() + kv_wait_s
    while True:
        a.kv_used, a.kv_requests = kv_state(t)
        a.kv_idle = ((a.kv_used is None or base.kv_used is None or a.kv_used <= base.kv_used)
                     and (a.kv_requests or 0) <= (base.kv_requests or 0))
        if a.kv_idle or time.monotonic() > end:
            break
        time.sleep(0.25)
    a.reference_text = reference_text(t, prompt, tokens)
    a.reference_same = a.reference_text == base.reference
    return a
