"""The lab model pair (benchmark/models/gen_lab_pair.py), `tiny` preset, on CPU:
- the target, loaded by transformers (DeepseekV3ForCausalLM), is the bigram map B with large margins;
- the constructed EAGLE-3 draft, run by our reference of sglang's LlamaForCausalLMEagle3 math on the target's
  real aux hidden states, drafts both tokens of a steps=2 chain correctly (accept length 3);
- the random draft does not; a wrongly captured aux state (per-rank partial sums) destroys acceptance;
- the draft that misses by design drafts exactly its map D, so its acceptance per position and per SGLang round is
  the one computed from the construction (gen_lab_pair.miss_blocks / simulate_rounds) before any run;
- generation is deterministic; checkpoint names/config keys are what sglang 0.5.14 / 0.5.9 loaders read;
- the tokenizer (lab_tokenizer.py, loaded by the real transformers / tokenizers): text round-trips exactly, the
  chat template renders, a text prompt's greedy continuation through the transformers model is the bigram chain,
  and whitespace-only tokens never win (the JSON-grammar termination argument).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")
transformers = pytest.importorskip("transformers")

from safetensors.torch import load_file  # noqa: E402

from .lab_pair_world import CAPS, G, P, R, T, load_draft, load_target, run_target  # noqa: E402, F401
from .lab_pair_world import bigram as _bigram  # noqa: E402
from .lab_pair_world import chain as _chain  # noqa: E402

DRAFT_KINDS = "constructed,random,miss,mla,mla-miss"


@pytest.fixture(scope="module")
def tokenizer(pair):
    out, _ = pair
    return transformers.AutoTokenizer.from_pretrained(out / "target")


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    out = tmp_path_factory.mktemp("pair")
    summary = G.generate(str(out), "tiny", 0, "cpu", DRAFT_KINDS)
    return out, summary


@pytest.fixture(scope="module")
def target(pair):
    return load_target(pair[0])


_run = run_target


def _witness_bound(target, layer: int, witness: torch.Tensor) -> torch.Tensor:
    """How far from 0 the witness coordinates entering `layer` may be after the last forward, in bf16.

    Only the mirrored shared experts write the witness rows (every other sublayer's rows there are zero, so it
    adds exact zeros), and their two halves cancel in exact arithmetic. What is left is rounding, bounded per
    shared expert l before `layer` by what the model actually multiplied (its down_proj input a_l, recorded):
      |a_l . w| in float64            the halves' activations need not round alike (different GEMM tiles)
      + gamma_K * (|a_l| . |w|)       fp32 accumulation over K = the shared expert's intermediate size,
                                      gamma_K = K u / (1 - K u), u = 2^-24 (Higham, Accuracy and Stability, 3.1)
    times (1 + 2^-8)^2 per layer: the bf16 rounding of the expert's output and of the residual add."""
    model, _, rec = target
    total = None
    for j in range(layer):
        if j not in rec["shared_act"]:
            continue  # the dense first layer
        a = rec["shared_act"][j].double()
        w = model.model.layers[j].mlp.shared_experts.down_proj.weight[witness].double()
        k = w.shape[1]
        gamma = k * 2.0 ** -24 / (1 - k * 2.0 ** -24)
        b = (a @ w.T).abs() + gamma * (a.abs() @ w.abs().T)
        total = b if total is None else total + b
        total = total * (1 + 2.0 ** -8) ** 2
    return total


def _draft(out: Path, name: str, target):
    return load_draft(out, name, target)


# ---------------------------------------------------------------------------------------------------------


def test_files_summary_and_determinism(pair, tmp_path):
    out, summary = pair
    for sub, files in (("target", ["config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                                   "tokenizer_config.json", "special_tokens_map.json", G.PAIR_FILE]),
                       ("draft", ["config.json", "model.safetensors"]),
                       ("draft-random", ["config.json", "model.safetensors"]),
                       ("draft-miss", ["config.json", "model.safetensors"]),
                       ("draft-mla", ["config.json", "model.safetensors"]),
                       ("draft-mla-miss", ["config.json", "model.safetensors"])):
        assert sorted(p.name for p in (out / sub).iterdir()) == sorted(files)
    assert summary["S"] == [100, 356]
    assert json.loads((out / "target" / G.PAIR_FILE).read_text())["preset"] == "tiny"
    assert summary["capture_layers"] == [2, 3, 4]
    b = _bigram()
    assert all(b[int(t)] == u for t, u in summary["B_sample"].items())
    # same seed -> byte-identical, different seed -> different
    G.generate(str(tmp_path / "again"), "tiny", 0, "cpu", DRAFT_KINDS)
    for sub in ("target", "draft", "draft-random", "draft-miss", "draft-mla", "draft-mla-miss"):
        for f in sorted(p.name for p in (out / sub).iterdir()):
            assert _sha(out / sub / f) == _sha(tmp_path / "again" / sub / f), f"{sub}/{f} differs"
    G.generate(str(tmp_path / "seed1"), "tiny", 1, "cpu", "constructed")
    assert _sha(out / "target/model.safetensors") != _sha(tmp_path / "seed1/target/model.safetensors")
    assert G.bigram_map("tiny", 1) != G.bigram_map("tiny", 0)


def test_bigram_map_is_one_cycle_over_S():
    b = _bigram()
    s = list(range(P.s_start, P.s_start + P.s_size))
    seen, t = [], s[0]
    for _ in range(P.s_size):
        seen.append(t)
        t = int(b[t])
    assert sorted(seen) == s and t == s[0]  # a single cycle through all of S: no fixed points, no short loops
    outside = [0, 1, 50, 99, P.s_start + P.s_size, P.vocab - 1]
    assert all(P.s_start <= int(b[v]) < P.s_start + P.s_size for v in outside)


def test_target_loads_in_transformers_and_is_the_bigram_map(pair, target):
    _, info, _ = target
    assert not any(info.values()), f"checkpoint names do not match DeepseekV3ForCausalLM: {info}"
    b = _bigram()
    full_cycle = _chain(torch.tensor([P.s_start]), P.s_size)  # visits every t in S once
    rand = torch.randint(0, P.vocab, (3, 64), generator=torch.Generator().manual_seed(5))  # ids outside S too
    margins = []
    for ids in (full_cycle, rand):
        logits, _, _, _ = _run(target, ids)
        top = logits.topk(2, dim=-1)
        assert torch.equal(top.indices[..., 0], b[ids]), "greedy next token != B(t)"
        margins.append((top.values[..., 0] - top.values[..., 1]).min().item())
    print(f"target min logit margin (bf16): {min(margins):.2f}")
    assert min(margins) > 15.0


# the exact drafts, GQA (LlamaForCausalLMEagle3) and MLA (Eagle3DeepseekV2ForCausalLM), and the least top-1 minus
# top-2 margin their every step must keep: the MLA draft's token directions live in kv_lora_rank / 2 = 64
# dimensions at this preset (the GQA draft's in 256), so its lm_head's cross terms are twice as large (README "The
# MLA draft": ~23 at kimi61's 256)
EXACT = [("draft", 10.0), ("draft-mla", 10.0)]
MISS = [("draft-miss", 10.0), ("draft-mla-miss", 5.0)]


@pytest.mark.parametrize("name, min_margin", EXACT)
def test_constructed_draft_drafts_the_chain(pair, target, name, min_margin):
    out, _ = pair
    draft = _draft(out, name, target)
    # prompts of random S tokens (so the generated chain revisits prompt tokens) followed by the chain
    g = torch.Generator().manual_seed(7)
    prompt = torch.randint(P.s_start, P.s_start + P.s_size, (2, 96), generator=g)
    ids = torch.cat([prompt, _chain(_bigram()[prompt[:, -1]], 96)], dim=1)
    _, aux, _, _ = _run(target, ids)
    gen = slice(prompt.shape[1] - 1, None)  # rounds after the prompt: what decoding sees
    for steps in (2, 4):  # 2 = the lab configuration; every step is a fixed point, so more steps work too
        lens, margins = [], []
        for s in range(ids.shape[0]):
            drafts, m = R.draft_chain(draft, aux[s], ids[s], steps)
            lens.append(R.accept_chain(drafts, ids[s])[gen].float())
            margins.append([mm[gen].min().item() for mm in m])
        acc = torch.cat(lens)
        per_step = [min(col) for col in zip(*margins, strict=True)]
        print(f"{name} steps={steps}: draft accept length {acc.mean():.3f}; min margin per step {per_step}")
        assert torch.all(acc == steps + 1)
        assert min(per_step) > min_margin


def test_random_draft_is_not_accepted(pair, target):
    out, _ = pair
    draft = _draft(out, "draft-random", target)
    ids = _chain(torch.tensor([P.s_start, P.s_start + 17]), 96)
    _, aux, _, _ = _run(target, ids)
    acc = torch.cat([R.accept_lengths(*R.draft_two_steps(draft, aux[s], ids[s])[:2], ids[s]).float()
                     for s in range(2)])
    print(f"random draft accept length {acc.mean():.3f}")
    assert acc.mean() < 1.1


def _rank_partial(model, layer: int, x: torch.Tensor, rank: int) -> torch.Tensor:
    """What TP rank `rank` of 2 holds of the shared expert's output before the all-reduce: sglang splits the
    intermediate dim into contiguous halves (MergedColumnParallelLinear / RowParallelLinear)."""
    se = model.model.layers[layer].mlp.shared_experts
    half = se.gate_proj.weight.shape[0] // 2
    sl = slice(rank * half, (rank + 1) * half)
    xf = x.float()
    gate, up = xf @ se.gate_proj.weight[sl].float().T, xf @ se.up_proj.weight[sl].float().T
    act = torch.nn.functional.silu(gate) * up
    return (act.to(torch.bfloat16).float() @ se.down_proj.weight[:, sl].float().T).to(torch.bfloat16)


@pytest.mark.parametrize("name", ["draft", "draft-mla"])
def test_witness_sum_is_zero_and_a_wrong_aux_capture_breaks_acceptance(pair, target, name):
    out, _ = pair
    model = target[0]
    draft = _draft(out, name, target)
    ids = _chain(torch.tensor([P.s_start + 3, P.s_start + 99]), 80)
    _, aux, caps, shared_in = _run(target, ids)
    witness = G.build_structure(P, 0).witness
    for i in CAPS:
        bound = _witness_bound(target, i, witness)  # 0 in exact arithmetic; rounding alone, derived
        assert torch.all(caps[i][..., witness].double().abs() <= bound), "witness coordinates beyond rounding"
        p0, p1 = (_rank_partial(model, i - 1, shared_in[i], r) for r in (0, 1))
        assert bound.max() < 1e-3 * p0.float()[..., witness].pow(2).mean().sqrt()  # negligible next to a part
        assert torch.equal(p0.float() + p1.float(), torch.zeros_like(p0.float()))  # exact cancellation
        assert p0.float()[..., witness].pow(2).mean().sqrt() > 2.0  # but each rank's part is large
    good = torch.cat([R.accept_lengths(*R.draft_two_steps(draft, aux[s], ids[s])[:2], ids[s])
                      for s in range(2)])
    assert torch.all(good == 3)
    # the capture bug class of P3 / P4: an aux state holding one rank's partial sum of the layer before
    for bad_caps in (CAPS, [CAPS[1]]):
        lens = []
        for s in range(2):
            parts = [(caps[i][s].float() + (_rank_partial(model, i - 1, shared_in[i][s], 0).float()
                                            if i in bad_caps else 0)).to(torch.bfloat16) for i in CAPS]
            d1, d2, _, _ = R.draft_two_steps(draft, torch.cat(parts, -1), ids[s])
            lens.append(R.accept_lengths(d1, d2, ids[s]).float())
        acc = torch.cat(lens).mean()
        print(f"{name}: accept length with rank-0 partial sums in captures {bad_caps}: {acc:.3f}")
        assert acc < 1.2


# ---------------------------------------------------------------------------------------------------------
# What sglang's loaders read (derived by reading sglang 0.5.14 / 0.5.9 source; see README "Loader facts").

# sglang 0.5.14 srt/models/llama_eagle3.py: LlamaForCausalLMEagle3.load_weights
LEGACY_NAME_MAP_0514 = {"midlayer": "layers.0", "aux_norm_low": "fc_norm.0", "aux_norm_mid": "fc_norm.1",
                        "aux_norm_high": "fc_norm.2"}
STACKED = [(".qkv_proj", ".q_proj", "q"), (".qkv_proj", ".k_proj", "k"), (".qkv_proj", ".v_proj", "v"),
           (".gate_up_proj", ".gate_proj", 0), (".gate_up_proj", ".up_proj", 1)]


def _draft_params(cfg: dict, layer_prefix: str) -> dict[str, tuple[int, ...]]:
    """named_parameters() of LlamaForCausalLMEagle3 (TP=1, before set_embed), from its module tree."""
    H, hd = cfg["hidden_size"], cfg["head_dim"]
    nq, nkv, inter = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["intermediate_size"]
    n_aux = len(cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"])
    lp = f"model.{layer_prefix}."
    return {
        "model.embed_tokens.weight": (cfg["vocab_size"], H),
        "model.fc.weight": (H, cfg["target_hidden_size"] * n_aux),
        lp + "self_attn.qkv_proj.weight": ((nq + 2 * nkv) * hd, 2 * H),
        lp + "self_attn.o_proj.weight": (H, nq * hd),
        lp + "mlp.gate_up_proj.weight": (2 * inter, H),
        lp + "mlp.down_proj.weight": (H, inter),
        lp + "input_layernorm.weight": (H,),
        lp + "post_attention_layernorm.weight": (H,),
        lp + "hidden_norm.weight": (H,),
        "model.norm.weight": (H,),
        "lm_head.weight": (cfg["draft_vocab_size"], H),
    }


def _map_like_sglang(name: str, params: dict, legacy: dict) -> str | None:
    for old, new in legacy.items():
        if old in name:
            name = name.replace(old, new)
    for param_name, weight_name, _ in STACKED:
        if weight_name in name:
            name = name.replace(weight_name, param_name)
            return f"model.{name}" if name not in params else name
    return name if name in params else f"model.{name}"


@pytest.mark.parametrize("version, legacy, layer_prefix",
                         [("0.5.14", LEGACY_NAME_MAP_0514, "layers.0"), ("0.5.9", {}, "midlayer")])
def test_draft_names_and_config_match_sglang_eagle3_loader(pair, version, legacy, layer_prefix):
    out, _ = pair
    cfg = json.loads((out / "draft" / "config.json").read_text())
    params = _draft_params(cfg, layer_prefix)
    tensors = load_file(out / "draft" / "model.safetensors")
    loaded: dict[str, list[tuple[int, ...]]] = {}
    for name, t in tensors.items():
        if "d2t" in name or "t2d" in name:  # read (d2t) / skipped (t2d) before any mapping
            continue
        target = _map_like_sglang(name, params, legacy)
        assert target in params, f"{version}: checkpoint tensor {name} -> {target} is silently dropped"
        loaded.setdefault(target, []).append(tuple(t.shape))
    for pname, shape in params.items():
        if pname == "model.embed_tokens.weight":
            continue  # replaced by the target's embedding (eagle_worker_v2 init_lm_head -> set_embed)
        shards = loaded.get(pname)
        assert shards, f"{version}: parameter {pname} gets no weight"
        rows = sum(s[0] for s in shards)
        assert (rows, *shards[0][1:]) == shape, f"{version}: {pname} {shards} vs {shape}"
    hot = tensors["d2t"] + torch.arange(tensors["d2t"].shape[0])  # hot_token_id = d2t + arange
    assert hot.tolist() == list(range(P.s_start, P.s_start + P.s_size))
    assert tensors["t2d"].dtype == torch.bool and int(tensors["t2d"].sum()) == P.s_size
    # config keys the loaders and workers read
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"]
    assert cfg["draft_vocab_size"] == P.s_size  # set -> own lm_head over the draft vocab, not the target's
    assert cfg["target_hidden_size"] == cfg["hidden_size"] == P.hidden  # equal: set_embed shares embed
    assert cfg["tie_word_embeddings"] is False and cfg["num_hidden_layers"] == 1
    ids = cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    # deepseek_v2.set_eagle3_layers_to_capture: 0.5.14 adds 1 only if ids[0] == 1; 0.5.9 always adds 1;
    # the default without ids is [2, L // 2, L - 3]. All three agree for this pair.
    captured = [i + 1 for i in ids] if (version == "0.5.9" or ids[0] == 1) else ids
    assert captured == CAPS == [2, P.layers // 2, P.layers - 3]
    hf = transformers.AutoConfig.from_pretrained(out / "draft")
    assert (hf.draft_vocab_size, hf.target_hidden_size, hf.head_dim) == (P.s_size, P.hidden, P.draft_head_dim)
    assert hf.eagle_config["eagle_aux_hidden_state_layer_ids"] == ids


def _mla_draft_params(cfg: dict) -> dict[str, tuple[int, ...]]:
    """named_parameters() of Eagle3DeepseekV2ForCausalLM (sglang 0.5.14 kimi_k25_eagle3.py, TP=1, before
    set_embed): Eagle3MLAModel's embed_tokens, fc (no fc_norm: the config sets none), midlayer
    (Eagle3MLADecoderLayer: DeepseekV2AttentionMLA with its fused q_a + kv_a projection replaced by one of 2 x
    hidden inputs, DeepseekV2MLP, three norms) and norm; lm_head over the draft vocabulary."""
    H, heads, inter = cfg["hidden_size"], cfg["num_attention_heads"], cfg["intermediate_size"]
    qk = cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]
    n_aux = len(cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"])
    lp = "model.midlayer."
    return {
        "model.embed_tokens.weight": (cfg["vocab_size"], H),
        "model.fc.weight": (H, cfg["target_hidden_size"] * n_aux),
        lp + "self_attn.fused_qkv_a_proj_with_mqa.weight":
            (cfg["q_lora_rank"] + cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"], 2 * H),
        lp + "self_attn.q_a_layernorm.weight": (cfg["q_lora_rank"],),
        lp + "self_attn.q_b_proj.weight": (heads * qk, cfg["q_lora_rank"]),
        lp + "self_attn.kv_a_layernorm.weight": (cfg["kv_lora_rank"],),
        lp + "self_attn.kv_b_proj.weight": (heads * (cfg["qk_nope_head_dim"] + cfg["v_head_dim"]),
                                            cfg["kv_lora_rank"]),
        lp + "self_attn.o_proj.weight": (H, heads * cfg["v_head_dim"]),
        lp + "mlp.gate_up_proj.weight": (2 * inter, H),
        lp + "mlp.down_proj.weight": (H, inter),
        lp + "input_layernorm.weight": (H,),
        lp + "hidden_norm.weight": (H,),
        lp + "post_attention_layernorm.weight": (H,),
        "model.norm.weight": (H,),
        "lm_head.weight": (cfg["draft_vocab_size"], H),
    }


def _map_like_sglang_mla(name: str) -> str:
    """Eagle3DeepseekV2ForCausalLM.load_weights' name mapping (0.5.14): layers.0. -> midlayer., everything but
    lm_head under model., gate/up stacked into gate_up_proj, q_a_proj and kv_a_proj_with_mqa fused (q first)."""
    import re

    mapped = re.sub(r"^layers\.0\.", "midlayer.", name)
    if not mapped.startswith("lm_head."):
        mapped = f"model.{mapped}"
    for param_name, weight_name in ((".gate_up_proj", ".gate_proj"), (".gate_up_proj", ".up_proj")):
        if weight_name in mapped:
            return mapped.replace(weight_name, param_name)
    for part in ("q_a_proj", "kv_a_proj_with_mqa"):
        if part in mapped:
            return mapped.replace(part, "fused_qkv_a_proj_with_mqa")
    return mapped


@pytest.mark.parametrize("sub", ["draft-mla", "draft-mla-miss"])
def test_mla_draft_names_and_config_match_sglang_loader(pair, sub):
    """Every parameter of sglang's Eagle3DeepseekV2ForCausalLM gets a weight of its shape from the checkpoint
    (unknown names are only logged there and the parameter keeps torch.empty's garbage), the config is what
    kimi_k25_eagle3.py / model_config.py read, and transformers parses it."""
    out, _ = pair
    cfg = json.loads((out / sub / "config.json").read_text())
    params = _mla_draft_params(cfg)
    tensors = load_file(out / sub / "model.safetensors")
    loaded: dict[str, list[tuple[int, ...]]] = {}
    for name, t in tensors.items():
        if name in ("d2t", "t2d"):
            continue
        target = _map_like_sglang_mla(name)
        assert target in params, f"checkpoint tensor {name} -> {target} is dropped (\"skipping unexpected weight\")"
        loaded.setdefault(target, []).append(tuple(t.shape))
    for pname, shape in params.items():
        if pname == "model.embed_tokens.weight":
            continue  # the target's (eagle_worker_v2 init_lm_head -> set_embed: hidden sizes are equal)
        shards = loaded.get(pname)
        assert shards, f"parameter {pname} gets no weight"
        assert (sum(x[0] for x in shards), *shards[0][1:]) == shape, f"{pname} {shards} vs {shape}"
    # both halves of the fused projection, in either order (the loader caches each and concatenates q, kv)
    assert sorted(loaded["model.midlayer.self_attn.fused_qkv_a_proj_with_mqa.weight"]) == sorted([
        (cfg["q_lora_rank"], 2 * P.hidden), (cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"], 2 * P.hidden)])
    hot = tensors["d2t"] + torch.arange(tensors["d2t"].shape[0])
    assert hot.tolist() == list(range(P.s_start, P.s_start + P.s_size))
    assert cfg["architectures"] == ["Eagle3DeepseekV2ForCausalLM"]  # model_config.py: an MLA architecture
    assert cfg["num_hidden_layers"] == 1 and cfg["tie_word_embeddings"] is False
    assert cfg["draft_vocab_size"] == P.s_size and cfg["target_hidden_size"] == cfg["hidden_size"] == P.hidden
    assert cfg["q_lora_rank"] is not None  # Eagle3MLADecoderLayer raises without it
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [c - 1 for c in CAPS]
    hf = transformers.AutoConfig.from_pretrained(out / sub)
    rope = getattr(hf, "rope_parameters", None) or {"rope_type": "default"}
    assert rope.get("rope_type", "default") == "default"  # kimi_k25_eagle3: rope_scaling None, plain RoPE
    assert (hf.kv_lora_rank, hf.qk_rope_head_dim, hf.draft_vocab_size) == (
        cfg["kv_lora_rank"], cfg["qk_rope_head_dim"], P.s_size)


@pytest.mark.parametrize("name", ["draft", "draft-mla"])
def test_draft_attention_stays_on_its_own_position_at_long_context(pair, target, name):
    """The construction needs each draft position to attend to itself; a long prompt of random ids repeats every
    token of S about context / |S| times, which the attention must not confuse with the position itself (README
    "The MLA draft": the rotary part separates repeats). At 16384 tokens (64 repeats of each token), with the
    states the target keeps (aux ~ embed of the token), the last positions' weight on themselves stays >= 0.99."""
    out, _ = pair
    draft = _draft(out, name, target)
    ids = torch.randint(0, P.vocab, (16384,), generator=torch.Generator().manual_seed(5))
    w = R.self_attention_weight(draft, ids, last=32)
    print(f"{name}: weight on itself over the last 32 positions of 16384: min {w.min():.5f}")
    assert w.min() >= 0.99


def test_target_names_follow_the_deepseek_checkpoint_layout(pair):
    """sglang's deepseek_weight_loader reads HF DeepSeek-V3 names: q_a_proj + kv_a_proj_with_mqa (fused on
    load), per-expert mlp.experts.E.{gate,up,down}_proj, mlp.shared_experts.*,
    mlp.gate.{weight,e_score_correction_bias}."""
    out, _ = pair
    names = set(load_file(out / "target" / "model.safetensors"))
    expected = {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"}
    for i in range(P.layers):
        pre = f"model.layers.{i}."
        expected |= {pre + n for n in (
            "input_layernorm.weight", "post_attention_layernorm.weight", "self_attn.q_a_proj.weight",
            "self_attn.q_a_layernorm.weight", "self_attn.q_b_proj.weight",
            "self_attn.kv_a_proj_with_mqa.weight",
            "self_attn.kv_a_layernorm.weight", "self_attn.kv_b_proj.weight", "self_attn.o_proj.weight")}
        experts = [f"mlp.experts.{e}." for e in range(P.routed_experts)]
        mlps = ["mlp."] if i == 0 else ["mlp.shared_experts.", *experts]
        expected |= {pre + m + f"{s}_proj.weight" for m in mlps for s in ("gate", "up", "down")}
        if i > 0:
            expected |= {pre + "mlp.gate.weight", pre + "mlp.gate.e_score_correction_bias"}
    assert names == expected


def test_sizing_counts_the_generated_tensors(pair):
    out, _ = pair
    tensors = load_file(out / "target" / "model.safetensors")
    actual = sum(t.numel() * t.element_size() for n, t in tensors.items()
                 if "norm" not in n and "bias" not in n)
    assert G.sizing(P)["total_bytes"] == actual
    lab = G.sizing(G.PRESETS["lab"], tokens=1)
    assert 3.3e9 < lab["bytes_per_rank"] < 4.3e9 and 12e9 < lab["total_bytes"] < 13.5e9


def test_bad_arguments_are_named(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    with pytest.raises(SystemExit) as e:
        G.main(["--out", str(tmp_path / "file"), "--preset", "tiny"])
    assert "--out" in str(e.value)
    with pytest.raises(SystemExit):
        G.main(["--out", str(tmp_path / "x"), "--preset", "nope"])
    assert "--preset" in capsys.readouterr().err
    for bad in ("nope", "miss,miss", ""):
        with pytest.raises(SystemExit) as e:
            G.main(["--out", str(tmp_path / "x"), "--preset", "tiny", "--draft", bad])
        assert "--draft" in str(e.value)
    assert not (tmp_path / "x").exists()  # nothing written
    assert G.draft_kinds("both") == ["constructed", "random"] and G.draft_kinds("miss,constructed") == [
        "miss", "constructed"]
    if not torch.cuda.is_available():
        with pytest.raises(SystemExit) as e:
            G.main(["--out", str(tmp_path / "x"), "--preset", "tiny", "--device", "cuda"])
        assert "--device" in str(e.value)


def _literal_in(src: str, func: str, var: str):
    import ast

    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.FunctionDef) and node.name == func:
            for stmt in ast.walk(node):
                names = [getattr(t, "id", None) for t in getattr(stmt, "targets", [])]
                if isinstance(stmt, ast.Assign) and var in names:
                    return ast.literal_eval(stmt.value)
    raise AssertionError(f"{var} not found in {func}")


def test_loader_facts_against_sglang_source():
    """Optional: with SGLANG_SRC=<unpacked sglang 0.5.14 package dir>, re-derive the facts above."""
    import os

    src = os.environ.get("SGLANG_SRC")
    if not src:
        pytest.skip("set SGLANG_SRC to an unpacked sglang 0.5.14 package dir (site-packages/sglang)")
    models = Path(src) / "srt" / "models"
    eagle3 = (models / "llama_eagle3.py").read_text()
    assert _literal_in(eagle3, "load_weights", "legacy_name_map") == LEGACY_NAME_MAP_0514
    assert [tuple(x) for x in _literal_in(eagle3, "load_weights", "stacked_params_mapping")] == STACKED
    assert 'getattr(config, "norm_output", False)' in eagle3
    assert "self.hot_token_id = loaded_weight + torch.arange" in eagle3
    ds = (models / "deepseek_v2.py").read_text()
    assert "self.model.layers_to_capture = [2, num_layers // 2, num_layers - 3]" in ds
    assert "if layer_ids and layer_ids[0] == 1:" in ds


# ---------------------------------------------------------------------------------------------------------
# The tokenizer (README "The tokenizer")

TEXTS = ["", "plain words", " lead and trail ", '{"ok": true, "color": "red", "n": [1, -2.5e3, null]}',
         "tabs\tnew\nlines\r\n  runs   of   spaces", "é ü ß 中文 🙂", "\x00\x01\x7f control", "<s> is text here"]


def test_tokenizer_round_trips_text_exactly(tokenizer):
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    assert len(tokenizer) == P.vocab == len(tokenizer.get_vocab())
    assert (tokenizer.bos_token_id, tokenizer.eos_token_id) == (G.BOS_ID, G.EOS_ID)
    for text in TEXTS[:-1]:
        ids = tokenizer.encode(text)
        assert tokenizer.decode(ids) == text, ids
        assert all(i >= P.s_start for i in ids)  # plain text never becomes a special token
    ids = tokenizer.encode(TEXTS[-1])  # a special token's text in a prompt is that token (as in most tokenizers)
    assert ids[0] == G.BOS_ID and tokenizer.decode(ids) == TEXTS[-1]

    @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=80))
    def round_trip(text):
        assert tokenizer.decode(tokenizer.encode(text)) == text

    round_trip()


def test_decoder_inserts_nothing_and_S_spells_text(tokenizer):
    """The detokenized text of any id sequence is the concatenation of its tokens' texts, and every id of S (all
    the target ever predicts) is valid UTF-8 on its own: a streamed chunk never splits a character."""
    s_ids = list(range(P.s_start, P.s_start + P.s_size))
    pieces = [tokenizer.decode([i]) for i in s_ids]
    assert all(pc and "\ufffd" not in pc and not pc.isspace() for pc in pieces)
    assert len(set(pieces)) == P.s_size
    assert set("".join(pieces)) >= set('{}[]":,-.0123456789truefalsn ')  # enough to spell JSON
    texts = T.token_texts(P.vocab, P.s_start, P.s_size)
    whole = [i for i, t in enumerate(texts) if not (len(t) == 1 and ord(t) >= 0x80)]  # not a lone UTF-8 byte
    rng = torch.Generator().manual_seed(3)
    seq = [whole[int(j)] for j in torch.randint(0, len(whole), (400,), generator=rng)]
    assert tokenizer.decode(seq, skip_special_tokens=True) == "".join(
        tokenizer.decode([i]) for i in seq if i >= P.s_start)
    assert texts[: len(T.SPECIALS)] == list(T.SPECIALS) and texts[G.BOS_ID] == T.BOS and texts[G.EOS_ID] == T.EOS
    vocab = tokenizer.get_vocab()
    merged = [t for i, t in enumerate(texts) if i >= P.s_start and len(t) > 1]
    assert all(tokenizer.encode(t) == [vocab[tokenizer.convert_ids_to_tokens(texts.index(t))]] for t in merged)


def test_chat_template_renders(tokenizer):
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": 'Say {"hi"}.'}]
    text = tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    assert text == '<|system|>Be brief.<|end|><|user|>Say {"hi"}.<|end|><|assistant|>'
    ids = tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, return_dict=False)
    special = {t: tokenizer.convert_tokens_to_ids(t) for t in T.SPECIALS}
    assert ids[0] == special["<|system|>"] and ids[-1] == special["<|assistant|>"]
    assert ids.count(special["<|end|>"]) == 2 and tokenizer.decode(ids) == text


def test_text_prompt_continuation_is_the_bigram_chain(target, tokenizer):
    """What a user sees: text in, greedy text out, through the real transformers model and tokenizer."""
    model = target[0]
    for prompt in ("Hello, world", '{"color": "', "zq"):
        ids = tokenizer(prompt, return_tensors="pt").input_ids
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=24, do_sample=False, eos_token_id=None,
                                 pad_token_id=G.EOS_ID)[0, ids.shape[1]:]
        expect = _chain(ids[0, -1:], 25)[0, 1:]  # B(last prompt token), B(B(...)), ...
        assert out.tolist() == expect.tolist(), prompt
        assert tokenizer.decode(out) == "".join(T.token_texts(P.vocab, P.s_start, P.s_size)[t] for t in expect)


def test_whitespace_tokens_never_win(target, tokenizer):
    """A JSON grammar allows any amount of whitespace between tokens; greedy decoding under it terminates only if
    whitespace never outscores the grammar's other choices (without the penalty the tiny pair's greedy decode
    under a JSON-schema grammar spends all its tokens on whitespace: README). The lm_head rows of the
    whitespace-only ids carry -WHITESPACE_LOGIT_PENALTY in every context, so they rank below every other id."""
    ws = T.whitespace_ids(P.vocab, P.s_start, P.s_size)
    assert [tokenizer.decode([i]) for i in ws] == ["\t", "\n", "\x0b", "\x0c", "\r", "\x1c", "\x1d", "\x1e",
                                                   "\x1f", " "]
    assert all(i >= P.s_start + P.s_size for i in ws)  # outside S: the bigram map is untouched
    rand = torch.randint(0, P.vocab, (2, 64), generator=torch.Generator().manual_seed(11))
    chain = _chain(torch.tensor([P.s_start + 5]), 64)
    rest = [i for i in range(P.vocab) if i not in ws]
    for ids in (rand, chain):
        logits, _, _, _ = _run(target, ids)
        gap = (logits[..., rest].min(-1).values - logits[..., ws].max(-1).values).min().item()
        print(f"whitespace logits max {logits[..., ws].max():.1f}; lowest other logit minus it, min {gap:.1f}")
        assert gap > 5.0


# ---------------------------------------------------------------------------------------------------------
# The draft that misses by design (README "A draft that misses by design")


@pytest.mark.parametrize("preset", ["tiny", "kimi61"])
def test_miss_blocks_give_the_rates_and_every_request_realigns(preset):
    p = G.PRESETS[preset]
    blocks = G.miss_blocks(p.s_size)
    counts = [blocks.count(j) for j in range(3)]
    assert sum((j + 1) * c for j, c in enumerate(counts)) == p.s_size  # the blocks tile the cycle exactly
    rates = [sum(counts[s:]) / len(blocks) for s in (1, 2)]
    # rounding R (|S| / 2.04 rounds) and c_j = R (r_j - r_j+1) to integers moves each rate by <= 1.5 / R
    assert all(abs(r - t) <= 1.5 / len(blocks) for r, t in zip(rates, G.MISS_RATES, strict=True)), rates
    assert abs(p.s_size / len(blocks) - (1 + sum(G.MISS_RATES))) < 0.01
    # evenly interleaved: any 40 consecutive rounds (one SGLang roll-up) hold each type within 2 of its share
    for j, c in enumerate(counts):
        window = [sum(1 for b in (blocks * 2)[i : i + 40] if b == j) for i in range(len(blocks))]
        assert max(abs(w - 40 * c / len(blocks)) for w in window) <= 2, (j, min(window), max(window))
    st = G.build_structure(p, 0)
    agree, dmap = G.miss_agree(st), G.miss_map(st)
    assert torch.equal(dmap[agree], st.succ[agree]) and bool((dmap[~agree] != st.succ[~agree]).all())
    # from every entry point of the cycle the rounds re-align to the blocks after at most one round
    starts, pos = set(), 0
    for j in blocks:
        starts.add(pos)
        pos += j + 1
    index_of = torch.empty_like(st.cycle)
    index_of[st.cycle] = torch.arange(p.s_size)
    for k in range(p.s_size):
        t, seen = int(st.cycle[k]), []
        for _ in range(3):  # three rounds by hand: accept 1 + [t agrees] + [t and B(t) agree]
            a = 1 + int(agree[t]) + int(agree[t] and agree[st.succ[t]])
            for _ in range(a):
                t = int(st.succ[t])
            seen.append(int(index_of[t]) in starts)
        assert seen[0] and seen[1], k


@pytest.mark.parametrize("name, min_margin", MISS)
def test_miss_draft_drafts_its_map_and_accepts_what_was_computed(pair, target, name, min_margin):
    """The miss draft (GQA and MLA), run by the reference of sglang's draft math on the target's real captured
    states, drafts exactly D (margins checked), and SGLang's rounds over its drafts accept exactly what
    simulate_rounds computed from the construction alone."""
    out, _ = pair
    draft = _draft(out, name, target)
    st = G.build_structure(P, 0)
    dmap = G.miss_map(st)
    s_ids = torch.arange(P.s_start, P.s_start + P.s_size)
    index = G.token_index(P)

    def d_of(ids: torch.Tensor) -> torch.Tensor:
        return s_ids[dmap[index[ids]]]

    g = torch.Generator().manual_seed(13)
    prompt = torch.randint(0, P.vocab, (2, 40), generator=g)
    ids = torch.cat([prompt, _chain(_bigram()[prompt[:, -1]], 200)], dim=1)
    _, aux, _, _ = _run(target, ids)
    for s in range(2):
        (d1, d2), (m1, m2) = R.draft_chain(draft, aux[s], ids[s], 2)
        assert torch.equal(d1, d_of(ids[s, 1:])) and torch.equal(d2, d_of(d1))  # the draft is its map D
        assert min(m1.min().item(), m2.min().item()) > min_margin
        print(f"{name}: min margins {m1.min():.1f} / {m2.min():.1f}")
        acc = R.accept_chain([d1, d2], ids[s])  # a round starting at each position j (last verified token j+1)
        # SGLang's rounds: the prefill emits ids[40]; a round at last-verified position q accepts acc[q - 1]
        n_out = ids.shape[1] - 40 - 3  # stay inside the computed window
        q, emitted, got = 40, 1, []
        while emitted < n_out:
            a = int(acc[q - 1])
            got.append(a)
            q, emitted = q + a, emitted + a
        sim = G.simulate_rounds(st, dmap, int(prompt[s, -1]), n_out, 2)
        assert got == sim["accept_per_round"] and sim["accept_tokens"] == sum(got)
        print(f"miss draft, request {s}: {len(got)} rounds, accept length {sum(got) / len(got):.4f} "
              f"(reference draft) = {sim['accept_tokens'] / sim['rounds']:.4f} (computed)")
