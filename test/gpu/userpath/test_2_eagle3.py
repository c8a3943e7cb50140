"""The same user's server with the EAGLE-3 draft (num-steps 2, 3 draft tokens): greedy text through the `openai`
client, completions and chat, streamed and not, equals the ground truth, drafts get accepted, and the log has no
traceback. (The lab draft is exact: every drafted token is right, so an accept length near 3 is expected.)"""

from __future__ import annotations

import pytest
from userpath_env import CHATS, NEW_TOKENS, PROMPTS, TRACEBACK_MARKERS

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


def test_drafts_are_accepted(eagle3_server, env):
    from sglang_blackwell.bench.eagle3 import sglang_api

    accept = sglang_api.avg_accept_length(sglang_api.server_info(eagle3_server.url))
    env.facts.server("eagle3")["accept_len_after_tests"] = accept
    env.facts.save()
    if accept is None:
        pytest.skip("the server has not rolled up an accept length yet (every --decode-log-interval steps)")
    assert accept >= 1.5, f"accept length {accept}: the draft's tokens are not being accepted"


def test_server_log_has_no_traceback(eagle3_server):
    log = eagle3_server.log.read_text(errors="replace")
    found = [m for m in TRACEBACK_MARKERS if m in log]
    assert not found, f"{eagle3_server.log}: {found}"
