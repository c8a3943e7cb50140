#!/usr/bin/env python3
"""How much attention the last draft-extend positions of a long prompt keep on themselves, for generated drafts
(eagle3_reference.self_attention_weight: the construction needs ~1; a prompt of random ids repeats every token of
S about context / |S| times, which the attention must not take for the position itself). Prints one JSON line per
draft; exit 1 if any is below --min.

    python3 benchmark/models/check_draft_attention.py --pair /tmp/lab61 --drafts draft draft-mla-miss \\
        --context 131072 --device cuda
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import eagle3_reference as R  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pair", required=True, help="the generated pair's directory (target/ and the drafts)")
    ap.add_argument("--drafts", nargs="+", default=["draft"])
    ap.add_argument("--context", type=int, default=131072)
    ap.add_argument("--last", type=int, default=32)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--min", type=float, default=0.99)
    a = ap.parse_args(argv)
    from safetensors import safe_open
    from safetensors.torch import load_file

    with safe_open(os.path.join(a.pair, "target", "model.safetensors"), "pt") as f:
        embed = f.get_tensor("model.embed_tokens.weight")
    ids = torch.randint(0, embed.shape[0], (a.context,), generator=torch.Generator().manual_seed(a.seed))
    worst = 1.0
    for name in a.drafts:
        t0 = time.time()
        d = os.path.join(a.pair, name)
        cfg = json.load(open(os.path.join(d, "config.json")))
        cls = R.Eagle3MLADraft if cfg["architectures"] == ["Eagle3DeepseekV2ForCausalLM"] else R.Eagle3Draft
        draft = cls(load_file(os.path.join(d, "model.safetensors")), cfg, embed, device=a.device)
        w = R.self_attention_weight(draft, ids, last=a.last).float().cpu()
        worst = min(worst, float(w.min()))
        print(json.dumps({"draft": name, "architecture": cfg["architectures"][0], "context": a.context,
                          "last": a.last, "min_self_weight": round(float(w.min()), 6),
                          "mean_self_weight": round(float(w.mean()), 6), "seconds": round(time.time() - t0, 1)}),
              flush=True)
    return 0 if worst >= a.min else 1


if __name__ == "__main__":
    sys.exit(main())
