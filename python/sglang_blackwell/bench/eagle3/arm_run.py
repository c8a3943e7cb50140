"""One arm run: launch the arm's server in its own session (or take the attached one), check it is the server
the arm describes (/server_info; a vLLM server's /metrics), warm up, measure every concurrency level (or the
grid's cells), optionally a profiler window, then take the server down completely; recorded as one run."""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import traceback
from pathlib import Path
from typing import Any

from ... import procs
from . import client, grid, launcher, preflight, prompts, sglang_api, triton_cache, vllm_api, window
from .config import BenchConfig
from .config_arms import ArmSpec
from .config_workload import Prompt
from .profiling import profile_window
from .progress import Progress
from .run_error import BenchRunError
from .server import (
    Server,
    ServerError,
    TeardownError,
    attached_server,
    busy_port,
    free_port,
    launched_server,
    port_of,
)

SERVER_FACTS = (  # what /server_info says about the server that was measured
    "version", "model_path", "tp_size", "speculative_algorithm", "speculative_draft_model_path",
    "speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens", "attention_backend",
    "disable_custom_all_reduce", "enforce_disable_flashinfer_allreduce_fusion",
    "flashinfer_allreduce_fusion_backend", "enable_flashinfer_allreduce_fusion", "cuda_graph_max_bs",
    "cuda_graph_max_bs_decode", "disable_radix_cache", "decode_log_interval", "skip_tokenizer_init")


def server_command(cfg: BenchConfig, arm: ArmSpec, port: int) -> list[str]:
    cmd = [*cfg.server.launcher, "--model-path", cfg.model.target, "--tp-size", str(cfg.server.tp),
           "--host", cfg.server.host, "--port", str(port)]
    if cfg.model.tokenizer == "none":
        cmd.append("--skip-tokenizer-init")
    elif cfg.model.tokenizer != "target":
        cmd += ["--tokenizer-path", cfg.model.tokenizer]
    cmd += cfg.server.args
    if arm.speculative:
        cmd += [*cfg.speculative_args, "--speculative-draft-model-path", str(arm.draft or cfg.model.draft)]
    cmd += arm.args
    return cmd


def server_env(cfg: BenchConfig, arm: ArmSpec) -> dict[str, str]:
    env = dict(os.environ)
    env.update(cfg.server.env)
    env.update(arm.env)
    if cfg.server.record_step_time:
        env["SGLANG_RECORD_STEP_TIME"] = "1"
    return env


def run_arm(cfg: BenchConfig, arm: ArmSpec, repeat: int, stem: Path, *, url: str | None,
            progress: Progress, chosen: launcher.Launcher | None = None) -> dict[str, Any]:
    """One arm run, recorded. `chosen`: how the launcher's interpreter was chosen (launcher.resolve; None: cfg's
    launcher as written)."""
    rec: dict[str, Any] = {"arm": arm.name, "repeat": repeat, "mode": "attach" if url else "launch",
                           "started": dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat(),
                           "url": url, "startup_s": None, "server": {}, "levels": {}, "profile": None,
                           "teardown": None, "log": None, "error": None}
    try:
        if url:
            measure(cfg, arm, attached_server(url), rec, progress, launched=False)
            return rec
        port = cfg.server.port or free_port(cfg.server.host)
        busy = busy_port(cfg.server.host, port)
        if busy:  # someone took the port since the last arm: never measure their server as ours
            raise ServerError(f"{busy}: not launching there ([server] port = 0 picks a free port per launch)")
        url = f"http://{cfg.server.host}:{port}"
        log = stem.with_name(stem.name + "_logs") / f"r{repeat}-{_safe(arm.name)}.log"
        rec.update(url=url, log=str(log),
                   launcher=(chosen or launcher.Launcher(cfg.server.launcher, launcher.AS_WRITTEN)).record())
        cmd = server_command(cfg, arm, port)
        progress(f"  launching: {' '.join(cmd)}")
        server = Server(url=url, log_path=log)
        triton_dir = triton_cache.cache_dir(server_env(cfg, arm))
        before = triton_cache.snapshot(triton_dir)
        try:
            with launched_server(server, cmd, server_env(cfg, arm), progress=progress,
                                 startup_timeout_s=cfg.server.startup_timeout_s,
                                 grace_s=cfg.server.teardown_grace_s,
                                 own_listener=preflight.runs_the_server(cfg.server.launcher)):
                rec["startup_s"] = round(server.startup_s or 0.0, 2)
                # what the start compiled (graph capture, the warm-up): 0 when the cache it found held it all
                rec["startup_triton_compiles"] = triton_cache.compiled(triton_dir, before)
                progress(f"  healthy after {rec['startup_s']:.1f} s, "
                         f"{triton_cache.summary_line(rec['startup_triton_compiles'])} while starting")
                measure(cfg, arm, server, rec, progress)
        finally:
            if server.teardown:
                rec["teardown"] = server.teardown
                gpu = server.teardown.get("gpu", {})
                progress(f"  torn down in {server.teardown['teardown_s']:.1f} s: session gone"
                         + (", no GPU process of ours left" if gpu.get("checked") else " (no nvidia-smi)")
                         + (" (needed SIGKILL)" if server.teardown.get("sigkill") else ""))
    except TeardownError as e:  # recorded with what was measured; run_all then stops the benchmark
        rec.update(error=str(e), fatal=True)
        progress(f"  TEARDOWN FAILED: {e}")
    except (ServerError, client.RequestError, BenchRunError) as e:
        procs.raise_if_interrupted()  # the failure of an interrupted arm run is the interrupt (see below)
        rec["error"] = str(e)
        progress(f"  FAILED: {str(e).splitlines()[0]}")
    except Exception as e:  # anything else costs this arm run, not the runs already measured
        # unless it stands for a Ctrl-C: Python turns the KeyboardInterrupt into another exception where it lands
        # in threading.Condition.wait ("RuntimeError: release unlocked lock"), and the harness must stop
        procs.raise_if_interrupted()
        rec["error"] = f"{type(e).__name__}: {e}"
        # where it came from (an unexpected error is a bug of ours or of the host): the innermost frames
        rec["error_where"] = [f"{f.filename}:{f.lineno} {f.name}" for f in traceback.extract_tb(e.__traceback__)[-6:]]
        progress(f"  FAILED: {rec['error'].splitlines()[0]} (at {' <- '.join(reversed(rec['error_where'][-3:]))})")
    return rec


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)


def check_identity(info: dict[str, Any], cfg: BenchConfig, arm: ArmSpec, url: str) -> None:
    """The server must be what the arm says: speculative or not (with the arm's draft), and the configured TP
    size."""
    alg = info.get("speculative_algorithm")
    if arm.speculative and not alg:
        raise BenchRunError(f"arm {arm.name!r} is speculative but {url} reports "
                            f"speculative_algorithm={alg!r}")
    if not arm.speculative and alg:
        raise BenchRunError(f"arm {arm.name!r} is the non-speculative baseline but {url} reports "
                            f"speculative_algorithm={alg!r}")
    draft, want = info.get("speculative_draft_model_path"), arm.draft or cfg.model.draft
    if arm.speculative and draft is not None and want is not None and draft != want:
        raise BenchRunError(f"arm {arm.name!r}: {url} serves the draft {draft!r}, the config says {want!r}")
    tp = info.get("tp_size")
    if tp is not None and tp != cfg.server.tp:
        raise BenchRunError(f"arm {arm.name!r}: {url} runs tp_size={tp}, "
                            f"config {cfg.path} says tp={cfg.server.tp}")


def check_launched(info: dict[str, Any], cfg: BenchConfig, port: int, url: str) -> None:
    """A server we launched reports our launch arguments in /server_info: the port we gave it and, for a local
    model path (sglang rewrites a hub id it downloads through ModelScope), the model we passed."""
    want: dict[str, Any] = {"port": port}
    if os.path.exists(cfg.model.target):
        want["model_path"] = cfg.model.target
    for key, value in want.items():
        if key in info and info[key] != value:
            raise BenchRunError(f"{url} reports {key}={info[key]!r}, but we launched it with {key}={value!r}: "
                                "not our server")


def endpoint(cfg: BenchConfig, url: str) -> client.Endpoint:
    """Where and how this config's requests go; the OpenAI APIs name the model GET /v1/models lists."""
    w = cfg.workload
    if w.api == "generate":
        return client.Endpoint(url=url, api="generate", stream=w.stream)
    return client.Endpoint(url=url, api=w.api, model=client.model_id(url, cfg.model.target))


def check_peer_identity(metrics: vllm_api.Metrics, arm: ArmSpec, url: str) -> None:
    """A vLLM server registers its spec-decode counters only with a speculative config."""
    spec = metrics.drafts is not None
    if arm.speculative and not spec:
        raise BenchRunError(f"arm {arm.name!r} is speculative but {url} (vLLM) exposes no "
                            f"{vllm_api.DRAFTS} counter at /metrics (no --speculative-config?)")
    if not arm.speculative and spec:
        raise BenchRunError(f"arm {arm.name!r} is the non-speculative baseline but {url} (vLLM) exposes "
                            f"{vllm_api.DRAFTS} at /metrics (started with --speculative-config)")


def measure(cfg: BenchConfig, arm: ArmSpec, server: Server, rec: dict[str, Any], progress: Progress, *,
            launched: bool = True) -> None:
    """Warm up, then every concurrency level. SGLang's extras (server facts, identity check, step times, spec
    counters, cache flush, profiler window) need /server_info: a server we launched must answer it; an attached
    one that does not (vLLM, any OpenAI-compatible server) is measured without them, said in one line."""
    url, w = server.url, cfg.workload
    info = sglang_api.server_info(url) if launched else sglang_api.server_info_or_none(url)
    ep = endpoint(cfg, url)
    peer: vllm_api.Metrics | None = None
    if info is not None:
        if launched:
            check_launched(info, cfg, port_of(url), url)
        check_identity(info, cfg, arm, url)
        rec["server"] = {k: info.get(k) for k in SERVER_FACTS}
        rec["server"]["records_step_time"] = sglang_api.step_times(info) is not None
        rec["server"]["engine"] = "sglang"
        bad_steps = sglang_api.step_times_problem(info)
        if bad_steps:  # an optional source: the measurement goes on without step times
            progress(f"  warning: {url}/server_info: {bad_steps}: ignored, no step times for this arm run")
    else:
        peer = vllm_api.metrics(url)
        junk = vllm_api.junk_warning(url, peer)
        if junk:
            progress("  " + junk)
        engine = "vllm" if peer is not None and peer.vllm else "openai-compatible"
        version = vllm_api.version(url) if engine == "vllm" else None
        rec["server"] = {"engine": engine, "engine_version": version}
        if engine == "vllm":
            check_peer_identity(peer, arm, url)
        else:
            peer = None
        progress(f"  {url}: no SGLang /server_info ({engine}{' ' + version if version else ''}): skipping "
                 "the identity check, server facts, step times, spec-counter reset, cache flush and profiler "
                 "window" + ("; accept length from vLLM's /metrics spec-decode counters"
                             if peer is not None and arm.speculative else ""))
    rec["server"].update(api=w.api, model_id=ep.model)
    srv = window.Server(ep=ep, sglang=info is not None, speculative=arm.speculative, peer_metrics=peer is not None)
    warm_ep = dataclasses.replace(ep, stream=False) if ep.api == "generate" else ep  # /generate: unstreamed
    if cfg.grid:
        def profile(prompt: Prompt, info: dict[str, Any] = info or {}) -> dict[str, Any]:
            return profile_window(cfg, server, info, progress, ep=warm_ep, prompt=prompt, kernel_classes=True)

        grid.measure_grid(cfg, arm, srv, rec, progress, ids=prompts.allowed_ids(cfg),
                          triton_dir=triton_cache.cache_dir(server_env(cfg, arm)) if launched else None,
                          profile=profile if info is not None else None)
        return
    for c in w.concurrency:  # warm-up: every batch size the window uses (JIT kernels compile on first use)
        client.run_level(warm_ep, w.prompts, concurrency=c, rounds=1, output_len=w.warmup_output_len,
                         prompt_offset=len(w.prompts) - c)
    ttft_probe = None if w.stream else client.ttft_probe(ep, w.prompts[0], n=3)
    offset = 0
    for c in w.concurrency:
        m = window.measure(srv, w.prompts, concurrency=c, rounds=w.rounds, output_len=w.output_len,
                           prompt_offset=offset, ttft_probe=ttft_probe)
        offset += c * w.rounds
        rec["levels"][str(c)] = m
        progress(f"  c={c}: " + window.line(m))
    if cfg.profile.steps and arm.name in cfg.profile.arms and info is not None:
        rec["profile"] = profile_window(cfg, server, info, progress, ep=warm_ep)
