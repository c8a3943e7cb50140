"""`bench eagle3`: EAGLE-3 against the non-speculative baseline, end to end, servers launched or attached
(harness, config, client, server, sglang_api), judged (verdict), with plots, profiler traces (trace,
trace_kernels) and the README results table (readme_table)."""
