"""The suite's three server launches and what is measured on each (sglang 0.5.14, TP=2, the lab model pair).

Every arm mirrors the target box (8x RTX PRO 6000 on PCIe): custom all-reduce off, radix cache off, Triton
attention (FA3 is stripped from the lab's kernel wheel), decode CUDA graphs up to bs 16, no prefill graph.
    A  EAGLE-3 + fusion on   greedy outputs, accept length, logprobs, profiler window (fused kernels per verify),
                             workspace log line (P5: 16 x 3 = 48 tokens)
    B  EAGLE-3 + fusion off  greedy outputs, accept length, logprobs, profiler window (no fused kernel at all)
    C  no speculation, fusion on   greedy outputs, logprobs, workspace log line (P5: 16 x 1 = 16 tokens)
One arm = one server in its own session (bench.server.launched_server): measured, then taken down, then the
GPUs are checked for leftovers. Every measurement step records its own error and the arm goes on where that
makes sense; only a server that does not start ends an arm early. Nothing here raises on a failed check: the
tests judge the recorded facts.
"""

from __future__ import annotations

import re
import time
import urllib.error
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from labline_env import LabConfig, model_config

from sglang_blackwell.bench.eagle3 import sglang_api, trace, trace_kernels
from sglang_blackwell.bench.eagle3.server import (
    Server,
    ServerError,
    TeardownError,
    free_port,
    http_json,
    launched_server,
)
from sglang_blackwell.box import nvidia_smi as nvidia
from sglang_blackwell.qualify import gpu_suite_checks as checks

if TYPE_CHECKING:
    from suite_env import Deadline, Progress

TP = checks.lab_tp()  # $SGLB_TP, default 2
CUDA_GRAPH_MAX_BS = 16
NUM_STEPS, EAGLE_TOPK, NUM_DRAFT_TOKENS = 2, 1, 3
LAB_FLAGS = ["--disable-custom-all-reduce", "--disable-radix-cache", "--attention-backend", "triton",
             "--cuda-graph-backend-prefill", "disabled", "--cuda-graph-max-bs-decode", str(CUDA_GRAPH_MAX_BS),
             "--mem-fraction-static", "0.5", "--trust-remote-code", "--skip-tokenizer-init"]
FUSION_ON = ["--flashinfer-allreduce-fusion-backend", "trtllm"]
FUSION_OFF = ["--enforce-disable-flashinfer-allreduce-fusion"]

GREEDY_NEW_TOKENS = 64
LOGPROB_PROMPTS, LOGPROB_NEW_TOKENS, TOP_K = 2, 16, 5
STARTUP_TIMEOUT_S = 300  # ~70-100 s with warm caches; a cold sglang tvm-ffi JIT adds ~60 s
WARM_STARTUP_S = 90  # launch an arm only if at least this much startup time is left
REQUEST_TIMEOUT_S = 90
WARMUP_TIMEOUT_S = 180  # first requests compile Triton kernels for new shapes
TRACE_TIMEOUT_S = 90
TEARDOWN_RESERVE_S = 40
GPU_IDLE_MIB = 1024  # after a teardown every GPU must be below this (the lab idles at ~0 MiB)
SUSPICIOUS = re.compile(r"Disabling flashinfer allreduce fusion|Skipping allreduce fusion|allreduce_fusion API is "
                        r"not available|preflight probe failed|fusion disabled globally|Traceback|"
                        r"TorchSymmMemCommunicator")
PATTERNS = {"fused": trace_kernels.FUSED_ALLREDUCE_KERNEL, "nccl_ar": trace_kernels.NCCL_ALLREDUCE_KERNEL}


@dataclass(frozen=True)
class ArmSpec:
    name: str
    title: str
    speculative: bool
    fusion: bool
    profile_steps: int  # 0: no profiler window
    reserve_s: float  # after /health: measurement + teardown (the startup wait gets what is left)

    @property
    def min_budget_s(self) -> float:
        """Do not launch with less time left than a warm startup plus the reserve."""
        return WARM_STARTUP_S + self.reserve_s

    def flags(self, cfg: LabConfig) -> list[str]:
        spec = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", str(cfg.draft),
                "--speculative-num-steps", str(NUM_STEPS), "--speculative-eagle-topk", str(EAGLE_TOPK),
                "--speculative-num-draft-tokens", str(NUM_DRAFT_TOKENS)] if self.speculative else []
        return [*LAB_FLAGS, *(FUSION_ON if self.fusion else FUSION_OFF), *spec]

    def expected_workspace_tokens(self) -> int | None:
        """P5: the fusion workspace holds the largest decode / target-verify CUDA graph."""
        if not self.fusion:
            return None
        return CUDA_GRAPH_MAX_BS * (NUM_DRAFT_TOKENS if self.speculative else 1)


ARMS = {
    "A": ArmSpec("A", "EAGLE-3 + fusion on", speculative=True, fusion=True, profile_steps=10, reserve_s=70),
    "B": ArmSpec("B", "EAGLE-3 + fusion off", speculative=True, fusion=False, profile_steps=6, reserve_s=60),
    "C": ArmSpec("C", "no speculation, fusion on", speculative=False, fusion=True, profile_steps=0,
                 reserve_s=45),
}


def server_command(spec: ArmSpec, cfg: LabConfig, port: int) -> list[str]:
    return [cfg.python, "-m", "sglang.launch_server", "--model-path", str(cfg.target), "--tp-size", str(TP),
            "--host", "127.0.0.1", "--port", str(port), *spec.flags(cfg)]


class RequestFailed(RuntimeError):
    pass


def generate(url: str, ids: list[int], n: int, *, timeout: float, logprobs: bool = False
             ) -> tuple[list[int], dict[str, Any]]:
    body: dict[str, Any] = {"input_ids": ids,
                            "sampling_params": {"max_new_tokens": n, "temperature": 0.0, "ignore_eos": True}}
    if logprobs:
        body.update(return_logprob=True, top_logprobs_num=TOP_K)
    try:
        r = http_json(url + "/generate", body, timeout=timeout)
    except urllib.error.HTTPError as e:
        raise RequestFailed(f"POST /generate: HTTP {e.code}: {e.read()[:300]!r}") from None
    except (OSError, ValueError) as e:
        raise RequestFailed(f"POST /generate: {type(e).__name__}: {e}") from None
    if not isinstance(r, dict) or "error" in r:
        raise RequestFailed(f"POST /generate answered {str(r)[:300]}")
    out = r.get("output_ids")
    if not isinstance(out, list) or len(out) != n:
        raise RequestFailed(f"asked for {n} tokens (ignore_eos), got {None if out is None else len(out)}")
    return [int(t) for t in out], r.get("meta_info") or {}


def run_arm(spec: ArmSpec, cfg: LabConfig, deadline: Deadline, progress: Progress) -> dict[str, Any]:
    t0 = time.monotonic()
    target_cfg = model_config(cfg.target)
    rec: dict[str, Any] = {"name": spec.name, "title": spec.title, "flags": spec.flags(cfg), "steps": {},
                           "num_layers": target_cfg.get("num_hidden_layers"), "expected_layers": cfg.layers,
                           "hidden": target_cfg.get("hidden_size")}
    left = deadline.left()
    if left < spec.min_budget_s:
        rec["skipped"] = f"deadline: {left:.0f} s left of SGLB_DEADLINE_S={cfg.deadline_s:.0f}, arm {spec.name} " \
                         f"needs about {spec.min_budget_s:.0f} s"
        progress(f"arm {spec.name}: {rec['skipped']}")
        return rec
    port = free_port()
    log = cfg.out / "logs" / f"server_{spec.name}.log"
    cmd = server_command(spec, cfg, port)
    rec.update(cmd=cmd, log=str(log))
    startup_timeout = min(STARTUP_TIMEOUT_S, left - spec.reserve_s)
    progress(f"arm {spec.name} ({spec.title}): launching, /health wait <= {startup_timeout:.0f} s, log {log}")
    server = Server(url=f"http://127.0.0.1:{port}", log_path=log)
    try:
        with launched_server(server, cmd, cfg.child_env(), startup_timeout_s=startup_timeout, grace_s=20.0,
                             gpu_release_s=30.0, progress=progress):
            rec["startup_s"] = round(server.startup_s or 0.0, 1)
            progress(f"arm {spec.name}: healthy after {rec['startup_s']} s")
            measure(spec, cfg, server.url, rec, deadline, progress)
            progress(f"arm {spec.name}: measured; taking the server down")
    except TeardownError as e:
        rec["teardown_error"] = str(e)
        progress(f"arm {spec.name}: TEARDOWN FAILED: {e}")
    except ServerError as e:
        rec["launch_error"] = str(e)
        progress(f"arm {spec.name}: server did not come up: {str(e).splitlines()[0]}")
    rec["teardown"] = server.teardown or None
    rec["teardown_check"] = teardown_check(server.teardown, rec.get("teardown_error"))
    progress(f"arm {spec.name}: teardown clean={rec['teardown_check']['clean']} "
             f"({rec['teardown_check']['why']})")
    rec["log_checks"] = log_checks(spec, log, rec.get("hidden"))
    rec["duration_s"] = round(time.monotonic() - t0, 1)
    return rec


def measure(spec: ArmSpec, cfg: LabConfig, url: str, rec: dict[str, Any], deadline: Deadline,
            progress: Progress) -> None:
    prompts = checks.lab_prompts()
    rec["prompts"] = prompts

    def server_info() -> None:
        info = sglang_api.server_info(url)
        keys = ("version", "tp_size", "speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
                "speculative_num_draft_tokens", "flashinfer_allreduce_fusion_backend",
                "enforce_disable_flashinfer_allreduce_fusion", "disable_custom_all_reduce", "disable_radix_cache",
                "attention_backend", "cuda_graph_max_bs_decode", "enable_torch_symm_mem", "max_running_requests")
        rec["server"] = {k: info.get(k) for k in keys}
        rec["identity"] = identity(spec, rec["server"])

    def warmup() -> None:
        generate(url, prompts[-1], 16, timeout=WARMUP_TIMEOUT_S)

    def greedy() -> None:
        t = time.monotonic()
        outs, metas = [], []
        for p in prompts:
            ids, meta = generate(url, p, GREEDY_NEW_TOKENS, timeout=REQUEST_TIMEOUT_S)
            outs.append(ids)
            metas.append({k: meta.get(k) for k in ("completion_tokens", "spec_verify_ct", "spec_accept_length",
                                                  "e2e_latency")})
        rec["greedy"] = {"new_tokens": GREEDY_NEW_TOKENS, "outputs": outs, "metas": metas,
                         "wall_s": round(time.monotonic() - t, 2)}
        rec["bigram"] = checks.bigram_consistency(prompts, outs)
        if spec.speculative:
            rec["accept"] = checks.accept_length(metas)
        progress(f"arm {spec.name}: greedy {len(outs)} x {GREEDY_NEW_TOKENS} tokens in {rec['greedy']['wall_s']} s"
                 + (f", accept length {rec['accept']['accept_len']}" if spec.speculative else ""))

    def logprobs() -> None:
        rows = []
        for i, p in enumerate(prompts[:LOGPROB_PROMPTS]):
            ids, meta = generate(url, p, LOGPROB_NEW_TOKENS, timeout=REQUEST_TIMEOUT_S, logprobs=True)
            lp = checks.logprobs_from_meta(meta)
            greedy_outs = (rec.get("greedy") or {}).get("outputs")
            lp["tokens_match_greedy"] = ids == greedy_outs[i][:LOGPROB_NEW_TOKENS] if greedy_outs else None
            rows.append(lp)
        rec["logprobs"] = rows

    def server_accept() -> None:
        rec["server_accept_len"] = sglang_api.avg_accept_length(sglang_api.server_info(url))

    def profile() -> None:
        rec["profile"] = profile_window(spec, cfg, url, prompts[0], cfg.layers or rec.get("num_layers"), progress)

    steps = [("server_info", server_info), ("warmup", warmup), ("greedy", greedy), ("logprobs", logprobs)]
    if spec.speculative:
        steps.append(("server_accept", server_accept))
    if spec.profile_steps:
        steps.append(("profile", profile))
    aborted = None
    for name, fn in steps:
        if aborted:
            rec["steps"][name] = f"skipped: {aborted}"
            continue
        if deadline.left() < TEARDOWN_RESERVE_S:
            aborted = f"deadline ({deadline.left():.0f} s left)"
            rec["steps"][name] = f"skipped: {aborted}"
            continue
        try:
            fn()
            rec["steps"][name] = "ok"
        except Exception as e:
            rec["steps"][name] = f"error: {type(e).__name__}: {e}"[:1000]
            progress(f"arm {spec.name}: step {name} failed: {rec['steps'][name][:300]}")
            if name in ("warmup", "greedy") or "timed out" in str(e) or isinstance(e, ConnectionError):
                aborted = f"{name} failed"


def identity(spec: ArmSpec, server: dict[str, Any]) -> dict[str, Any]:
    """The running server is the arm: TP, speculation, fusion backend, the target-box flags."""
    want = {"tp_size": TP, "speculative_algorithm": "EAGLE3" if spec.speculative else None,
            "flashinfer_allreduce_fusion_backend": "trtllm" if spec.fusion else None,
            "disable_custom_all_reduce": True, "disable_radix_cache": True}
    if spec.speculative:
        want.update(speculative_num_steps=NUM_STEPS, speculative_eagle_topk=EAGLE_TOPK,
                    speculative_num_draft_tokens=NUM_DRAFT_TOKENS)
    bad = {k: (server.get(k), v) for k, v in want.items() if server.get(k) != v}
    return {"ok": not bad, "why": "; ".join(f"{k}={got!r} (expected {exp!r})" for k, (got, exp) in bad.items())
            or "server_info matches the arm"}


def profile_window(spec: ArmSpec, cfg: LabConfig, url: str, prompt: list[int], num_layers: int | None,
                   progress: Progress) -> dict[str, Any]:
    """Torch profiler over `profile_steps` forward batches of one request (SGLang /start_profile, CPU + GPU
    activities, no stacks or shapes); fused all-reduce and NCCL all-reduce kernels per target-verify step."""
    steps = spec.profile_steps
    tdir = cfg.out / "traces" / spec.name
    tdir.mkdir(parents=True, exist_ok=True)
    t = time.monotonic()
    sglang_api.start_profile(url, str(tdir), steps, prefix=spec.name)
    generate(url, prompt, NUM_DRAFT_TOKENS * steps + 40, timeout=REQUEST_TIMEOUT_S)
    if not list(tdir.glob(f"{spec.name}-*-TP-0.trace.json*")):
        # it stops by itself after `steps` forward batches, and writes the trace before the request can end
        sglang_api.stop_profile(url)
    out: dict[str, Any] = {"steps": steps, "dir": str(tdir)}
    events, path = wait_trace(tdir, f"{spec.name}-*-TP-0.trace.json*", TRACE_TIMEOUT_S)
    out["trace_files"] = {p.name: p.stat().st_size for p in sorted(tdir.iterdir()) if p.is_file()}
    out["events"] = len(events)
    verify = trace_kernels.kernels_per_span(events, trace_kernels.is_verify_span, PATTERNS)
    out["method"] = verify["method"]
    out["fallback"] = verify.get("fallback")
    out["kernel_events"] = verify["kernel_events"]
    out["kernels_matched"] = verify["kernels_matched"]
    out["unattributed"] = verify["unattributed"]
    out["verify_spans"] = [{"name": s["name"], "dur_us": round(s["dur"], 1), "counts": s["counts"]}
                           for s in verify["spans"]]
    every = trace_kernels.kernels_per_span(events, lambda n: n.startswith("step["), PATTERNS)
    out["by_mode"] = by_mode(every["spans"])
    fused = [s["counts"]["fused"] for s in verify["spans"]]
    out["verdict"] = rank_verdict(spec, fused, num_layers)
    # every other rank's trace: the same count per verify step (rank_verdicts), and with all of them the verify
    # time with the waits for the other rank removed and the per-call kernel medians (trace.verify_across_ranks)
    paths = [path]
    out["rank_verdicts"] = {}
    for r in range(1, TP):
        try:  # written by rank r itself, next to rank 0's, before the ranks' barrier
            ev, found = wait_trace(tdir, f"{spec.name}-*-TP-{r}.trace.json*", TRACE_TIMEOUT_S / 3)
        except RuntimeError as e:
            out["rank_verdicts"][str(r)] = {"ok": False, "why": str(e)}
            continue
        rv = trace_kernels.kernels_per_span(ev, trace_kernels.is_verify_span, PATTERNS)
        counts = [s["counts"]["fused"] for s in rv["spans"]]
        if r == 1:
            out["rank1_fused_per_verify"] = counts
        out["rank_verdicts"][str(r)] = rank_verdict(spec, counts, num_layers)
        paths.append(found)
    if len(paths) == TP:
        try:  # facts only (speed is the benchmark's receipt): a problem here must not cost the count
            out["verify_ranks"] = trace.profile_traces(paths)["verify_ranks"]
        except Exception as e:
            out["verify_ranks"] = {"error": f"{type(e).__name__}: {e}"[:300]}
    out["seconds"] = round(time.monotonic() - t, 1)
    progress(f"arm {spec.name}: profile {path.name} ({path.stat().st_size} B): {out['verdict']['why']} "
             f"[{out['method']}]")
    return out


def rank_verdict(spec: ArmSpec, fused: list[int], num_layers: int | None) -> dict[str, Any]:
    """Fused all-reduce launches per verify step of one rank: 2L - 1 in every step with fusion on
    (trace_kernels.fusion_in_verify_verdict), none at all with it off."""
    if spec.fusion:
        expected = checks.fused_kernels_per_forward(num_layers) if num_layers else 0
        return trace_kernels.fusion_in_verify_verdict(fused, expected)
    return {"steps": len(fused), "counts": fused, "expected_per_step": 0, "ok": bool(fused) and not any(fused),
            "why": f"{len(fused)} verify steps, fused launches {sum(fused)}" if fused
            else "no target-verify step in the trace"}


def by_mode(spans: list[dict[str, Any]]) -> dict[str, Any]:
    """Per forward mode (step[DECODE, step[TARGET_VERIFY, step[EXTEND, ...): steps, fused and NCCL launches."""
    out: dict[str, Any] = {}
    for s in spans:
        mode = s["name"].split()[0].removeprefix("step[").rstrip("]")
        m = out.setdefault(mode, {"steps": 0, "fused": 0, "nccl_ar": 0})
        m["steps"] += 1
        m["fused"] += s["counts"]["fused"]
        m["nccl_ar"] += s["counts"]["nccl_ar"]
    return out


def wait_trace(d: Path, pattern: str, timeout_s: float) -> tuple[list[dict[str, Any]], Path]:
    """The first trace matching `pattern` once it parses (the server writes it gzipped, in place)."""
    t0 = time.monotonic()
    last = "no file yet"
    while time.monotonic() - t0 < timeout_s:
        for p in sorted(d.glob(pattern)):
            try:
                return trace.load_trace(p), p
            except (OSError, ValueError, EOFError) as e:
                last = f"{p.name}: {type(e).__name__}: {e}"
        time.sleep(1.0)
    raise RuntimeError(f"no readable {pattern} in {d} after {timeout_s:.0f} s ({last})")


def log_checks(spec: ArmSpec, log: Path, hidden: int | None) -> dict[str, Any]:
    if not log.is_file():
        return {"ok": False, "why": f"no server log at {log}"}
    text = log.read_text(errors="replace")
    lines = checks.workspace_lines(text)
    out: dict[str, Any] = {"suspicious": [ln[:300] for ln in text.splitlines() if SUSPICIOUS.search(ln)][:20]}
    tokens = spec.expected_workspace_tokens()
    if tokens is not None:
        out["workspace"] = checks.check_workspace_lines(lines, max_token_num=tokens, hidden=hidden or 0,
                                                        world_size=TP)
    else:
        out["workspace"] = {"lines": lines, "ok": not lines,
                            "why": "fusion off: no workspace created" if not lines
                            else f"fusion off, yet {len(lines)} workspace line(s) in the log"}
    return out


def teardown_check(report: dict[str, Any] | None, error: str | None) -> dict[str, Any]:
    """The server session is gone, nvidia-smi lists none of its processes, and no GPU holds memory any more."""
    quiet = gpu_quiet(30.0)
    gpu = (report or {}).get("gpu") or {}
    out = {"session_gone": bool(report and report.get("group_gone")), "sigkill_needed": (report or {}).get(
        "sigkill"), "ours_left": gpu.get("ours_left"), "gpu_checked": gpu.get("checked"), **quiet}
    if error:
        return {**out, "clean": False, "why": error}
    if not report:
        return {**out, "clean": False, "why": "no teardown report (the server was never started?)"}
    if not out["session_gone"]:
        return {**out, "clean": False, "why": f"processes left: {report.get('left')}"}
    if not out["gpu_checked"]:
        return {**out, "clean": False, "why": "nvidia-smi unavailable: GPU processes not checked"}
    if out["ours_left"]:
        return {**out, "clean": False, "why": f"GPU processes of the server left: {out['ours_left']}"}
    if not quiet["idle"]:
        return {**out, "clean": False, "why": f"GPUs not idle 30 s after teardown: compute apps "
                                              f"{quiet['compute_apps']}, memory used {quiet['memory_used_mib']} MiB"}
    return {**out, "clean": True, "why": "session gone, no GPU process, GPUs idle"}


def gpu_quiet(timeout_s: float) -> dict[str, Any]:
    if not nvidia.available():
        return {"idle": False, "compute_apps": None, "memory_used_mib": None, "waited_s": 0.0}
    t0 = time.monotonic()
    while True:
        apps = nvidia.compute_apps()
        mem = nvidia.memory_used_mib()
        idle = not apps and bool(mem) and max(mem) < GPU_IDLE_MIB
        if idle or time.monotonic() - t0 > timeout_s:
            return {"idle": idle, "compute_apps": apps, "memory_used_mib": mem,
                    "waited_s": round(time.monotonic() - t0, 1)}
        time.sleep(1.0)
