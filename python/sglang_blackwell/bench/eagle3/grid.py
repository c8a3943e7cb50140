"""Grid mode (`[workload] contexts`): the regime users run, prompt length x concurrency, each cell measured twice,
the first time this server sees it and warm.

No harness warm-up. For each context (ascending), each concurrency c (ascending):
1. flush the radix cache, reset the spec counters, snapshot the step times and the Triton cache;
2. first burst: c requests of that context sent together (client.run_level, rounds 1);
3. reset the spec counters, snapshot the step times and the Triton cache again;
4. warm window: c clients x `rounds` requests.
A cell `[workload] left_out` names is skipped (no request sent) and recorded in rec["left_out"] with its reason.
Every request has a prompt of its own (prompts.PromptSource). The cell's record is the warm window's level record
(window.measure) with `context`, `triton_compiles` (what the Triton cache gained during the window) and `first`
(the first burst's tok/s, wall time, TTFT / TPOT / e2e, accept length, Triton compiles). Then, per
`[profile] contexts`, one profiler window with a prompt of that length (`[profile] prompt = "cell"`: the context's
last warm prompt again, right after its cells, its prefill served by the radix cache), and the `[crosscheck]`
cells.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from . import crosscheck, prompts, triton_cache, window
from .config import BenchConfig
from .config_arms import ArmSpec
from .config_workload import LeftOutCell, Prompt

Progress = Callable[[str], None]
ProfileHook = Callable[[Prompt], dict[str, Any]]
FIRST_KEYS = ("tok_s", "wall_s", "requests", "output_tokens", "ttft_ms", "ttft_ms_p99", "tpot_ms", "tpot_ms_p99",
              "e2e_ms", "e2e_ms_p99", "itl_ms_p99", "accept_len", "step_ms", "output_digests")


MEASUREMENT = {
    "grid": "per (context, concurrency) cell, contexts ascending, concurrency ascending, no warm-up: flush the radix "
            "cache, reset the spec counters, snapshot step times and the Triton cache; first burst: c requests of a "
            "prompt of `context` token ids sent together (cells.<ctx>.<c>.first); reset and snapshot again; warm "
            "window: c clients x rounds requests (the cell's own metrics, as a level's); every request a fresh "
            "prompt (bench/eagle3/prompts.py grid_prompt: random.Random(f'{seed}:{context}:{index}').choices(ids, "
            "k=context))",
    "triton_compiles": "entries the server's Triton cache directory (TRITON_CACHE_DIR, else "
                       "$TRITON_HOME/.triton/cache, else ~/.triton/cache, of the server's environment) gained "
                       "during the window: new_entries, and kernels {name: entries} from their __grp__<name>.json "
                       "files; launched servers only",
    "kernel_classes": "per [profile] contexts, one profiler window with a prompt of that length: rank 0's GPU time "
                      "per kernel class (trace_kernels.KERNEL_CLASSES) per step of each stage, in ms per step, and "
                      "the top kernels",
    "crosscheck": "python -m sglang.bench_serving --backend sglang-oai --dataset-name random-ids on the same "
                  "server per [crosscheck] cell; ours_over_theirs = our warm tok/s / its output_throughput",
}
# in the measurement block of a receipt whose config leaves cells out
LEFT_OUT_MEASUREMENT = {
    "left_out": "workload.left_out: the cells [workload] left_out names, with the config's reason: never measured "
                "(no request sent), no cell record, no verdict check of the cell",
}


def measure_cell(cfg: BenchConfig, srv: window.Server, src: prompts.PromptSource, context: int, concurrency: int,
                 triton_dir: Path | None, progress: Progress) -> dict[str, Any]:
    """One cell: the first burst, then the warm window (module docstring)."""
    w, c = cfg.workload, concurrency

    def compiles(before: frozenset[str] | None) -> dict[str, Any]:
        if triton_dir is None:
            return triton_cache.skipped("attached server: its Triton cache is not ours to list")
        return triton_cache.compiled(triton_dir, before)

    before = triton_cache.snapshot(triton_dir)
    first = window.measure(srv, src.take(context, c), concurrency=c, rounds=1, output_len=w.output_len)
    first_compiles = compiles(before)
    before = triton_cache.snapshot(triton_dir)
    warm = window.measure(srv, src.take(context, c * w.rounds), concurrency=c, rounds=w.rounds,
                          output_len=w.output_len, flush=False)
    cell = {**warm, "context": context, "triton_compiles": compiles(before),
            "first": {**{k: first.get(k) for k in FIRST_KEYS}, "triton_compiles": first_compiles}}
    progress(f"  ctx={context} c={c} first burst: {first['tok_s']:.1f} tok/s, TTFT {window.fmt(first['ttft_ms'])} "
             f"ms, {triton_cache.summary_line(first_compiles)}")
    progress(f"  ctx={context} c={c} warm: {window.line(warm)}, "
             + triton_cache.summary_line(cell["triton_compiles"]))
    return cell


def measure_grid(cfg: BenchConfig, arm: ArmSpec, srv: window.Server, rec: dict[str, Any], progress: Progress, *,
                 ids: Sequence[int], triton_dir: Path | None, profile: ProfileHook | None) -> None:
    """Every cell into rec["cells"][ctx][c] but the left-out ones (rec["left_out"]: no request sent), then the
    profile windows (rec["profiles"][ctx]) and the cross-check (rec["crosscheck"]); rec["prompts"] says how the
    prompts were made."""
    w = cfg.workload
    src = prompts.PromptSource(ids, w.prompt_seed)
    rec["cells"], rec["profiles"], rec["crosscheck"] = {}, {}, []
    rec["triton_cache_dir"] = str(triton_dir) if triton_dir else None
    if w.left_out:
        rec["left_out"] = [x.facts() for x in w.left_out]
    hook = profile if cfg.profile.steps and arm.name in cfg.profile.arms else None
    for ctx in w.contexts:
        per_c = rec["cells"].setdefault(str(ctx), {})
        for c in w.concurrency:
            if (left := w.left_out_cell(ctx, c)) is not None:
                progress("  " + left_out_line(left))
                continue
            per_c[str(c)] = measure_cell(cfg, srv, src, ctx, c, triton_dir, progress)
        if hook is not None and cfg.profile.prompt == "cell" and ctx in cfg.profile.contexts:
            progress(f"  profile window at ctx={ctx} (the warm window's last prompt, from the radix cache)")
            rec["profiles"][str(ctx)] = {**hook(src.last(ctx)), "prompt": "cell"}
    rec["prompts"] = src.facts()
    if hook is not None and cfg.profile.prompt == "fresh":
        for ctx in cfg.profile.contexts:
            progress(f"  profile window at ctx={ctx}")
            rec["profiles"][str(ctx)] = hook(src.take(ctx, 1)[0])
        rec["prompts"] = src.facts()
    if cfg.crosscheck is not None:
        tokenizer = str(prompts.tokenizer_dir(cfg))
        for ctx, c in cfg.crosscheck.cells:
            cx = crosscheck.run_cell(cfg, srv.url, tokenizer, ctx, c, rec["cells"][str(ctx)][str(c)]["tok_s"])
            progress("  " + crosscheck.line(cx))
            rec["crosscheck"].append(cx)


def left_out_line(cell: LeftOutCell | dict[str, Any]) -> str:
    """`ctx=32768 c=64: left out: <why>`: a left-out cell as the progress and the report say it (`cell`: a
    receipt's workload.left_out entry or the config's)."""
    x = cell.facts() if isinstance(cell, LeftOutCell) else cell
    return f"ctx={x['context']} c={x['concurrency']}: left out: {x['why']}"


def workload_facts(cfg: BenchConfig, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The receipt's workload block of a grid: how its prompts were made (the first run's prompt facts), and the
    cells left out with their reasons (`left_out`, only where the config leaves some out)."""
    made = next((r["prompts"] for r in runs if isinstance(r.get("prompts"), dict)), {})
    left = {"left_out": [x.facts() for x in cfg.workload.left_out]} if cfg.workload.left_out else {}
    return {"prompts": "generated (bench/eagle3/prompts.py grid_prompt)", "prompts_sha256": None, "num_prompts": None,
            "contexts": list(cfg.workload.contexts), "prompt_seed": cfg.workload.prompt_seed,
            "prompt_ids": made.get("ids"), "prompt_ids_sha256": made.get("ids_sha256"), **left}
