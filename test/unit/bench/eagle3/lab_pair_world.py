"""What the lab-pair tests share (benchmark/models, `tiny` preset, on CPU): the generator and the reference draft
math loaded from their files, the bigram map and its chains, and the tiny target in transformers with the hooks
that record what sglang captures for EAGLE-3."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

MODELS = Path(__file__).resolve().parents[4] / "benchmark" / "models"


def load_model_script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, MODELS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


G = load_model_script("gen_lab_pair")
R = load_model_script("eagle3_reference")
T = load_model_script("lab_tokenizer")
P = G.PRESETS["tiny"]
CAPS = G.capture_layers(P.layers)


def bigram() -> torch.Tensor:
    m = G.bigram_map("tiny", 0)
    return torch.tensor([m[v] for v in range(P.vocab)])


def chain(start: torch.Tensor, n: int) -> torch.Tensor:
    b, seq = bigram(), [start]
    for _ in range(n - 1):
        seq.append(b[seq[-1]])
    return torch.stack(seq, 1)


def load_target(out: Path) -> tuple[Any, Any, dict[str, dict]]:
    """The tiny target in transformers (bf16, as served) with hooks that record what sglang captures for
    EAGLE-3 (the residual stream entering each capture layer) and the shared-expert inputs before them."""
    import transformers

    model, info = transformers.AutoModelForCausalLM.from_pretrained(
        out / "target", dtype=torch.bfloat16, output_loading_info=True)
    model.eval()
    rec: dict[str, dict] = {"cap": {}, "shared_in": {}, "shared_act": {}}

    def layer_input(i):
        def hook(mod, args, kw):
            rec["cap"][i] = kw["hidden_states"] if "hidden_states" in kw else args[0]
        return hook

    for i in CAPS:
        model.model.layers[i].register_forward_pre_hook(layer_input(i), with_kwargs=True)
        model.model.layers[i - 1].mlp.shared_experts.register_forward_hook(
            lambda mod, args, o, i=i: rec["shared_in"].__setitem__(i, args[0]))
    for j, layer in enumerate(model.model.layers):  # what each shared expert's down_proj multiplies (bf16)
        se = getattr(layer.mlp, "shared_experts", None)
        if se is not None:
            se.down_proj.register_forward_hook(lambda mod, args, o, j=j: rec["shared_act"].__setitem__(j, args[0]))
    return model, info, rec


def run_target(target, ids: torch.Tensor):
    """(logits, the aux states sglang would capture, the captures per layer, the shared-expert inputs)."""
    model, _, rec = target
    with torch.no_grad():
        logits = model(ids).logits.float()
    aux = torch.cat([rec["cap"][i] for i in CAPS], dim=-1)
    return logits, aux, dict(rec["cap"]), dict(rec["shared_in"])


def load_draft(out: Path, name: str, target):
    """The reference of the draft in out/name (GQA or MLA, by its config's architecture) on the target's
    embedding."""
    from safetensors.torch import load_file

    cfg = json.loads((out / name / "config.json").read_text())
    embed = target[0].model.embed_tokens.weight.detach()
    cls = R.Eagle3MLADraft if cfg["architectures"] == ["Eagle3DeepseekV2ForCausalLM"] else R.Eagle3Draft
    return cls(load_file(out / name / "model.safetensors"), cfg, embed)
