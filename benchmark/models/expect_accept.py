#!/usr/bin/env python3
"""The accept length a `bench eagle3` config must measure on a generated lab pair, computed before the run from
the construction: the config's prompts tokenized by the pair's tokenizer, each request's greedy chain (B from
its last prompt token), SGLang's EAGLE-3 rounds on it (gen_lab_pair.simulate_rounds: drafts from the draft's map
D, verification against B), with the harness's own choice of prompts per concurrency level (bench/eagle3
client.run_level: request k of a level takes prompt (offset + k) mod n, offset = requests of earlier levels).

    python3 benchmark/models/expect_accept.py benchmark/lab-kimi61.toml --draft miss [--preset kimi61] [--seed 0]

prints JSON: per level (and over all levels) the accept length as SGLang's server reports it (accepted drafts +
1 per verify round, decode rounds only: avg_spec_accept_length), the per-request spread, its range when the last
0-39 rounds are left out (SGLang folds the statistic in every 40 decode iterations; meaningful at c=1, where the
requests run one after the other), and the meta_info form (completion tokens / verify rounds, the prefill's token
included). Needs torch and `tokenizers` (CPU).

A grid config (`[workload] contexts`) gets the same per (context, concurrency) cell, with the prompts the harness
sends (sglang_blackwell.bench.eagle3.prompts: grid_prompt over the pair tokenizer's special-free ids, or
token_range), in its order: per context an index from 0, per concurrency (ascending) the first burst (c requests)
then the warm window (c x rounds); "cells" gives each window's figures ("warm" is what the verdict checks),
"all_warm" every cell's warm window together, "all_requests" everything.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_lab_pair as G  # noqa: E402
import lab_tokenizer  # noqa: E402

sys.path.pop(0)
try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

BENCHMARK = Path(__file__).resolve().parents[1]


def num_steps(args: list[str]) -> int:
    for i, a in enumerate(args):
        if a == "--speculative-num-steps":
            return int(args[i + 1])
    raise SystemExit("[speculative] args: no --speculative-num-steps")


def prompt_ids(prompts: Path, preset: G.Preset) -> list[list[int]]:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(lab_tokenizer.tokenizer_files(preset.vocab, preset.s_start, preset.s_size)
                             ["tokenizer.json"])
    out = []
    for line in prompts.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            out.append(list(row["input_ids"]) if "input_ids" in row else tok.encode(row["text"]).ids)
    return out


def _prompts_module():
    """sglang_blackwell.bench.eagle3.prompts (the installed package, else this checkout's python/)."""
    try:
        from sglang_blackwell.bench.eagle3 import prompts
    except ImportError:
        sys.path.insert(0, str(BENCHMARK.parent / "python"))
        from sglang_blackwell.bench.eagle3 import prompts
    return prompts


def grid_ids(w: dict, preset: G.Preset) -> list[int] | range:
    """The ids the harness draws grid prompts from: token_range, else the pair tokenizer's (no special tokens)."""
    if "token_range" in w:
        return range(*w["token_range"])
    tok = json.loads(lab_tokenizer.tokenizer_files(preset.vocab, preset.s_start, preset.s_size)["tokenizer.json"])
    return _prompts_module().ids_from_tokenizer_json(tok)


def grid_expectation(cfg: dict, st: G.Structure, dmap, steps: int) -> dict:
    """Per cell, in the harness's order (module docstring): the first burst's and the warm window's figures."""
    prompts = _prompts_module()
    w = cfg["workload"]
    ids, seed = grid_ids(w, st.preset), w.get("prompt_seed", 0)
    cells, warm_all, everything = {}, [], []
    for ctx in sorted(w["contexts"]):
        index = 0
        for c in sorted(w["concurrency"]):
            windows = {}
            for name, n in (("first", c), ("warm", c * w.get("rounds", 2))):
                reqs = [G.simulate_rounds(st, dmap, prompts.grid_prompt(ctx, index + k, seed, ids).input_ids[-1],
                                          w["output_len"], steps) for k in range(n)]
                index += n
                everything += reqs
                windows[name] = _summary(reqs, steps)
                if name == "warm":
                    warm_all += reqs
            cells[f"{ctx}x{c}"] = windows
    return {"cells": cells, "all_warm": _summary(warm_all, steps), "all_requests": _summary(everything, steps),
            "prompt_ids": len(ids)}


def expectation(config: Path, draft: str, preset_name: str = "kimi61", seed: int = 0) -> dict:
    cfg = tomllib.loads(config.read_text())
    w = cfg["workload"]
    steps = num_steps(cfg["speculative"]["args"])
    p = G.PRESETS[preset_name]
    st = G.build_structure(p, seed)
    dmap = {"miss": lambda: G.miss_map(st), "constructed": lambda: st.succ}[draft]()
    head = {"config": str(config), "draft": draft, "preset": preset_name, "seed": seed, "num_steps": steps,
            "output_len": w["output_len"]}
    if "contexts" in w:
        return {**head, **grid_expectation(cfg, st, dmap, steps)}
    prompts = prompt_ids(config.parent / w["prompts"], p)
    levels, offset, everything = {}, 0, []
    for c in w["concurrency"]:
        reqs = [G.simulate_rounds(st, dmap, prompts[(offset + k) % len(prompts)][-1], w["output_len"], steps)
                for k in range(c * w["rounds"])]
        offset += c * w["rounds"]
        everything += reqs
        levels[str(c)] = _summary(reqs, steps)
    return {**head, "prompts": len(prompts), "levels": levels, "all_levels": _summary(everything, steps)}


ROLLUP = 40  # SGLang folds its accept statistic into the totals every --decode-log-interval (40) iterations


def _summary(reqs: list[dict], steps: int) -> dict:
    rounds = sum(r["rounds"] for r in reqs)
    per_req = [r["accept_tokens"] / r["rounds"] for r in reqs]
    seq = [a for r in reqs for a in r["accept_per_round"]]  # the requests one after the other (c=1)
    cut = [sum(seq[: len(seq) - k]) / (len(seq) - k) for k in range(min(ROLLUP, len(seq)))]
    return {"requests": len(reqs), "verify_rounds": rounds,
            "accept_len_last_rounds_dropped": [round(min(cut), 4), round(max(cut), 4)],
            "accept_len": round(sum(r["accept_tokens"] for r in reqs) / rounds, 4),
            "accept_len_meta": round(sum(r["completion_tokens"] for r in reqs) / rounds, 4),
            "per_position": [round(sum(r["per_position"][s] for r in reqs) / rounds, 4) for s in range(steps)],
            "per_request_min": round(min(per_req), 4), "per_request_max": round(max(per_req), 4)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("config", type=Path, help="a bench eagle3 config (benchmark/<name>.toml)")
    ap.add_argument("--draft", required=True, choices=["miss", "constructed"], help="the draft the config serves")
    ap.add_argument("--preset", default="kimi61", choices=sorted(G.PRESETS))
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    print(json.dumps(expectation(a.config, a.draft, a.preset, a.seed), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
