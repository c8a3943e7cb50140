"""The ground truth of the generated lab target, computed without the server (the user-path and hostile GPU suites
check answers against it): its tokenizer (transformers, from the model directory, as the server loads it) and its
bigram map B (benchmark/models/gen_lab_pair.py, from the preset and seed the generator wrote into lab_pair.json).
Greedy decoding of a prompt continues with B(last prompt token), B(B(...)), ...; the text is what the tokenizer
decodes those ids to."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
GENERATOR = REPO / "benchmark" / "models" / "gen_lab_pair.py"


def _generator():
    spec = importlib.util.spec_from_file_location("gen_lab_pair", GENERATOR)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gen_lab_pair"] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


class GroundTruth:
    def __init__(self, target: Path):
        from transformers import AutoTokenizer

        gen = _generator()
        meta = json.loads((target / gen.PAIR_FILE).read_text())
        self.preset, self.seed = meta["preset"], meta["seed"]
        self.bmap = gen.bigram_map(self.preset, self.seed)
        self.tok = AutoTokenizer.from_pretrained(str(target))

    def prompt_ids(self, text: str) -> list[int]:
        return list(self.tok.encode(text))

    def chat_ids(self, messages: list[dict[str, Any]]) -> list[int]:
        return list(self.tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                 return_dict=False))

    def continuation(self, ids: list[int], n: int) -> list[int]:
        out, t = [], ids[-1]
        for _ in range(n):
            t = self.bmap[t]
            out.append(t)
        return out

    def text(self, ids: list[int]) -> str:
        return self.tok.decode(ids)

    def pieces(self, ids: list[int]) -> list[str]:
        return [self.tok.decode([i]) for i in ids]
