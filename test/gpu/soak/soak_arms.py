"""The soak's servers: both arms started at once, as users start them (`sglang-blackwell serve -- <sglang args>`,
bench/eagle3/server.py's launched_server in a thread each: own session, watched, taken down whatever happens), their
reference greedy outputs before the soak, and their state after it (server_checks.check_after: alive, the same
scheduler, /health, the KV pool back to idle, the first reference; then the other references)."""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from typing import Any

from server_checks import After, Baseline, Target, check_after, reference_text, served_target, server_info
from soak_env import (
    ARM_SPECULATIVE,
    CONTEXT_LEN,
    REFERENCE_ID_LENGTHS,
    REFERENCE_PROMPT,
    REFERENCE_TOKENS,
    STARTUP_TIMEOUT_S,
    Config,
)
from soak_schedule import FIRST_ID

SERVER_KEYS = ("version", "tp_size", "host", "speculative_algorithm", "attention_backend", "context_length",
               "max_total_num_tokens", "mem_fraction_static", "cuda_graph_max_bs_decode")


def reference_prompts(vocab: int) -> list[Any]:
    """The text prompt, then token-id prompts of REFERENCE_ID_LENGTHS (fixed ids, within the vocabulary)."""
    span = vocab - FIRST_ID
    return [REFERENCE_PROMPT, *[[FIRST_ID + (i * 13) % span for i in range(n)] for n in REFERENCE_ID_LENGTHS]]


def _short(prompt: Any) -> str:
    return prompt if isinstance(prompt, str) else f"<{len(prompt)} token ids>"


@dataclass
class Arm:
    name: str
    target: Target | None = None
    base: Baseline | None = None
    start: dict[str, Any] = field(default_factory=dict)
    references: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None


def start_all(cfg: Config, stack: contextlib.ExitStack, progress: Any) -> dict[str, Arm]:
    """Launch every arm's server at once (one thread each, each entered into `stack`, which takes them down);
    returns the arms, each with its target or the error that kept it from starting."""
    from sglang_blackwell.bench.eagle3.server import Server, free_port, launched_server

    arms = {name: Arm(name) for name in ARM_SPECULATIVE}
    lock = threading.Lock()

    def launch(arm: Arm) -> None:
        port = free_port("0.0.0.0")
        log = cfg.out / "logs" / f"server_{arm.name}.log"
        cmd = cfg.serve_command(port, ARM_SPECULATIVE[arm.name])
        arm.start = {"cmd": cfg.masked(cmd), "log": str(log)}
        server = Server(url=f"http://127.0.0.1:{port}", log_path=log)
        cm = launched_server(server, cmd, cfg.child_env(), startup_timeout_s=STARTUP_TIMEOUT_S, grace_s=15.0,
                             gpu_release_s=30.0, progress=progress)
        try:
            cm.__enter__()
        except BaseException as e:  # a server that did not come up: its session is already down
            arm.error = f"the {arm.name} server did not start: {str(e)[:300]}"
            arm.start["launch_error"] = str(e)[:2000]
            return
        with lock:
            stack.push(cm.__exit__)
        if cfg.sids is not None:  # the runner ends these sessions if a killed run leaves them behind
            with lock, open(cfg.sids, "a") as f:
                f.write(f"{server.pid}\n")
        arm.start["startup_s"] = round(server.startup_s or 0.0, 1)
        arm.target = served_target(server.url, cfg.api_key, server.pid or 0, cfg.target, CONTEXT_LEN, out=cfg.out)
        arm.start["server"] = {k: v for k, v in server_info(arm.target).items() if k in SERVER_KEYS}
        progress(f"{arm.name}: healthy after {arm.start['startup_s']} s")

    threads = [threading.Thread(target=launch, args=(a,), name=f"start-{a.name}") for a in arms.values()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return arms


def take_references(arm: Arm) -> None:
    """The baseline (scheduler, KV pool idle use) and every reference output, before the soak."""
    assert arm.target is not None
    arm.base = Baseline.take(arm.target, REFERENCE_PROMPT, REFERENCE_TOKENS)
    arm.references = [{"prompt": _short(p), "before": reference_text(arm.target, p, REFERENCE_TOKENS)}
                      for p in reference_prompts(arm.target.vocab_size)]
    missing = [r["prompt"] for r in arm.references if r["before"] is None]
    if missing:
        arm.error = f"the {arm.name} server's reference requests failed ({missing}): the soak cannot be judged"


def check_all(arms: dict[str, Arm], kv_wait_s: float) -> dict[str, After]:
    """check() for every arm at once (each polls its KV pool for up to kv_wait_s)."""
    out: dict[str, After] = {}
    threads = [threading.Thread(target=lambda a=a: out.__setitem__(a.name, check(a, kv_wait_s)), name=f"check-{n}")
               for n, a in arms.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def check(arm: Arm, kv_wait_s: float) -> After:
    """The arm's state after the soak; the references' `after` and `same`."""
    assert arm.target is not None and arm.base is not None
    after = check_after(arm.target, arm.base, REFERENCE_PROMPT, REFERENCE_TOKENS, kv_wait_s)
    prompts = reference_prompts(arm.target.vocab_size)
    for r, p in zip(arm.references, prompts, strict=True):
        r["after"] = None if after.died() else (after.reference_text if isinstance(p, str) else
                                                reference_text(arm.target, p, REFERENCE_TOKENS))
        r["same"] = r["after"] is not None and r["after"] == r["before"]
    return after
