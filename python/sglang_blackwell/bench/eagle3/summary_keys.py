"""The keys of a `bench-eagle3` receipt's summary, declared once, each with what it means. verdict.summary and
grid_verdict.grid_summary build the summary from these names, and its readers (the README table, the text report,
the plots) take them from here: a new field is declared here, computed in the builder, and shown where wanted
(test/unit/bench/eagle3/test_summary_keys.py holds builders and readers to this table). Pure data, imports nothing.

"c=1" below: the verdict's (first) speculative arm at concurrency 1, the median over repeats; a grid receipt's c=1
keys are its smallest context's."""

from __future__ import annotations

MACHINE = "machine"
TP = "tp"
CONFIG = "config"
SPEEDUP_C1 = "speedup_c1"
ACCEPT_LEN = "accept_len"
BREAK_EVEN_ACCEPT_LEN = "break_even_accept_len"
EXPECT_ACCEPT_LEN = "expect_accept_len"
ACCEPT_LEN_TOLERANCE = "accept_len_tolerance"
TARGET_LAYERS = "target_layers"
VERIFY_MS_FUSION_ON = "verify_ms_fusion_on"
VERIFY_MS_FUSION_OFF = "verify_ms_fusion_off"
VERIFY_MS_BASIS = "verify_ms_basis"
VERIFY_MS_RANK0_FUSION_ON = "verify_ms_rank0_fusion_on"
VERIFY_MS_RANK0_FUSION_OFF = "verify_ms_rank0_fusion_off"
FUSED_CALL_US_P50 = "fused_call_us_p50"
UNFUSED_CALL_US_P50 = "unfused_call_us_p50"
FUSED_AR_PER_VERIFY = "fused_ar_per_verify"
FUSION_SAVING_PREDICTED_MS = "fusion_saving_predicted_ms"
FUSION_SAVING_MEASURED_MS = "fusion_saving_measured_ms"
FUSION_SAVING_RATIO = "fusion_saving_ratio"
ROUND_MS_FUSION_ON = "round_ms_fusion_on"
ROUND_MS_FUSION_OFF = "round_ms_fusion_off"
VERIFY_ALLREDUCE_NORM_MS_FUSION_ON = "verify_allreduce_norm_ms_fusion_on"
VERIFY_ALLREDUCE_NORM_MS_FUSION_OFF = "verify_allreduce_norm_ms_fusion_off"
API = "api"
ENGINE = "engine"
TOK_S_C1 = "tok_s_c1"
BASELINE_TOK_S_C1 = "baseline_tok_s_c1"
TTFT_MS_P50 = "ttft_ms_p50"
TPOT_MS_P50 = "tpot_ms_p50"
ITL_MS_P99 = "itl_ms_p99"
PASSED = "passed"

# every receipt's summary (verdict.summary), in the receipt's order
SUMMARY: dict[str, str] = {
    MACHINE: "the machine that measured: '2x NVIDIA H200' (box/nvidia_smi.machine_label)",
    TP: "the server's tensor-parallel size (server.tp)",
    CONFIG: "the bench config's name",
    SPEEDUP_C1: "c=1 median output tok/s of the speculative arm / the baseline's",
    ACCEPT_LEN: "c=1 measured accept length (tokens per draft+verify round)",
    BREAK_EVEN_ACCEPT_LEN: "c=1 round ms / decode ms: the accept length above which speculation pays",
    EXPECT_ACCEPT_LEN: "verdict.expect_accept_len (None: not set)",
    ACCEPT_LEN_TOLERANCE: "verdict.accept_len_tolerance (None: the accept length is not checked)",
    TARGET_LAYERS: "model.target_layers: the target's num_hidden_layers as the config gives it (None: not given)",
    VERIFY_MS_FUSION_ON: "verify GPU ms of the fusion-on arm: every rank, waits removed, where both arms have it; "
                         "else rank 0's window",
    VERIFY_MS_FUSION_OFF: "the same of the fusion-off arm",
    VERIFY_MS_BASIS: "which verify time the two keys above are (None: no profiler window)",
    VERIFY_MS_RANK0_FUSION_ON: "verify GPU ms of the fusion-on arm, rank 0's profiler window",
    VERIFY_MS_RANK0_FUSION_OFF: "the same of the fusion-off arm",
    FUSED_CALL_US_P50: "us per fused all-reduce+residual+RMSNorm call (fusion-on arm, the last rank to arrive)",
    UNFUSED_CALL_US_P50: "us per unfused boundary: NCCL all-reduce + add+RMSNorm (fusion-off arm)",
    FUSED_AR_PER_VERIFY: "fused all-reduces per verify step (fusion-on arm)",
    FUSION_SAVING_PREDICTED_MS: "(unfused - fused) x fused per verify: the verify ms fusion should save",
    FUSION_SAVING_MEASURED_MS: "verify ms off - on (every rank, waits removed)",
    FUSION_SAVING_RATIO: "measured / predicted saving",
    ROUND_MS_FUSION_ON: "draft+verify round ms of the fusion-on arm (step times, the lowest concurrency)",
    ROUND_MS_FUSION_OFF: "the same of the fusion-off arm",
    VERIFY_ALLREDUCE_NORM_MS_FUSION_ON: "all-reduce + add+RMSNorm kernel ms in verify, fusion-on arm (profiler)",
    VERIFY_ALLREDUCE_NORM_MS_FUSION_OFF: "the same of the fusion-off arm",
    API: "the API family measured: generate (SGLang's /generate) or openai (completions, chat)",
    ENGINE: "what served the speculative arm: 'sglang 0.5.9', 'vllm 0.18.0', 'openai-compatible'",
    TOK_S_C1: "c=1 median output tok/s of the speculative arm",
    BASELINE_TOK_S_C1: "c=1 median output tok/s of the baseline arm",
    TTFT_MS_P50: "c=1 median over repeats of each run's p50 time to first token, ms",
    TPOT_MS_P50: "c=1 median over repeats of each run's p50 time per output token, ms",
    ITL_MS_P99: "c=1 median over repeats of each run's p99 inter-chunk latency, ms (None: not streamed)",
    PASSED: "the verdict passed",
}

CONTEXTS = "contexts"
GRID = "grid"
FIRST_BURST_MIN_RATIO = "first_burst_min_ratio"
GRID_PASSED = "grid_passed"
GRID_FAILED = "grid_failed"

# a grid receipt's summary adds these (grid_verdict.grid_summary), in the receipt's order
GRID_SUMMARY: dict[str, str] = {
    CONTEXTS: "[workload] contexts: the prompt lengths of the grid's rows",
    GRID: "the first verdict arm's cells, one object each (grid_verdict.COMPACT's keys)",
    FIRST_BURST_MIN_RATIO: "verdict.first_burst_min_ratio (None: the first burst is not checked)",
    GRID_PASSED: "the cells whose checks passed, as 'context x concurrency'",
    GRID_FAILED: "the cells where a check failed, the same way",
}

DECLARED: frozenset[str] = frozenset(SUMMARY) | frozenset(GRID_SUMMARY)
