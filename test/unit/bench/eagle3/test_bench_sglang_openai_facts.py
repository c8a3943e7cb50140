"""What the OpenAI-API client assumes about SGLang, read from the pinned releases themselves (the wheels
`sglang-blackwell fetch` caches; files parsed, nothing imported): the request fields it sends, the usage chunk it
needs, the role-only first chat chunk it skips, reasoning_content it counts, and the endpoints --attach uses."""

from __future__ import annotations

import ast
import re
import zipfile

import pytest

from sglang_blackwell.bench.eagle3 import client
from sglang_blackwell.bench.eagle3.config_workload import Prompt
from sglang_blackwell.patchset.bases import get_base
from sglang_blackwell.patchset.fetch import fetch

pytestmark = pytest.mark.slow  # fetches the wheels when they are not cached
OPENAI = "sglang/srt/entrypoints/openai/"


def sources(base_name: str) -> dict[str, str]:
    pkg = get_base(base_name).package("sglang")
    wheel = fetch((pkg.files_for("3.11") or pkg.files_for(None))[0])
    names = {"protocol": OPENAI + "protocol.py", "chat": OPENAI + "serving_chat.py",
             "completions": OPENAI + "serving_completions.py", "http": "sglang/srt/entrypoints/http_server.py"}
    with zipfile.ZipFile(wheel) as z:
        return {k: z.read(v).decode() for k, v in names.items()}


def fields(tree: ast.Module, cls: str) -> set[str]:
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls)
    return {st.target.id for st in node.body if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)}


@pytest.mark.parametrize("base", ["0.5.9", "0.5.14", "0.5.23"])
def test_sglang_openai_api_matches_the_client(base: str) -> None:
    src = sources(base)
    proto = ast.parse(src["protocol"])
    ep = client.Endpoint(url="http://h", api="completions", model="m")
    sent_completion = set(client.openai_payload(ep, Prompt(text="x"), 8))
    chat = client.Endpoint(url="http://h", api="chat", model="m")
    sent_chat = set(client.openai_payload(chat, Prompt(text="x"), 8))
    for sent, cls in ((sent_completion, "CompletionRequest"), (sent_chat, "ChatCompletionRequest")):
        assert sent <= fields(proto, cls), (cls, sent - fields(proto, cls))
    assert {"include_usage"} <= fields(proto, "StreamOptions")
    assert {"completion_tokens"} <= fields(proto, "UsageInfo")
    assert {"usage", "choices"} <= fields(proto, "CompletionStreamResponse")
    assert {"usage", "choices"} <= fields(proto, "ChatCompletionStreamResponse")
    assert {"content", "reasoning_content"} <= fields(proto, "DeltaMessage")
    # the final usage chunk is sent only on request, and a chat stream opens with a role-only chunk
    for k in ("completions", "chat"):  # 0.5.9: the field itself; 0.5.14+: should_include_usage(stream_options, ...)
        assert re.search(r"request\.stream_options\.include_usage|should_include_usage\(\s*request\.stream_options",
                         src[k]), k
    assert re.search(r'role="assistant",\s*content=""', src["chat"])  # 0.5.9 DeltaMessage(...), 0.5.14+ a helper
    routes = set(re.findall(r'@app\.(?:get|post|api_route)\("([^"]+)"', src["http"]))
    assert {"/health", "/v1/models", "/v1/completions", "/v1/chat/completions", "/server_info",
            "/get_server_info", "/flush_cache", "/set_internal_state", "/start_profile"} <= routes


PROFILER = {"0.5.9": "sglang/srt/managers/scheduler_profiler_mixin.py",
            "0.5.14": "sglang/srt/managers/scheduler_components/profiler_manager.py",
            "0.5.23": "sglang/srt/managers/scheduler_components/profiler_manager.py"}


@pytest.mark.parametrize("base", ["0.5.9", "0.5.14", "0.5.23"])
def test_sglang_profiles_by_stage_as_the_profile_window_reads_it(base: str) -> None:
    """profiling.profile_window asks /start_profile for profile_by_stage and reads the decode batches' trace by
    its name: the request takes the field, and the scheduler traces the first num_steps prefill batches and
    then, in a file of their own, the first num_steps decode batches, the stage's ForwardMode name after the
    ranks (<prefix>-<id>-TP-<r>[-DP-..]-DECODE.trace.json.gz), which profiling._stage_of and _rank_of parse."""
    from sglang_blackwell.bench.eagle3 import profiling

    pkg = get_base(base).package("sglang")
    with zipfile.ZipFile(fetch((pkg.files_for("3.11") or pkg.files_for(None))[0])) as z:
        io, prof = z.read("sglang/srt/managers/io_struct.py").decode(), z.read(PROFILER[base]).decode()
    req = "ProfileReq" if base == "0.5.23" else "ProfileReqInput"  # 0.5.23: the HTTP body is ProfileReq itself
    assert {"num_steps", "profile_by_stage", "profile_prefix", "output_dir"} <= fields(ast.parse(io), req)
    assert re.search(r"self\.profiler_target_prefill_ct = num_steps\s+self\.profiler_target_decode_ct = num_steps",
                     prof)
    for stage in ("EXTEND", "DECODE"):  # 0.5.9: self.stop_profile(...), later self._stop_profile(...)
        assert re.search(rf"self\._?stop_profile\(stage=ForwardMode\.{stage}\)", prof), stage
    assert 'stage_suffix = f"-{stage.name}" if stage else ""' in prof
    assert re.search(r'stage_prefix\s*\+\s*"-"\.join\(filename_parts\)\s*\+\s*stage_suffix\s*\+\s*"\.trace\.json\.gz"',
                     prof)
    assert re.search(r'filename_parts = \[self\.profile_id, f"TP-\{[^}]*tp_rank\}"\]', prof)
    assert (profiling.DECODE, profiling.PREFILL) == ("DECODE", "EXTEND")
    name = "bench-1764460800.1-TP-3-DP-0-DECODE.trace.json.gz"
    assert (profiling._rank_of(name), profiling._stage_of(name)) == (3, "DECODE")
