"""The soak's client: one closed loop per arm, all arms at once with the same schedule (soak_schedule), every
request a streamed POST /v1/completions of token ids (server_http.stream: each output event's arrival time), and a
sampler of each server's GPU memory, host RSS and KV pool use; all of it recorded per bucket (Recorder.buckets:
what soak_verdict judges). Standard library only (and the package's procs and nvidia_smi)."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import server_http as http
from server_checks import Target, kv_state
from soak_schedule import Schedule

from sglang_blackwell import procs
from sglang_blackwell.bench.eagle3.stats import percentile
from sglang_blackwell.box import nvidia_smi as nvidia

ERROR_SAMPLES = 5  # error descriptions kept per bucket


@dataclass
class _Bucket:
    ok: int = 0
    aborted: int = 0
    errors: int = 0
    error_samples: list[str] = field(default_factory=list)
    gaps_ms: list[float] = field(default_factory=list)
    samples: dict[str, list[float]] = field(default_factory=dict)


class Recorder:
    """One arm's outcomes and samples by bucket: bucket m holds [m x bucket_s, (m + 1) x bucket_s) from t0; what
    comes after soak_s goes to the drain bucket (index minutes())."""

    def __init__(self, t0: float, bucket_s: float, soak_s: float):
        self.t0, self.bucket_s, self.soak_s = t0, bucket_s, soak_s
        self._lock = threading.Lock()
        self._b: dict[int, _Bucket] = {}

    def minutes(self) -> int:
        return max(1, math.ceil(self.soak_s / self.bucket_s - 1e-9))

    def index(self, t: float) -> int:
        rel = t - self.t0
        return self.minutes() if rel >= self.soak_s else max(0, int(rel // self.bucket_s))

    def _at(self, t: float) -> _Bucket:
        return self._b.setdefault(self.index(t), _Bucket())

    def request(self, s: http.Streamed, end_t: float) -> str:
        """Record one request's outcome (ok | aborted | error) and its gaps; returns the outcome."""
        if s.cut:
            kind, why = "aborted", None
        elif s.done and s.error is None and s.status == 200 and s.chunk_t:
            kind, why = "ok", None
        else:
            kind = "error"
            why = (f"{s.status}: {s.message()}" if s.status not in (None, 200) else
                   s.error or "the stream carried no output")[:200]
        with self._lock:
            for a, b in zip(s.chunk_t, s.chunk_t[1:], strict=False):
                self._at(b).gaps_ms.append((b - a) * 1000.0)
            bucket = self._at(end_t)
            attr = "errors" if kind == "error" else kind
            setattr(bucket, attr, getattr(bucket, attr) + 1)
            if why and len(bucket.error_samples) < ERROR_SAMPLES:
                bucket.error_samples.append(why)
        return kind

    def sample(self, t: float, values: dict[str, float | None]) -> None:
        with self._lock:
            b = self._at(t)
            for k, v in values.items():
                if v is not None:
                    b.samples.setdefault(k, []).append(v)

    def buckets(self) -> list[dict[str, Any]]:
        """One dict per bucket that holds anything (soak_verdict's fields), in order."""
        out = []
        n = self.minutes()
        with self._lock:
            items = sorted(self._b.items())
        for m, b in items:
            drain = m == n
            gaps = b.gaps_ms

            def p(q: float, gaps: list[float] = gaps) -> float | None:
                return round(percentile(gaps, q), 3) if gaps else None

            def top(key: str, b: _Bucket = b) -> float | None:
                v = b.samples.get(key)
                return max(v) if v else None
            out.append({"minute": m, "start_s": round(m * self.bucket_s, 3),
                        "end_s": round(self.soak_s if drain else min((m + 1) * self.bucket_s, self.soak_s), 3),
                        "full": not drain and (m + 1) * self.bucket_s <= self.soak_s + 1e-9, "drain": drain,
                        "ok": b.ok, "aborted": b.aborted, "errors": b.errors, "error_samples": b.error_samples,
                        "itl_n": len(gaps), "itl_p50_ms": p(50), "itl_p90_ms": p(90), "itl_p99_ms": p(99),
                        "gpu_mib_max": top("gpu_mib"), "gpu_total_mib_max": top("gpu_total_mib"),
                        "rss_mib_max": top("rss_mib"), "kv_used_max": top("kv_used"),
                        "samples": len(b.samples.get("kv_used") or b.samples.get("rss_mib") or [])})
        return out


def rss_mib(pids: Sequence[int]) -> float | None:
    """The summed VmRSS of `pids` (MiB), None where /proc tells of none."""
    total, seen = 0, False
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
                    seen = True
                    break
        except (OSError, ValueError, IndexError):
            continue
    return round(total / 1024, 1) if seen else None


def sample_arms(targets: dict[str, Target]) -> dict[str, dict[str, float | None]]:
    """Each arm's GPU memory (its session's processes as nvidia-smi lists them; None where it lists none), the
    device total, the host RSS of its process tree and its KV pool's used tokens, now."""
    apps = nvidia.compute_apps() if nvidia.available() else []
    total = sum(nvidia.memory_used_mib()) if nvidia.available() else None
    out = {}
    for name, t in targets.items():
        members = procs.session_members(t.pid) if procs.has_proc() else [t.pid]
        mine = [a["used_memory_mib"] for a in apps if a["pid"] in members and a["used_memory_mib"] is not None]
        out[name] = {"gpu_mib": float(sum(mine)) if mine else None,
                     "gpu_total_mib": float(total) if total is not None else None,
                     "rss_mib": rss_mib(members), "kv_used": _kv(t)}
    return out


def _kv(t: Target) -> float | None:
    used, _ = kv_state(t)
    return float(used) if used is not None else None


@dataclass
class Soak:
    """All arms at once for soak_s seconds with one schedule; run() returns when every request has ended (at most
    drain_s after the soak stops sending)."""

    targets: dict[str, Target]
    schedule: Schedule
    soak_s: float
    bucket_s: float
    request_timeout_s: float
    drain_s: float
    sample_s: float
    progress: Callable[[str], None] = print
    recorders: dict[str, Recorder] = field(default_factory=dict)
    _counts: dict[tuple[str, int], int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _next(self, arm: str, bucket: int) -> int:
        with self._lock:
            k = self._counts.get((arm, bucket), 0)
            self._counts[(arm, bucket)] = k + 1
            return k

    def _worker(self, arm: str, i: int, t0: float, stop: threading.Event) -> None:
        t, rec = self.targets[arm], self.recorders[arm]
        end = t0 + self.soak_s
        while not stop.is_set() and (now := time.monotonic()) < end:
            m, frac = divmod((now - t0) / self.bucket_s, 1.0)
            if i >= self.schedule.concurrency(frac):
                time.sleep(min(0.05, self.bucket_s / 100))
                continue
            k = self._next(arm, int(m))
            d = self.schedule.draw(k)
            body = {"model": t.model, "prompt": self.schedule.prompt_ids(int(m), k, d.prompt_len, t.vocab_size),
                    "max_tokens": d.output_len, "temperature": 0, "ignore_eos": True, "stream": True}
            s = http.stream(t.url, "/v1/completions", body, key=t.key, cut_after_chunks=d.cut_after_chunks,
                            cut_after_s=d.cut_after_s, timeout=self.request_timeout_s)
            rec.request(s, time.monotonic())

    def _sampler(self, t0: float, done: threading.Event) -> None:
        while not done.is_set():
            now = time.monotonic()
            for arm, values in sample_arms(self.targets).items():
                self.recorders[arm].sample(now, values)
            done.wait(self.sample_s)

    def run(self) -> None:
        t0 = time.monotonic()
        self.recorders = {a: Recorder(t0, self.bucket_s, self.soak_s) for a in self.targets}
        stop, sampled = threading.Event(), threading.Event()
        workers = [threading.Thread(target=self._worker, args=(a, i, t0, stop), daemon=True, name=f"soak-{a}-{i}")
                   for a in self.targets for i in range(self.schedule.peak())]
        sampler = threading.Thread(target=self._sampler, args=(t0, sampled), daemon=True, name="soak-sampler")
        sampler.start()
        for w in workers:
            w.start()
        try:
            next_note = t0 + self.bucket_s
            while time.monotonic() < t0 + self.soak_s:
                procs.raise_if_interrupted()
                time.sleep(min(1.0, self.bucket_s / 10))
                if time.monotonic() >= next_note:
                    self.progress(self._note(int((next_note - t0) // self.bucket_s) - 1))
                    next_note += self.bucket_s
            stop.set()
            drain_end = time.monotonic() + self.drain_s
            for w in workers:
                w.join(max(0.0, drain_end - time.monotonic()))
            left = sum(w.is_alive() for w in workers)
            if left:
                self.progress(f"soak: {left} requests still running {self.drain_s:.0f} s after the soak ended")
        finally:
            stop.set()
            sampled.set()
            sampler.join(10.0)

    def _note(self, m: int) -> str:
        parts = []
        for arm, rec in self.recorders.items():
            b = next((b for b in rec.buckets() if b["minute"] == m), None)
            if b:
                parts.append(f"{arm} ok {b['ok']} aborted {b['aborted']} errors {b['errors']} "
                             f"p99 ITL {b['itl_p99_ms']} ms")
        return f"soak minute {m}: " + "; ".join(parts)
