"""The same user's server with the EAGLE-3 draft (num-steps 2, 3 draft tokens): greedy text through the `openai`
client, completions and chat, streamed and not, equals the ground truth, the accept length is the one the pair's
construction gives (lab_accept: 3.0 for the exact draft, which gen_lab_pair.py writes by default), and the log has
no traceback."""

from __future__ import annotations

import pytest
from userpath_env import CHATS, NEW_TOKENS, NUM_STEPS, PROMPTS, TRACEBACK_MARKERS

pytestmark = pytest.mark.gpu
LONG = 64  # tokens: enough verify rounds for the server's accept-length statistic


def test_the_server_speculates(eagle3_server):
    info = eagle3_server.info
    assert info["speculative_algorithm"] == "EAGLE3" and info["speculative_num_draft_tokens"] == 3
    assert info["tp_size"] == 1 and info["disable_radix_cache"] is False


@pytest.mark.parametrize("prompt", PROMPTS)
def test_completion_is_the_ground_truth(eagle3_server, truth, prompt):
    srv = eagle3_server
    want = truth.text(truth.continuation(truth.prompt_ids(prompt), LONG))
    r = srv.client.completions.create(model=srv.model, prompt=prompt, max_tokens=LONG, temperature=0)
    assert r.choices[0].text == want and r.usage.completion_tokens == LONG
    chunks = srv.client.completions.create(model=srv.model, prompt=prompt, max_tokens=LONG, temperature=0,
                                           stream=True)
    assert "".join(c.choices[0].text for c in chunks if c.choices) == want


@pytest.mark.parametrize("messages", CHATS, ids=["user", "system+user"])
def test_chat_is_the_ground_truth(eagle3_server, truth, messages):
    srv = eagle3_server
    want = truth.text(truth.continuation(truth.chat_ids(messages), NEW_TOKENS))
    r = srv.client.chat.completions.create(model=srv.model, messages=messages, max_tokens=NEW_TOKENS,
                                           temperature=0)
    assert r.choices[0].message.content == want
    chunks = srv.client.chat.completions.create(model=srv.model, messages=messages, max_tokens=NEW_TOKENS,
                                                temperature=0, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == want


def test_accept_length_is_the_constructions(eagle3_server, truth, env):
    """After a reset of the server's spec counters, PROMPTS one at a time (LONG tokens each): the accept length
    SGLang reports is what the construction gives for exactly these requests, within the tolerance derived from it
    (lab_accept; a draft that fails at position 2 gives 2.0, not 3.0)."""
    import lab_accept

    from sglang_blackwell.bench.eagle3 import sglang_api

    srv = eagle3_server
    assert sglang_api.reset_spec_stats(srv.url), f"{srv.url}/set_internal_state did not reset the spec counters"
    for prompt in PROMPTS:
        srv.client.completions.create(model=srv.model, prompt=prompt, max_tokens=LONG, temperature=0)
    accept = sglang_api.avg_accept_length(sglang_api.server_info(srv.url))
    expected = lab_accept.expectation(env.cfg.target, env.cfg.draft_kind,
                                      [(truth.prompt_ids(p)[-1], LONG) for p in PROMPTS], NUM_STEPS)
    result = lab_accept.check(expected, "server", accept)
    env.facts.server("eagle3").update(accept_len_after_tests=accept, accept_check=result)
    env.facts.save()
    assert result["passed"], result


def test_server_log_has_no_traceback(eagle3_server):
    log = eagle3_server.log.read_text(errors="replace")
    found = [m for m in TRACEBACK_MARKERS if m in log]
    assert not found, f"{eagle3_server.log}: {found}"
