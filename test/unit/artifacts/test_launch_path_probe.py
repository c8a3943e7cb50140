"""benchmark/lab/launch_path_probe.py, the tool that found the bundle's launch-path dependencies, run for real in
this test environment, which has the `openai` client (and jiter) but no sglang: every sglang step must fail naming
the missing module, the openai client's first calls against the probe's fake endpoint must pass, and each imported
distribution must be attributed to the step that first needed it."""

from __future__ import annotations

import json
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
