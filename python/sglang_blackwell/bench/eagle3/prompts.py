"""The prompts of a grid run (`[workload] contexts`): made, not read, so every (context, concurrency) cell gets
prompts of exactly the context's length that no server has seen before (the radix cache never hits), and anyone
can make the same ones again.

    grid_prompt(context_len, index, seed, ids) = Prompt(input_ids=
        random.Random(f"{seed}:{context_len}:{index}").choices(ids, k=context_len))

`ids` is the sorted list of allowed token ids: `[workload] token_range` [lo, hi) when set, else the target's (or
`[model] tokenizer` path's) vocabulary without its special tokens: from `tokenizer.json`, the model vocabulary's
ids minus every `added_tokens` entry with `special: true`; without one, `config.json` `vocab_size` ids minus the ids
of `tokenizer_config.json` `added_tokens_decoder`. `seed` is `[workload] prompt_seed`; `index` counts the requests
of one arm run per context, from 0, in the order they are sent (PromptSource), so every request of a run has a
prompt of its own and every arm gets the same prompts in the same order. Python's `random.Random` seeded with a
str hashes it (SHA-512, version 2 seeding) and `choices` draws `ids[floor(random() * len(ids))]`: the same on every
platform and Python 3 release.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .config import BenchConfig
from .config_section import ConfigError
from .config_workload import Prompt


def grid_prompt(context_len: int, index: int, seed: int, id_range: Sequence[int]) -> Prompt:
    """Exactly `context_len` token ids drawn uniformly from `id_range` (the allowed ids, sorted)."""
    rng = random.Random(f"{seed}:{context_len}:{index}")
    return Prompt(input_ids=tuple(rng.choices(id_range, k=context_len)))


def ids_from_tokenizer_json(tok: dict[str, Any]) -> list[int]:
    """The model vocabulary's ids of a Hugging Face tokenizer.json (BPE/WordPiece/WordLevel: a {piece: id} map;
    Unigram: a list of [piece, score], the index is the id), minus every added token marked special."""
    vocab = (tok.get("model") or {}).get("vocab")
    if isinstance(vocab, dict):
        ids = {int(i) for i in vocab.values() if isinstance(i, int) and not isinstance(i, bool)}
    elif isinstance(vocab, list):
        ids = set(range(len(vocab)))
    else:
        raise ValueError("tokenizer.json has no model.vocab")
    special = {a.get("id") for a in tok.get("added_tokens") or [] if isinstance(a, dict) and a.get("special")}
    return sorted(ids - special)


def ids_from_vocab_size(config: dict[str, Any], tokenizer_config: dict[str, Any]) -> list[int]:
    """[0, config.json vocab_size) minus the ids tokenizer_config.json's added_tokens_decoder lists."""
    size = config.get("vocab_size")
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise ValueError(f"config.json vocab_size {size!r} is not a positive integer")
    added = {int(k) for k in (tokenizer_config.get("added_tokens_decoder") or {}) if str(k).isdigit()}
    return [i for i in range(size) if i not in added]


def _json(path: Path) -> dict[str, Any] | None:
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return obj if isinstance(obj, dict) else None


def ids_from_files(directory: Path) -> list[int] | None:
    """The allowed ids from a model directory's tokenizer files; None when none of them is readable."""
    tok = _json(directory / "tokenizer.json")
    if tok is not None:
        try:
            return ids_from_tokenizer_json(tok)
        except ValueError:
            pass
    conf = _json(directory / "config.json")
    if conf is None:
        return None
    try:
        return ids_from_vocab_size(conf, _json(directory / "tokenizer_config.json") or {})
    except ValueError:
        return None


def tokenizer_dir(cfg: BenchConfig) -> Path:
    """Where the target's tokenizer files are: [model] tokenizer when it is a path, else the target."""
    t = cfg.model.tokenizer
    return Path(cfg.model.target if t in ("target", "none") else t).expanduser()


def allowed_ids(cfg: BenchConfig) -> Sequence[int]:
    """The ids grid prompts are drawn from (sorted); ConfigError when neither token_range nor a readable tokenizer
    says what they are."""
    tr = cfg.workload.token_range
    if tr is not None:
        return range(tr[0], tr[1])
    where = tokenizer_dir(cfg)
    ids = ids_from_files(where) if where.is_dir() else None
    if not ids:
        raise ConfigError(f"{cfg.path}: [workload] token_range: not set, and {where} holds no readable tokenizer.json "
                          "or config.json (a hub id is not a directory): set workload.token_range = [lo, hi), the "
                          "ids the grid's prompts are drawn from")
    return ids


def ids_digest(ids: Sequence[int]) -> str:
    """sha256 of the allowed ids as a JSON list: two runs with the same digest, seed and contexts sent the same
    prompts."""
    return hashlib.sha256(json.dumps(list(ids)).encode()).hexdigest()


class PromptSource:
    """Fresh prompts for one arm run: per context, index 0, 1, 2, ... in the order the requests are sent."""

    def __init__(self, ids: Sequence[int], seed: int):
        self.ids, self.seed = ids, seed
        self.used: dict[int, int] = {}

    def take(self, context_len: int, n: int) -> list[Prompt]:
        start = self.used.get(context_len, 0)
        self.used[context_len] = start + n
        return [grid_prompt(context_len, start + i, self.seed, self.ids) for i in range(n)]

    def last(self, context_len: int) -> Prompt:
        """The prompt `take` gave last for `context_len` (none taken yet: a ValueError)."""
        n = self.used.get(context_len, 0)
        if not n:
            raise ValueError(f"no prompt of {context_len} tokens taken yet")
        return grid_prompt(context_len, n - 1, self.seed, self.ids)

    def facts(self) -> dict[str, Any]:
        """What the run record says about its prompts."""
        return {"generator": "bench/eagle3/prompts.py grid_prompt", "seed": self.seed, "ids": len(self.ids),
                "ids_min": min(self.ids), "ids_max": max(self.ids), "ids_sha256": ids_digest(self.ids),
                "used": {str(k): v for k, v in sorted(self.used.items())}}
