"""Configuration of the user-path GPU tests (from the environment), the flags of their two server launches, the
requests they send, the suite's deadline, its facts file and its progress log. Imports nothing heavy: CPU CI
collects this directory too (and deselects it: marker `gpu`).

    SGLB_LAB_TARGET   target model dir with its tokenizer (default /tmp/lab/target; gen_lab_pair.py writes it)
    SGLB_LAB_DRAFT    EAGLE-3 draft dir (default /tmp/lab/draft)
    SGLB_LAB_DRAFT_KIND  which draft that is: constructed (the default, exact) or miss (../lab_accept.py)
    SGLB_OUT          artifacts: facts.json, progress.log, server logs (default /tmp/sglb-userpath)
    SGLB_DEADLINE_S   seconds from collection for the whole suite (default 480): a launch that does not fit is
                      skipped, with the reason
    SGLB_PYTHON       interpreter for `sglang-blackwell serve` (default: this one)
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# the GPU suites' shared modules (../suite_env.py, ../lab_accept.py), importable wherever this one is imported from
_GPU_TESTS = str(Path(__file__).resolve().parents[1])
if _GPU_TESTS not in sys.path:
    sys.path.append(_GPU_TESTS)
import suite_env  # noqa: E402

FACTS_SCHEMA = "sglang-blackwell/userpath-facts/1"

# the launch flags of a user's TP=1 server, with and without the EAGLE-3 draft (suite_env: the hostile suite uses
# them too)
USER_FLAGS, EAGLE3_FLAGS = suite_env.USER_FLAGS, suite_env.EAGLE3_FLAGS
NUM_STEPS = int(EAGLE3_FLAGS[EAGLE3_FLAGS.index("--speculative-num-steps") + 1])  # the accept length's expectation
STARTUP_TIMEOUT_S = 300  # ~60-110 s on the lab (the first start of a machine compiles Triton kernels)
WARM_STARTUP_S = 90
RESERVE_S = {"openai": 100, "eagle3": 60}  # requests + teardown after /health, per launch
REQUEST_TIMEOUT_S = 120.0

NEW_TOKENS = 24
PROMPTS = ["The capital of France is", '{"color": "', "zq", "Hello, world! " * 12]
CHATS = [[{"role": "user", "content": "Say hi."}],
         [{"role": "system", "content": "Be brief."}, {"role": "user", "content": 'Reply with {"ok": true}.'}]]
# Every value is an enum or a boolean: under the grammar the greedy bigram model must pick one of finitely many
# completions, and whitespace-only tokens score below everything (gen_lab_pair.WHITESPACE_LOGIT_PENALTY), so
# the answer ends within JSON_MAX_TOKENS (on CPU through sglang's xgrammar backend: 29 tokens for the lab pair, 33
# for tiny; benchmark/models/README.md "Whitespace never wins").
JSON_SCHEMA = {"type": "object", "additionalProperties": False, "required": ["ok", "color", "size"],
               "properties": {"ok": {"type": "boolean"}, "color": {"enum": ["red", "green", "blue"]},
                              "size": {"enum": ["S", "M", "L"]}}}
JSON_MAX_TOKENS = 96
TRACEBACK_MARKERS = ("Traceback (most recent call last)", "Grammar backend disabled",
                     "OpenAI Responses API (/v1/responses) disabled")


def schema_matches(value: Any, schema: dict[str, Any]) -> bool:
    """The subset of JSON Schema that JSON_SCHEMA uses: object, required, additionalProperties false, boolean, enum
    (the bundle carries jsonschema, CPU test machines need not)."""
    if "enum" in schema:
        return value in schema["enum"]
    if schema["type"] == "boolean":
        return isinstance(value, bool)
    props = schema["properties"]
    return (isinstance(value, dict) and set(schema["required"]) <= set(value) <= set(props)
            and all(schema_matches(v, props[k]) for k, v in value.items()))


def grammar_backend_used(info: dict[str, Any]) -> str | None:
    """The grammar backend the scheduler uses, from /server_info: its own server args (internal_states; sglang
    sets grammar_backend to "none" there when the backend cannot be built), else the HTTP process's."""
    states = info.get("internal_states") or [{}]
    state = states[0] if isinstance(states, list) and states and isinstance(states[0], dict) else {}
    return state.get("grammar_backend", info.get("grammar_backend"))


@dataclass(frozen=True)
class Config(suite_env.SuiteConfig):
    DEFAULT_OUT = "/tmp/sglb-userpath"

    @classmethod
    def from_env(cls) -> Config:
        return cls(**cls.common_from_env(suite_env.deadline_from_env()))

    def sglang_args(self, port: int, speculative: bool) -> list[str]:
        args = ["--model-path", str(self.target), "--host", "127.0.0.1", "--port", str(port), *USER_FLAGS]
        if speculative:
            args += [*EAGLE3_FLAGS, "--speculative-draft-model-path", str(self.draft)]
        return args

    def serve_command(self, port: int, speculative: bool) -> list[str]:
        """As the README tells users: `sglang-blackwell serve -- <sglang args>` (TP=1: no --tp)."""
        return [self.python, "-m", "sglang_blackwell.cli", "serve", "--", *self.sglang_args(port, speculative)]


class Facts(suite_env.FactsFile):
    """The user-path suite's facts (suite_env.FactsFile): its config and one section per server. The receipt
    (sglang_blackwell.qualify.userpath_receipt) is built from it and the JUnit XML."""

    def __init__(self, path: Path, config: Config):
        super().__init__(path, FACTS_SCHEMA, {"target": str(config.target), "draft": str(config.draft),
                                              "draft_kind": config.draft_kind, "deadline_s": config.deadline_s},
                         servers={})

    def server(self, name: str) -> dict[str, Any]:
        return self.data["servers"].setdefault(name, {})
