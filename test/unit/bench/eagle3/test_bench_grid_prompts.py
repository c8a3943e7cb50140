"""The grid's prompts (bench/eagle3/prompts.py): exactly the context's length, the same for the same (seed, context,
index) on any machine, fresh for every request of a run; drawn from the ids the target's tokenizer files allow
(the real lab tokenizer's, made by benchmark/models/lab_tokenizer.py), or token_range."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from bench_fakes import write_grid_config

from sglang_blackwell.bench.eagle3 import prompts
from sglang_blackwell.bench.eagle3.config import load_config
from sglang_blackwell.bench.eagle3.config_section import ConfigError

MODELS = Path(__file__).resolve().parents[4] / "benchmark" / "models"


def _lab_tokenizer():
    if "lab_tokenizer" not in sys.modules:
        spec = importlib.util.spec_from_file_location("lab_tokenizer", MODELS / "lab_tokenizer.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules["lab_tokenizer"] = mod
        spec.loader.exec_module(mod)
    return sys.modules["lab_tokenizer"]


def test_exact_length_and_deterministic() -> None:
    ids = range(100, 4096)
    for n in (1, 7, 256, 8192):
        p = prompts.grid_prompt(n, 3, 0, ids)
        assert p.text is None and len(p.input_ids) == n and all(100 <= i < 4096 for i in p.input_ids)
        assert prompts.grid_prompt(n, 3, 0, ids) == p  # the same (seed, context, index): the same prompt
    a, b, c = (prompts.grid_prompt(64, 0, 0, ids), prompts.grid_prompt(64, 1, 0, ids),
               prompts.grid_prompt(64, 0, 1, ids))
    assert len({a.input_ids, b.input_ids, c.input_ids}) == 3  # index and seed both change it
    # the documented algorithm, spelled out: random.Random(f"{seed}:{context}:{index}").choices(ids, k=context)
    import random

    assert a.input_ids == tuple(random.Random("0:64:0").choices(list(ids), k=64))
    # pinned: the same ids on every platform and Python release (seeding a Random with a str is SHA-512 based)
    assert prompts.grid_prompt(8, 0, 0, ids).input_ids == PINNED


PINNED = (886, 610, 251, 283, 4046, 1369, 2736, 2002)  # grid_prompt(8, 0, 0, range(100, 4096)), Python 3.11


def test_pinned_values_do_not_depend_on_the_hash_seed() -> None:
    import subprocess

    code = ("import random; print(list(random.Random('0:8:0').choices(range(100, 4096), k=8)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": "12345"}).stdout
    assert tuple(json.loads(out)) == PINNED


def test_prompt_source_never_reuses_an_index() -> None:
    src = prompts.PromptSource(range(100, 200), seed=5)
    first = src.take(256, 4)
    warm = src.take(256, 8)
    other = src.take(2048, 1)
    assert len({p.input_ids for p in first + warm}) == 12
    assert warm[0] == prompts.grid_prompt(256, 4, 5, range(100, 200))  # indices continue per context
    assert other[0] == prompts.grid_prompt(2048, 0, 5, range(100, 200))
    facts = src.facts()
    assert facts["used"] == {"256": 12, "2048": 1} and facts["ids"] == 100 and facts["seed"] == 5
    assert facts["ids_sha256"] == prompts.ids_digest(list(range(100, 200)))


def test_ids_from_the_real_lab_tokenizer_json() -> None:
    lt = _lab_tokenizer()
    tok = json.loads(lt.tokenizer_files(4096, 100, 2048)["tokenizer.json"])  # the kimi61 preset's tokenizer
    ids = prompts.ids_from_tokenizer_json(tok)
    assert ids == list(range(100, 4096))  # [0, 100): the specials and reserved ids, all special: true
    assert all(a["special"] for a in tok["added_tokens"]) and len(tok["added_tokens"]) == 100
    # a non-special added token stays allowed; a special one outside [0, 100) is removed
    tok["added_tokens"] = [{"id": 5, "special": False}, {"id": 4000, "special": True}]
    ids = prompts.ids_from_tokenizer_json(tok)
    assert 5 in ids and 4000 not in ids and len(ids) == 4095


def test_ids_from_files_falls_back_to_vocab_size(tmp_path: Path) -> None:
    assert prompts.ids_from_files(tmp_path) is None
    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": 10}))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"added_tokens_decoder": {"0": {}, "9": {}}}))
    assert prompts.ids_from_files(tmp_path) == list(range(1, 9))
    (tmp_path / "tokenizer.json").write_text("not json")  # unreadable: the fallback still answers
    assert prompts.ids_from_files(tmp_path) == list(range(1, 9))
    lt = _lab_tokenizer()
    for name, text in lt.tokenizer_files(1024, 100, 256).items():
        (tmp_path / name).write_text(text)
    assert prompts.ids_from_files(tmp_path) == list(range(100, 1024))


def test_allowed_ids_token_range_tokenizer_path_or_config_error(tmp_path: Path) -> None:
    cfg = load_config(write_grid_config(tmp_path))
    assert prompts.allowed_ids(cfg) == range(100, 2148)
    cfg = load_config(write_grid_config(tmp_path, token_range=None))
    assert prompts.allowed_ids(cfg) == list(range(100, 2148))  # bench_fakes' tokenizer.json
    tok_dir = tmp_path / "tok"
    tok_dir.mkdir()
    (tok_dir / "config.json").write_text(json.dumps({"vocab_size": 50}))
    p = cfg.path
    p.write_text(p.read_text().replace('tokenizer = "target"', f'tokenizer = "{tok_dir}"'))
    assert prompts.allowed_ids(load_config(p)) == list(range(50))  # [model] tokenizer's files win
    p.write_text(p.read_text().replace(f'tokenizer = "{tok_dir}"', 'tokenizer = "target"')
                 .replace(str(tmp_path / "models" / "target"), "moonshotai/Kimi-K2.5"))
    with pytest.raises(ConfigError) as e:
        prompts.allowed_ids(load_config(p))
    assert str(e.value).startswith(f"{p}: [workload] token_range: not set") and "moonshotai/Kimi-K2.5" in str(e.value)
