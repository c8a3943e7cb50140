"""Fixtures of the user-path GPU tests (marker `gpu`; run them with benchmark/lab/userpath.sh on the GPU lab).

A user's server at TP=1, started the way the README tells users (`sglang-blackwell serve -- <sglang args>`, with
the tokenizer, the default grammar backend, radix cache and decode CUDA graphs): `openai_server` (no
speculation, test_1_openai.py) and then `eagle3_server` (the same plus the EAGLE-3 draft, test_2_eagle3.py),
one after the other (module scope: each is taken down, and the GPU checked free, before the next starts).
The tests talk to them through the real `openai` client. What the receipt needs goes to $SGLB_OUT/facts.json as
soon as it is known. A launch that would not fit in SGLB_DEADLINE_S is skipped, with the reason; SIGTERM/SIGHUP
unwind like Ctrl-C, so a running server is always taken down.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from userpath_env import (
    RESERVE_S,
    STARTUP_TIMEOUT_S,
    WARM_STARTUP_S,
    Config,
    Facts,
    grammar_backend_used,
    suite_env,
)


class Env(suite_env.SuiteEnv[Config, Facts]):
    """The session's configuration, deadline, facts file and progress log (suite_env.SuiteEnv: nothing added)."""


@dataclass
class Handle:
    name: str
    url: str
    log: Path
    info: dict[str, Any]  # /server_info right after /health
    client: Any  # openai.OpenAI
    model: str  # the served model name (/v1/models)
    max_model_len: int | None


@pytest.fixture(scope="session")
def env() -> Env:
    cfg = Config.from_env()
    suite_env.require_lab(cfg, ("sglang", "openai", "transformers"))
    cfg.out.mkdir(parents=True, exist_ok=True)
    progress = cfg.progress()
    progress(f"user-path GPU tests: target {cfg.target}, draft {cfg.draft}, out {cfg.out}, deadline "
             f"{cfg.deadline_s:.0f} s")
    return Env(cfg, cfg.deadline(), Facts(cfg.out / "facts.json", cfg), progress)


@pytest.fixture(scope="session", autouse=True)
def _signals_unwind():
    from sglang_blackwell.procs import signals_as_interrupt

    with signals_as_interrupt():
        yield


@pytest.fixture(scope="session")
def truth(env: Env):
    from lab_truth import GroundTruth

    t = GroundTruth(env.cfg.target)
    env.facts.data["ground_truth"] = {"preset": t.preset, "seed": t.seed}
    return t


SERVER_KEYS = ("version", "tp_size", "grammar_backend", "disable_radix_cache", "speculative_algorithm",
               "speculative_num_steps", "speculative_num_draft_tokens", "attention_backend", "skip_tokenizer_init",
               "cuda_graph_max_bs_decode", "context_length")


def _launch(env: Env, name: str, speculative: bool) -> Iterator[Handle]:
    import openai

    from sglang_blackwell.bench.eagle3 import sglang_api
    from sglang_blackwell.bench.eagle3.server import Server, ServerError, free_port, launched_server

    rec = env.facts.server(name)
    left = env.deadline.left()
    need = WARM_STARTUP_S + RESERVE_S[name]
    if left < need:
        rec["skipped"] = f"deadline: {left:.0f} s left of SGLB_DEADLINE_S={env.cfg.deadline_s:.0f}, the {name} " \
                         f"server needs about {need:.0f} s"
        env.facts.save()
        pytest.skip(rec["skipped"])
    port = free_port()
    log = env.cfg.out / "logs" / f"server_{name}.log"
    cmd = env.cfg.serve_command(port, speculative)
    rec.update(cmd=cmd, log=str(log))
    timeout = min(STARTUP_TIMEOUT_S, left - RESERVE_S[name])
    env.progress(f"{name}: launching through `sglang-blackwell serve`, /health wait <= {timeout:.0f} s, log {log}")
    server = Server(url=f"http://127.0.0.1:{port}", log_path=log)
    try:
        with launched_server(server, cmd, env.cfg.child_env(), startup_timeout_s=timeout, grace_s=20.0,
                             gpu_release_s=30.0, progress=env.progress):
            rec["startup_s"] = round(server.startup_s or 0.0, 1)
            info = sglang_api.server_info(server.url)
            rec["server"] = {k: info.get(k) for k in SERVER_KEYS}
            rec["grammar_backend"] = grammar_backend_used(info)
            env.facts.save()
            env.progress(f"{name}: healthy after {rec['startup_s']} s; grammar backend {rec['grammar_backend']}")
            client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=120.0)
            card = client.models.list().data[0]
            yield Handle(name, server.url, log, info, client, card.id, getattr(card, "max_model_len", None))
            try:
                rec["accept_len"] = sglang_api.avg_accept_length(sglang_api.server_info(server.url))
            except OSError as e:
                rec["accept_len_error"] = str(e)
            env.progress(f"{name}: tests done; taking the server down")
    except ServerError as e:
        rec["launch_error"] = str(e)[:2000]
        env.facts.save()
        raise
    finally:
        rec["teardown"] = server.teardown or None
        env.facts.save()


@pytest.fixture(scope="module")
def openai_server(env: Env) -> Iterator[Handle]:
    yield from _launch(env, "openai", speculative=False)


@pytest.fixture(scope="module")
def eagle3_server(env: Env) -> Iterator[Handle]:
    yield from _launch(env, "eagle3", speculative=True)
