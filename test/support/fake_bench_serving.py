"""A stand-in for `python -m sglang.bench_serving` (sglang 0.5.14) in CPU tests of `bench eagle3`'s [crosscheck]:
run as `fake_bench_serving.py -m sglang.bench_serving <its flags>` (a test's wrapper script is the "python").

It reads the flags the harness passes, sends --num-prompts streamed /v1/completions requests (text prompts, as
bench_serving's sglang-oai backend does) at --max-concurrency to --base-url, and appends one result line to
--output-file with every key bench_serving.py's `benchmark()` writes, in its order (the figures it cannot know are
null). FAKE_BS_MISSING=<module>: fails at import the way the real tool does when a dependency is missing (its
traceback, `ModuleNotFoundError: No module named '<module>'`, exit 1).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import urllib.request

if os.environ.get("FAKE_BS_MISSING"):
    name = os.environ["FAKE_BS_MISSING"]
    print("Traceback (most recent call last):\n"
          '  File "<frozen runpy>", line 198, in _run_module_as_main\n'
          '  File "/usr/local/lib/python3.12/dist-packages/sglang/bench_serving.py", line 42, in <module>\n'
          "    from sglang.benchmark.datasets import DatasetRow, get_dataset\n"
          '  File "/usr/local/lib/python3.12/dist-packages/sglang/benchmark/datasets/mmmu.py", line 8, in <module>\n'
          "    from datasets import load_dataset\n"
          f"ModuleNotFoundError: No module named '{name}'", file=sys.stderr)
    sys.exit(1)

ap = argparse.ArgumentParser()
ap.add_argument("-m")
ap.add_argument("--backend")
ap.add_argument("--base-url")
ap.add_argument("--dataset-name")
ap.add_argument("--random-input-len", type=int)
ap.add_argument("--random-output-len", type=int)
ap.add_argument("--random-range-ratio", type=float)
ap.add_argument("--num-prompts", type=int)
ap.add_argument("--max-concurrency", type=int)
ap.add_argument("--tokenizer")
ap.add_argument("--output-file")
ap.add_argument("--disable-tqdm", action="store_true")
ap.add_argument("--flush-cache", action="store_true")
a = ap.parse_args()
assert a.m == "sglang.bench_serving" and a.backend == "sglang-oai" and a.dataset_name == "random-ids", sys.argv
model = json.loads(urllib.request.urlopen(a.base_url + "/v1/models", timeout=10).read())["data"][0]["id"]


def one(i: int, out: list) -> None:
    body = {"model": model, "prompt": " ".join(f"w{i}" for _ in range(a.random_input_len)),
            "max_tokens": a.random_output_len, "temperature": 0.0, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    req = urllib.request.Request(a.base_url + "/v1/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=60) as r:
        r.read()
    out.append((time.perf_counter() - t0, a.random_output_len))


done: list = []
queue = list(range(a.num_prompts))
lock = threading.Lock()


def worker() -> None:
    while True:
        with lock:
            if not queue:
                return
            i = queue.pop()
        one(i, done)


t0 = time.perf_counter()
threads = [threading.Thread(target=worker) for _ in range(a.max_concurrency)]
for t in threads:
    t.start()
for t in threads:
    t.join()
duration = time.perf_counter() - t0
e2e = sorted(x[0] * 1e3 for x in done)
out_tokens = sum(x[1] for x in done)
result = {
    "tag": None, "backend": a.backend, "dataset_name": a.dataset_name, "request_rate": float("inf"),
    "max_concurrency": a.max_concurrency, "sharegpt_output_len": None, "random_input_len": a.random_input_len,
    "random_output_len": a.random_output_len, "random_range_ratio": a.random_range_ratio,
    "server_info": None, "duration": duration, "completed": len(done),
    "total_input_tokens": a.random_input_len * len(done), "total_input_text_tokens": a.random_input_len * len(done),
    "total_input_vision_tokens": 0, "total_output_tokens": out_tokens, "total_output_tokens_retokenized": out_tokens,
    "request_throughput": len(done) / duration, "input_throughput": a.random_input_len * len(done) / duration,
    "output_throughput": out_tokens / duration, "total_throughput": None,
    "mean_e2e_latency_ms": sum(e2e) / len(e2e), "median_e2e_latency_ms": e2e[len(e2e) // 2],
    "std_e2e_latency_ms": None, "p90_e2e_latency_ms": None, "p95_e2e_latency_ms": None, "p99_e2e_latency_ms": e2e[-1],
    "mean_ttft_ms": None, "median_ttft_ms": None, "std_ttft_ms": None, "p90_ttft_ms": None, "p95_ttft_ms": None,
    "p99_ttft_ms": None, "mean_tpot_ms": None, "median_tpot_ms": None, "std_tpot_ms": None, "p90_tpot_ms": None,
    "p95_tpot_ms": None, "p99_tpot_ms": None, "mean_itl_ms": None, "median_itl_ms": None, "std_itl_ms": None,
    "p90_itl_ms": None, "p95_itl_ms": None, "p99_itl_ms": None, "concurrency": None, "accept_length": None,
    "max_output_tokens_per_s": None, "max_concurrent_requests": a.max_concurrency,
}
print(f"Starting warmup with 1 sequences...\n{'=' * 50}\nOutput token throughput (tok/s): "
      f"{result['output_throughput']:.2f}")
with open(a.output_file, "a") as f:
    f.write(json.dumps(result) + "\n")
