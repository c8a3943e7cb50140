"""benchmark/lab/launch_path_probe.py, the tool that found the bundle's launch-path dependencies, run for real in
this test environment, which has the `openai` client (and jiter) but no sglang: every sglang step must fail naming
the missing module, the openai client's first calls against the probe's fake endpoint must pass, and each imported
distribution must be attributed to the step that first needed it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("openai")
pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[3]
PROBE = ROOT / "benchmark" / "lab" / "launch_path_probe.py"
sys.path.insert(0, str(ROOT / "benchmark" / "models"))
import lab_tokenizer  # noqa: E402


def test_probe_names_what_is_missing_and_where_each_distribution_came_from(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    for name, text in lab_tokenizer.tokenizer_files(1024, 100, 256).items():
        (model / name).write_text(text)
    (model / "config.json").write_text(json.dumps({"vocab_size": 1024, "eos_token_id": 1}))
    out = tmp_path / "probe.json"
    r = subprocess.run([sys.executable, str(PROBE), "--tokenizer", str(model), "--cpu", "--out", str(out)],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    if "sglang" not in r.stdout:
        pytest.fail(r.stdout + r.stderr)
    assert r.returncode == 1
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    assert summary["ok"] is False and summary["missing_modules"] == ["sglang"]
    res = json.loads(out.read_text())
    steps = res["steps"]
    assert steps["openai client"]["ok"] is True and steps["openai client"]["openai"]
    assert steps["import sglang.launch_server"] == {**steps["import sglang.launch_server"], "ok": False,
                                                    "missing": "sglang"}
    assert steps["grammar backend"]["ok"] is False and "sglang" in steps["grammar backend"]["error"]
    dists = res["distributions"]
    assert dists["jiter"]["first_needed_by"] == "openai client"  # imported by the client's first call
    assert dists["openai"]["version"] and dists["openai"]["from"] is None  # no --site given


# a stand-in for sglang 0.5.14's bench_serving, just what the probe's --bench-serving steps use: --help, get_dataset
# and get_tokenizer, and a run that streams /v1/completions as the sglang-oai backend does and appends its result
# to --output-file (FAKE_BENCH_SHORT=k: k requests fewer, a run that lost requests)
FAKE_BENCH = '''
import argparse, json, os, sys, types, urllib.request

def get_tokenizer(path):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(path)

def get_dataset(args, tok, model_id=None):
    n = args.random_input_len - tok.num_special_tokens_to_add()
    return [types.SimpleNamespace(prompt=tok.decode([5 + (i + j) % 50 for j in range(n)]), prompt_len=n,
                                  output_len=args.random_output_len) for i in range(args.num_prompts)]

def stream(url, model, max_tokens):
    body = {"model": model, "prompt": "a b", "max_tokens": max_tokens, "stream": True, "ignore_eos": True}
    req = urllib.request.Request(url + "/v1/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    return urllib.request.urlopen(req).read().decode().count('"text"')

if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    for a in ("--backend", "--dataset-name", "--tokenizer", "--base-url", "--output-file"):
        ap.add_argument(a)
    for a in ("--random-input-len", "--random-output-len", "--num-prompts", "--max-concurrency"):
        ap.add_argument(a, type=int)
    ap.add_argument("--random-range-ratio", type=float)
    a = ap.parse_args()
    model = json.load(urllib.request.urlopen(a.base_url + "/v1/models"))["data"][0]["id"]
    stream(a.base_url, model, 32)  # the warmup request
    n = a.num_prompts - int(os.environ.get("FAKE_BENCH_SHORT", "0"))
    out = sum(stream(a.base_url, model, a.random_output_len) for _ in range(n))
    with open(a.output_file, "a") as f:
        f.write(json.dumps({"completed": n, "total_input_tokens": n * a.random_input_len, "total_output_tokens": out,
                            "output_throughput": 1.0, "duration": 1.0}) + "\\n")
'''


@pytest.mark.parametrize("short", [0, 1])
def test_bench_serving_steps_run_the_module_against_the_fake_server(tmp_path, short):
    """--bench-serving: `python -m sglang.bench_serving --help`, its get_dataset and a run against the fake
    OpenAI server, each checked (a run that completed fewer requests fails); with the stand-in sglang above."""
    model = tmp_path / "model"
    model.mkdir()
    for name, text in lab_tokenizer.tokenizer_files(1024, 100, 256).items():
        (model / name).write_text(text)
    (model / "config.json").write_text(json.dumps({"vocab_size": 1024, "eos_token_id": 1}))
    pkg = tmp_path / "site" / "sglang"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "bench_serving.py").write_text(FAKE_BENCH)
    out = tmp_path / "probe.json"
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site"), "FAKE_BENCH_SHORT": str(short)}
    r = subprocess.run([sys.executable, str(PROBE), "--tokenizer", str(model), "--cpu", "--bench-serving",
                        "--out", str(out)], capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    if not out.exists():
        pytest.fail(r.stdout + r.stderr)
    steps = json.loads(out.read_text())["steps"]
    assert steps["bench_serving --help"]["ok"] is True
    assert steps["bench_serving random-ids dataset"] == {**steps["bench_serving random-ids dataset"], "ok": True,
                                                         "rows": 8, "prompt_len": 2048, "output_len": 256}
    run = steps["bench_serving run"]
    if short:
        assert run["ok"] is False and "completed 7" in run["error"]
    else:
        assert run == {**run, "ok": True, "requests": 9, "completed": 8, "total_output_tokens": 8 * 256}
    assert steps["import sglang.launch_server"]["ok"] is False  # the stand-in has only bench_serving
