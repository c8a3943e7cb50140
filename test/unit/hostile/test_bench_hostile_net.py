"""Hostile servers and hostile disks for `bench eagle3 --attach` (the network half of the issue), each run as a
user runs it (a fresh CLI process) and judged by support/hostile.py.

The servers are one small script (HOSTILE_SERVER, written into the case directory) in a mode per case: a server
that redirects, one that sends keep-alive comments and never a token, one that streams a line without a newline,
one that never answers, one with junk in its optional /metrics or malformed replies. Each runs in its own session
and is killed by pid when its test ends. The bar: the run ends in bounded time, says in one line which URL and
which field or deadline was at fault, follows no redirect, never sends a loopback request through a proxy, and
leaves every runs file made of whole records (or recovers up to the last whole one and says so)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from bench_fakes import dead_port, write_config

from support import hostile
from support.hostile import Case, assert_clean

CONFIG = "fake.toml"
OUT = "out"
# --deadline-s of the cases that must end at it, mid-request: it counts from run_all's start (after the CLI's
# imports), and what comes before the hung request is a few loopback requests to the hostile server (~50 ms idle);
# 2 s leaves them 40 times that on a loaded box, and each second of it is a second of these cases' wall time
RUN_DEADLINE_S = 2

HOSTILE_SERVER = r'''
import json, os, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

port, mode, hits = int(sys.argv[1]), sys.argv[2], sys.argv[3]
to = sys.argv[4] if len(sys.argv) > 4 else ""


class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def hit(self):
        with open(hits, "a") as f:
            f.write(f"{self.command} {self.path}\n")

    def send(self, code, obj, ctype="application/json"):
        body = (json.dumps(obj) if not isinstance(obj, str) else obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def redirect(self):
        self.send_response(302)
        self.send_header("Location", to + self.path)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self):
        self.hit()
        if mode == "redirect" or (mode == "redirect-after-health" and self.path != "/health"):
            return self.redirect()
        if self.path == "/health":
            return self.send(200, {})
        if self.path == "/v1/models":
            if mode == "bad-models":
                return self.send(200, {"data": 5})
            return self.send(200, {"object": "list", "data": [{"id": "fake-model"}]})
        if self.path == "/metrics" and mode == "metrics-junk":
            return self.send(200, "{x} 1\nvllm:num_requests_running 0.0\n", "text/plain")
        if self.path == "/server_info" and mode == "bad-step-times":
            return self.send(200, {"tp_size": 2, "internal_states": [{"step_time_dict": {"x": ["y"]}}]})
        return self.send(404, {"detail": "Not Found"})

    def do_POST(self):
        self.hit()
        n = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(n)) if n else {}
        if mode == "redirect" or (mode == "redirect-after-health" and self.path != "/health"):
            return self.redirect()
        if self.path != "/v1/completions":
            return self.send(404, {"detail": "Not Found"})
        if mode == "silent":
            time.sleep(3600)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        w = self.wfile
        if mode == "keepalive":  # one token, then comments forever: bytes keep coming, data never again
            w.write(b"data: " + json.dumps({"choices": [{"index": 0, "text": " t0"}]}).encode() + b"\n\n")
            while True:
                w.write(b": keep-alive\n\n")
                w.flush()
                time.sleep(0.2)
        if mode == "noline":
            w.write(b"data: ")
            while True:
                w.write(b"x" * 65536)
                w.flush()
                time.sleep(0.01)
        if mode == "bad-choices":
            w.write(b'data: {"choices": 5}\n\n')
            w.flush()
            return
        k = int(body.get("max_tokens") or 16)
        for i in range(k):
            time.sleep(0.002)
            w.write(b"data: " + json.dumps({"choices": [{"index": 0, "text": f" t{i}"}]}).encode() + b"\n\n")
            w.flush()
        usage = {"prompt_tokens": 3, "completion_tokens": k, "total_tokens": k + 3}
        w.write(b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n")
        w.write(b"data: [DONE]\n\n")
        w.flush()


ThreadingHTTPServer.daemon_threads = True
ThreadingHTTPServer((os.environ.get("HOSTILE_HOST", "127.0.0.1"), port), H).serve_forever()
'''

# a wrapper that runs the CLI with a file-size limit set once the runs file holds its first whole record: the next
# append hits it (EFBIG, as ENOSPC would: part of the write lands, then the error), the way a disk fills mid-run.
# The run has started by then, so its progress lines are passed to stdout: the one line left on stderr is the error
FULL_DISK_CLI = r'''
import glob, os, resource, signal, sys, threading, time
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
out = sys.argv.pop(1)

def watch():
    while True:
        for p in glob.glob(os.path.join(out, "*_runs.jsonl")):
            data = open(p, "rb").read()
            if data.endswith(b"\n"):
                resource.setrlimit(resource.RLIMIT_FSIZE, (len(data) + 200, resource.RLIM_INFINITY))
                return
        time.sleep(0.002)

class ProgressToStdout:  # the run's progress lines ("[   3s] ...") go to stdout: stderr keeps the error alone, so
    def write(self, text):  # the yardstick's one-line rule judges the error line itself
        return (sys.stdout if text.startswith("[") else sys.__stderr__).write(text)

    def flush(self):
        sys.stdout.flush()
        sys.__stderr__.flush()


sys.stderr = ProgressToStdout()
threading.Thread(target=watch, daemon=True).start()
from sglang_blackwell.cli import main
sys.exit(main(sys.argv[1:]))
'''


def box_address() -> str:
    """This box's non-loopback address (a UDP socket's source toward a documentation address: nothing is sent),
    or 127.0.0.2 where there is none."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))
            ip = s.getsockname()[0]
        except OSError:
            return "127.0.0.2"
    return ip if not ip.startswith("127.") else "127.0.0.2"


class Servers:
    """Hostile servers of one test, started in their own sessions, killed by pid at the end."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []

    def start(self, tmp: Path, mode: str, *, name: str = "srv", to: str = "", host: str = "127.0.0.1") -> int:
        script = tmp / "hostile_server.py"
        script.write_text(HOSTILE_SERVER)
        port = dead_port()
        p = subprocess.Popen([sys.executable, str(script), str(port), mode, str(tmp / f"{name}.hits"), to],
                             start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             env={**os.environ, "HOSTILE_HOST": host})
        self.procs.append(p)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                with socket.create_connection((host, port), timeout=0.2):
                    break
            except OSError:
                time.sleep(0.05)
        else:
            raise RuntimeError(f"hostile server {mode} did not listen on {host}:{port}")
        (tmp / f"{name}.hits").write_text("")  # the readiness probe is not a request
        return port

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


@pytest.fixture
def servers() -> Iterator[Servers]:
    s = Servers()
    yield s
    s.stop()


def cfg(tmp: Path) -> None:
    write_config(tmp, repeats=1, concurrency="[1]", api="completions", fusion_env=None)


def attach_case(id: str, urls: list[str], names: tuple[str, ...], *, rc: int, arms: str = "baseline",
                extra: tuple[str, ...] = (), setup: Callable[[Path], None] | None = None, **kw) -> Case:
    argv = ["bench", "eagle3", "--config", "{tmp}/" + CONFIG, "--out", "{tmp}/" + OUT, "--no-plots",
            "--arms", arms, "--attach", *urls, *extra]
    return Case(id, "net", argv, names=names, rc=rc, setup=setup or cfg, timeout=kw.pop("timeout", 45), **kw)


def runs_of(tmp: Path) -> list[dict]:
    return [json.loads(ln)["run"] for f in sorted((tmp / OUT).glob("*_runs.jsonl"))
            for ln in f.read_text().splitlines() if ln.strip()]


def measured(tmp: Path, r: subprocess.CompletedProcess) -> str | None:
    runs = runs_of(tmp)
    if not runs or any(x["error"] or not x["levels"] for x in runs):
        return f"not measured: {[(x['arm'], x['error']) for x in runs]}"
    return None


def no_hits(name: str) -> Callable[[Path, subprocess.CompletedProcess], str | None]:
    def check(tmp: Path, r: subprocess.CompletedProcess) -> str | None:
        seen = (tmp / f"{name}.hits").read_text().split("\n")
        seen = [s for s in seen if s]
        return f"{name} got {len(seen)} request(s): {seen[:4]}" if seen else None
    return check


def both(*checks: Callable[[Path, subprocess.CompletedProcess], str | None]):
    def check(tmp: Path, r: subprocess.CompletedProcess) -> str | None:
        return next((why for c in checks if (why := c(tmp, r))), None)
    return check


def took_less_than(seconds: float, t0: list[float]):
    def check(tmp: Path, r: subprocess.CompletedProcess) -> str | None:
        took = time.monotonic() - t0[0]
        return f"took {took:.0f} s (> {seconds:.0f} s)" if took > seconds else None
    return check


# ---- redirects and what counts as loopback -------------------------------------------------------------------

def test_redirect_to_another_host_is_not_followed(tmp_path, servers):
    target = servers.start(tmp_path, "ok", name="elsewhere", host="0.0.0.0")
    elsewhere = f"http://{box_address()}:{target}"
    port = servers.start(tmp_path, "redirect", to=elsewhere)
    url = f"http://127.0.0.1:{port}"
    assert_clean(attach_case("attach-redirect-health", [url], ("--attach", url, "302", "redirect", "not followed"),
                             rc=2, watch=(OUT,), after=no_hits("elsewhere")), tmp_path)


def test_redirect_after_a_healthy_health_check_fails_the_arm_and_reaches_nobody(tmp_path, servers):
    target = servers.start(tmp_path, "ok", name="elsewhere", host="0.0.0.0")
    port = servers.start(tmp_path, "redirect-after-health", to=f"http://{box_address()}:{target}")
    url = f"http://127.0.0.1:{port}"
    assert_clean(attach_case("attach-redirect-after-health", [url], (f"{url}/v1/models", "302", "not followed"),
                             rc=1, after=no_hits("elsewhere")), tmp_path)


@pytest.mark.parametrize("form", ["127.1", "2130706433", "0x7f.0.0.1"])
def test_loopback_spelled_otherwise_never_goes_through_the_proxy(tmp_path, servers, form):
    port = servers.start(tmp_path, "ok")
    proxy = servers.start(tmp_path, "ok", name="proxy")  # a live proxy that records what reaches it
    env = {k: f"http://127.0.0.1:{proxy}" for k in ("http_proxy", "HTTP_PROXY", "https_proxy", "ALL_PROXY")}
    assert_clean(attach_case(f"attach-loopback-{form}", [f"http://{form}:{port}"], (), rc=1, env=env,
                             after=both(no_hits("proxy"), measured)), tmp_path)


# ---- servers that never finish a request -----------------------------------------------------------------------

def test_keepalive_comments_forever_end_at_the_run_deadline(tmp_path, servers):
    port = servers.start(tmp_path, "keepalive")
    url = f"http://127.0.0.1:{port}"
    t0 = [time.monotonic()]
    case = attach_case("attach-keepalive-deadline", [url],
                       (f"{url}/v1/completions", f"--deadline-s {RUN_DEADLINE_S} reached mid-request"), rc=1,
                       extra=("--deadline-s", str(RUN_DEADLINE_S)), timeout=40, after=took_less_than(30, t0))
    assert_clean(case, tmp_path)


def test_keepalive_comments_are_no_progress_idle_deadline(tmp_path, servers):
    port = servers.start(tmp_path, "keepalive")
    url = f"http://127.0.0.1:{port}"
    # idle 1 s: five of the server's 0.2 s comment intervals, so comments taken for progress would never let it fire
    case = attach_case("attach-keepalive-idle", [url],
                       (f"{url}/v1/completions", "no data for 1 s after the last event (idle deadline"), rc=1,
                       extra=("--request-timeouts", "2,1,600"), timeout=40)
    assert_clean(case, tmp_path)


def test_a_server_that_never_answers_meets_the_first_byte_deadline(tmp_path, servers):
    port = servers.start(tmp_path, "silent")
    url = f"http://127.0.0.1:{port}"
    case = attach_case("attach-silent-first-byte", [url],
                       (f"{url}/v1/completions", "no answer within 1 s (first-byte deadline)"), rc=1,
                       extra=("--request-timeouts", "1,60,600"), timeout=40)
    assert_clean(case, tmp_path)


def test_a_server_that_never_answers_ends_at_the_run_deadline(tmp_path, servers):
    port = servers.start(tmp_path, "silent")
    url = f"http://127.0.0.1:{port}"
    case = attach_case("attach-silent-deadline", [url],
                       (f"{url}/v1/completions", f"--deadline-s {RUN_DEADLINE_S} reached mid-request"), rc=1,
                       extra=("--deadline-s", str(RUN_DEADLINE_S)), timeout=40)
    assert_clean(case, tmp_path)


def test_a_line_without_a_newline_meets_the_size_cap(tmp_path, servers):
    port = servers.start(tmp_path, "noline")
    url = f"http://127.0.0.1:{port}"
    case = attach_case("attach-endless-line", [url], (f"{url}/v1/completions", "MiB", "without a newline"), rc=1,
                       timeout=30)
    assert_clean(case, tmp_path)


# ---- malformed replies: optional ones are a warning, required ones name the URL and the field --------------------

def test_junk_in_the_optional_metrics_is_a_warning(tmp_path, servers):
    port = servers.start(tmp_path, "metrics-junk")
    url = f"http://127.0.0.1:{port}"
    assert_clean(attach_case("attach-metrics-junk", [url], (f"{url}/metrics", "ignored"), rc=1, after=measured),
                 tmp_path)


def test_malformed_step_times_in_server_info_are_a_warning(tmp_path, servers):
    port = servers.start(tmp_path, "bad-step-times")
    url = f"http://127.0.0.1:{port}"
    assert_clean(attach_case("attach-bad-step-times", [url], (f"{url}/server_info", "step_time_dict"), rc=1,
                             after=measured), tmp_path)


def test_a_malformed_stream_event_names_the_url_and_the_field(tmp_path, servers):
    port = servers.start(tmp_path, "bad-choices")
    url = f"http://127.0.0.1:{port}"
    assert_clean(attach_case("attach-bad-choices", [url], (f"{url}/v1/completions", "choices"), rc=1), tmp_path)


def test_a_malformed_model_list_names_the_url_and_the_field(tmp_path, servers):
    port = servers.start(tmp_path, "bad-models")
    url = f"http://127.0.0.1:{port}"
    assert_clean(attach_case("attach-bad-models", [url], (f"{url}/v1/models", "data"), rc=1), tmp_path)


# ---- the runs file: one per run, whole records only ------------------------------------------------------------

def test_two_runs_in_one_second_never_share_or_overwrite_files(tmp_path, servers):
    """Another run with the same --out in the same second: its receipt and runs file (made here for every second the
    case may start in) stay byte for byte as they were, and this run's files are its own."""
    port = servers.start(tmp_path, "ok")
    now = time.time()
    theirs = []
    for s in range(-1, 40):
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now + s))
        for suffix in (".json", "_runs.jsonl"):
            theirs.append(f"{OUT}/bench-eagle3_fake_{stamp}{suffix}")

    def setup(tmp: Path) -> None:
        cfg(tmp)
        (tmp / OUT).mkdir()
        for p in theirs:
            (tmp / p).write_text("another run's\n")

    def own(tmp: Path, r: subprocess.CompletedProcess) -> str | None:
        mine = sorted(set(p.name for p in (tmp / OUT).iterdir()) - {Path(p).name for p in theirs})
        if len([m for m in mine if m.endswith("_runs.jsonl")]) != 1 or not any(m.endswith(".json") for m in mine):
            return f"this run's own receipt and runs file: {mine}"
        return None

    assert_clean(attach_case("runs-same-second", [f"http://127.0.0.1:{port}"], ("runs ->",), rc=1, setup=setup,
                             watch=tuple(theirs), after=own), tmp_path)


def test_a_runs_file_cut_in_half_a_line_keeps_its_whole_runs(tmp_path, servers):
    port = servers.start(tmp_path, "ok")

    def setup(tmp: Path) -> None:
        cfg(tmp)
        subprocess.run([sys.executable, "-m", "sglang_blackwell.cli", "bench", "eagle3", "--config", str(tmp / CONFIG),
                        "--out", str(tmp / "first"), "--no-plots", "--arms", "baseline", "--attach",
                        f"http://127.0.0.1:{port}"], env=hostile.clean_env(tmp, {}), capture_output=True,
                       timeout=60)
        (whole,) = (tmp / "first").glob("*_runs.jsonl")
        text = whole.read_text()
        assert text.count("\n") == 1, text[:300]
        (tmp / "r_runs.jsonl").write_text(text + text[: len(text) // 2])  # the disk filled mid-record

    def one_run(tmp: Path, r: subprocess.CompletedProcess) -> str | None:
        (receipt,) = (tmp / OUT).glob("*.json")
        n = len(json.loads(receipt.read_text())["runs"])
        return None if n == 1 else f"the receipt holds {n} runs, expected the 1 whole one"

    case = Case("from-runs-half-a-line", "net", ["bench", "eagle3", "--config", "{tmp}/" + CONFIG, "--out",
                                                 "{tmp}/" + OUT, "--no-plots", "--arms", "baseline", "--from-runs",
                                                 "{tmp}/r_runs.jsonl"],
                names=("r_runs.jsonl:2", "cut off", "ignored"), rc=1, setup=setup, watch=("r_runs.jsonl",),
                after=one_run)
    assert_clean(case, tmp_path)


def test_a_disk_that_fills_during_an_append_leaves_whole_records(tmp_path, servers):
    port = servers.start(tmp_path, "ok")
    url = f"http://127.0.0.1:{port}"

    def setup(tmp: Path) -> None:
        cfg(tmp)
        (tmp / "full_disk_cli.py").write_text(FULL_DISK_CLI)

    def whole(tmp: Path, r: subprocess.CompletedProcess) -> str | None:
        (runs,) = (tmp / OUT).glob("*_runs.jsonl")
        text = runs.read_text()
        if not text.endswith("\n") or text.count("\n") != 1:
            return f"the runs file is not its one whole record: {len(text)} bytes, ends {text[-40:]!r}"
        json.loads(text)
        if list((tmp / OUT).glob("*.json")):
            return "a receipt was written from a run that could not be recorded"
        return None

    case = attach_case("runs-disk-full", [url, url], ("_runs.jsonl", "File too large", "--from-runs"), rc=2,
                       arms="baseline,eagle3", setup=setup, after=whole)
    case.cli = (sys.executable, "{tmp}/full_disk_cli.py", "{tmp}/" + OUT)
    assert_clean(case, tmp_path)


@pytest.mark.parametrize("value", ["1,2", "0,1,2", "nan,1,2", "5,1,2", "1,2,x"])
def test_request_timeouts_must_be_three_sane_seconds(tmp_path, value):
    case = Case(f"request-timeouts-{value}", "net", ["bench", "eagle3", "--config", "{tmp}/" + CONFIG, "--out",
                                                      "{tmp}/" + OUT, "--attach", "http://127.0.0.1:1",
                                                      "--arms", "baseline", "--request-timeouts", value],
                names=("--request-timeouts", value), setup=cfg, watch=(OUT,))
    assert_clean(case, tmp_path)
