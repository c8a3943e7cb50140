"""`bench setup` for real against a tiny git repository whose Makefile stands in for ours (its targets sleep, echo a
pytest summary line and write a JUnit XML file): a real `git clone`, real `make` processes, real timing. The
receipt's fields, pytest's counts and the probes' share, the caches measured before and after, the refusals of bad
input (exit 2, nothing written), a failing step (its exit code recorded, the rest not run, exit 1), a step past its
deadline, and the README block made from the receipt by `bench table --update`; and the repository's own README
block is the one its newest set-up receipt gives."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_blackwell import procs
from sglang_blackwell.bench.eagle3.readme_table import BEGIN as RESULTS_BEGIN
from sglang_blackwell.bench.eagle3.readme_table import END as RESULTS_END
from sglang_blackwell.bench.eagle3.readme_table import current_block
from sglang_blackwell.bench.setup import readme_block
from sglang_blackwell.bench.setup.pytest_output import summary_counts
from sglang_blackwell.cli import main
from sglang_blackwell.receipts import validate_receipt

REPO = Path(__file__).resolve().parents[4]

JUNIT_CASES = [("test.unit.patches.test_p1_gate", "a", "0.30"), ("test.unit.patches.test_p2_x.TestY", "b", "0.05"),
               ("test.unit.patchesque", "c", "0.01"), ("test.unit.box.test_doctor", "d", "0.04")]
# $(JUNIT): the path bench setup hands over in PYTEST_ARGS=--junitxml=PATH; FAIL_MAKE / HANG_MAKE from the env
MAKEFILE = """\
.PHONY: all test image-test
JUNIT = $(patsubst --junitxml=%,%,$(filter --junitxml=%,$(PYTEST_ARGS)))
all:
\t@test ! -e untracked.txt || { echo "untracked.txt in the clone: not a fresh clone"; exit 9; }
\t@if [ -n "$$HANG_MAKE" ]; then echo $$$$ > "$$HANG_MAKE"; exec sleep 30; fi
\t@if [ -n "$$FAIL_MAKE" ]; then echo "error: the build broke"; exit 3; fi
\t@sleep 0.3
\t@echo wheel > "$$SGLANG_BLACKWELL_CACHE/downloaded.whl"
\t@mkdir -p "$$PIP_CACHE_DIR/http-v2" && echo blob > "$$PIP_CACHE_DIR/http-v2/blob"
\t@echo built
test:
\t@sleep 0.2
\t@echo "All checks passed!"
\t@echo "2 workers [4 items]"
\t@printf '\\033[32m==== 3 passed, 1 skipped, 2 warnings in 0.20s ====\\033[0m\\n'
\t@printf '%s\\n' '<testsuites><testsuite name="pytest">' CASES '</testsuite></testsuites>' > $(JUNIT)
"""


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.invalid",
                           *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cases = " ".join(f"'<testcase classname=\"{c}\" name=\"{n}\" time=\"{t}\"/>'" for c, n, t in JUNIT_CASES)
    r = tmp_path / "repo"
    r.mkdir()
    (r / "Makefile").write_text(MAKEFILE.replace("CASES", cases))
    (r / "data.txt").write_text("committed\n")
    _git(r, "init", "-q")
    _git(r, "add", "Makefile", "data.txt")
    _git(r, "commit", "-q", "-m", "fake project")
    (r / "untracked.txt").write_text("not in the commit\n")  # untracked: no dirty tree, and never in the clone
    pip_cache = tmp_path / "pip-cache"
    (pip_cache / "selfcheck").mkdir(parents=True)
    (pip_cache / "selfcheck" / "stamp").write_text("{}")  # pip's version check: no download, still cold
    monkeypatch.setenv("PIP_CACHE_DIR", str(pip_cache))
    ours = tmp_path / "our-cache"
    ours.mkdir()
    (ours / "old.whl").write_text("x")  # warm
    monkeypatch.setenv("SGLANG_BLACKWELL_CACHE", str(ours))
    for v in ("FAIL_MAKE", "HANG_MAKE", "MAKEFLAGS"):
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setenv("PY", sys.executable)  # the Makefile's PY: its version and pip's cache are asked of it
    (tmp_path / "work").mkdir()
    return r


def _bench(tmp_path: Path, repo: Path, *args: str) -> int:
    argv = ["bench", "setup", "--repo", str(repo), "--out", str(tmp_path / "out"), "--workdir",
            str(tmp_path / "work"), *args]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys, "argv", ["sglang-blackwell", *argv])  # what the receipt's `command` records
        return main(argv)


def _receipts(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "out").glob("*.json")) if (tmp_path / "out").exists() else []


def test_fresh_clone_run_records_steps_machine_caches_and_the_readme_block(repo: Path, tmp_path: Path) -> None:
    assert _bench(tmp_path, repo, "--steps", "test,make") == 0
    (path,) = _receipts(tmp_path)
    assert re.fullmatch(r"bench-setup_\d{8}T\d{6}Z\.json", path.name)
    r = json.loads(path.read_text())
    assert validate_receipt(r) == [] and r["kind"] == "bench-setup"
    head = _git(repo, "rev-parse", "HEAD")
    assert r["git_commit"] == head and r["source"]["commit"] == head and r["source"]["dirty"] is False
    assert r["command"][:3] == ["sglang-blackwell", "bench", "setup"] and r["command"][-2:] == ["--steps", "test,make"]
    make, test = r["steps"]  # the README's order, whatever order --steps gives
    assert make["name"] == "make" and make["command"] == ["make"] and make["exit_code"] == 0
    assert make["timed_out"] is False and 0.3 <= make["wall_s"] < 10
    assert make["output_tail"][-1] == "built" and "pytest" not in make
    assert test["command"] == ["make", "test", "PYTEST_ARGS=--junitxml=../logs/test.junit.xml"]
    assert test["exit_code"] == 0 and 0.2 <= test["wall_s"] < 10
    p = test["pytest"]
    assert (p["passed"], p["skipped"], p["failed"], p["errors"], p["warnings"], p["seconds"]) == (3, 1, 0, 0, 2, 0.2)
    assert p["workers"] == 2
    probes = test["probes"]  # test.unit.patchesque is not under test/unit/patches/
    assert (probes["tests"], probes["seconds"], probes["all_tests"], probes["all_seconds"]) == (2, 0.35, 4, 0.4)
    # two workers: 0.4 s of test time in 0.2 s of pytest's; the probes' share is of the tests' time, not 0.35 / 0.2
    assert probes["share_of_tests"] == 0.875 and probes["per_pytest_s"] == 1.75
    assert probes["per_step_s"] == round(0.35 / test["wall_s"], 3)
    for step in (make, test):
        assert len(step["load_before"]) == 3 and len(step["load_after"]) == 3
    m = r["machine"]
    assert m["nproc"] == len(os.sched_getaffinity(0)) and m["cpus"] == os.cpu_count() and m["memory_gib"] > 0
    assert m["cpu_model"] and len(m["load"]) == 3
    v = r["versions"]
    assert v["make"].startswith("GNU Make") and v["git"] and re.fullmatch(r"3\.\d+\.\d+.*", v["python"])
    before, after = r["caches"]["before"], r["caches"]["after"]
    assert (before["pip"]["state"], before["sglang-blackwell"]["state"], before["state"]) == ("cold", "warm", "mixed")
    assert before["pip"]["path"] == str(tmp_path / "pip-cache") and before["pip"]["files"] == 0
    assert before["pip"]["parts"] == {"selfcheck": {"files": 1, "bytes": 2}}
    assert (after["pip"]["state"], after["pip"]["files"], after["state"]) == ("warm", 1, "warm")  # make downloaded
    assert (before["sglang-blackwell"]["files"], after["sglang-blackwell"]["files"]) == (1, 2)
    s = r["summary"]
    assert s["passed"] is True and s["not_run"] == [] and s["cache"] == "mixed" and s["nproc"] == m["nproc"]
    assert s["steps"]["test"]["pytest"]["passed"] == 3 and "line" not in s["steps"]["test"]["pytest"]
    assert not list((tmp_path / "work").iterdir())  # the clone is gone

    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n{RESULTS_BEGIN}\n{RESULTS_END}\n\nSet-up:\n{readme_block.BEGIN}\nstale\n"
                      f"{readme_block.END}\ntail\n")
    assert main(["bench", "table", "--results", str(tmp_path / "out"), "--update", str(readme)]) == 0
    block = current_block(readme, readme_block.BEGIN, readme_block.END).splitlines()
    assert block[0].startswith(f"A fresh clone of `{head[:12]}` on {m['cpu_model']} ({m['nproc']} cores, ")
    assert block[0].endswith(f", pip's cache cold, ~/.cache/sglang-blackwell warm, {r['created'][:10]} "
                             f"([{path.name}](out/{path.name})):")
    assert re.fullmatch(r"- `make`: 0\.\d s", block[2])
    assert re.fullmatch(r"- `make test`: \d\.\d s \(3 passed, 1 skipped, 0 failed; the per-patch probes in "
                        r"`test/unit/patches/` \(2 tests\) 88% of the tests' time; pytest 0\.2 s on 2 workers\)",
                        block[3])
    assert block[4] == "- `make image-test`: not measured in this run"
    assert block[6] == f"Measured by `{' '.join(r['command'])}`."
    assert "stale" not in readme.read_text() and readme.read_text().endswith(f"{readme_block.END}\ntail\n")


def test_a_failing_step_is_recorded_and_the_rest_not_run(repo: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    (repo / "data.txt").write_text("changed, not committed\n")
    monkeypatch.setenv("FAIL_MAKE", "1")
    assert _bench(tmp_path, repo, "--steps", "make,test", "--allow-dirty") == 1
    (path,) = _receipts(tmp_path)
    r = json.loads(path.read_text())
    make, test = r["steps"]
    assert make["exit_code"] == 2 and make["output_tail"][-2:] == [  # GNU make: 2 when a recipe fails
        "error: the build broke", "make: *** [Makefile:6: all] Error 3"]
    assert test == {"name": "test", "command": ["make", "test"], "not_run": "`make` failed"}
    assert r["summary"]["passed"] is False and r["summary"]["not_run"] == ["test"]
    assert r["source"]["dirty"] is True and r["source"]["changed"] == ["data.txt"]
    lines = readme_block.markdown(path, r, None).splitlines()
    assert "(`--allow-dirty`: the checkout had uncommitted changes, the clone not)" in lines[0]
    assert re.fullmatch(r"- `make`: \*\*failed\*\* \(exit 2\) after \d\.\d s", lines[2])
    assert lines[3] == "- `make test`: not run (`make` failed)"


def test_a_step_past_its_deadline_is_stopped(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pid_file = tmp_path / "hang.pid"
    monkeypatch.setenv("HANG_MAKE", str(pid_file))  # the recipe's shell writes its pid, then becomes `sleep 30`
    assert _bench(tmp_path, repo, "--steps", "make", "--step-timeout-s", "0.5") == 1
    (make,) = json.loads(_receipts(tmp_path)[0].read_text())["steps"]
    assert make["timed_out"] is True and make["exit_code"] is None and 0.5 <= make["wall_s"] < 15
    assert not procs.alive(int(pid_file.read_text()))  # the step's whole session went down


@pytest.mark.parametrize(("args", "says"), [
    (["--steps", "make,docs"], "--steps make,docs: unknown step 'docs' (known: make, test, image-test)"),
    (["--steps", "make,make"], "--steps make,make: make given twice"),
    (["--step-timeout-s", "0"], "--step-timeout-s 0: must be > 0"),
    (["--out", "{repo}/data.txt"], "--out {repo}/data.txt: not a directory"),
])
def test_bad_input_exits_2_and_writes_nothing(repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              args: list[str], says: str) -> None:
    assert _bench(tmp_path, repo, *[a.format(repo=repo) for a in args]) == 2
    assert capsys.readouterr().err.strip() == f"sglang-blackwell bench: error: {says.format(repo=repo)}"
    assert _receipts(tmp_path) == [] and not list((tmp_path / "work").iterdir())


def test_a_dirty_tree_or_no_checkout_is_refused(repo: Path, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    (repo / "data.txt").write_text("changed, not committed\n")
    assert _bench(tmp_path, repo) == 2
    err = capsys.readouterr().err
    commit = _git(repo, "rev-parse", "HEAD")[:12]
    assert err.strip() == (f"sglang-blackwell bench: error: --repo {repo}: 1 tracked file(s) with uncommitted "
                           f"changes (data.txt): a fresh clone of {commit} would not have them; commit them, or "
                           f"give --allow-dirty to measure {commit} anyway")
    plain = tmp_path / "plain"
    plain.mkdir()
    assert _bench(tmp_path, plain) == 2
    assert f"--repo {plain}: not a git checkout (fatal: not a git repository" in capsys.readouterr().err
    assert _receipts(tmp_path) == [] and not list((tmp_path / "work").iterdir())


@pytest.mark.parametrize(("output", "counts"), [
    ("x\n== 1039 passed, 10 skipped, 3 warnings in 1197.12s (0:19:57) ==\n",
     {"passed": 1039, "skipped": 10, "failed": 0, "errors": 0, "warnings": 3, "seconds": 1197.12}),
    ("1 failed, 2 passed, 1 error, 4 deselected in 3.20s\nmake: *** [Makefile:9: test] Error 1\n",
     {"passed": 2, "failed": 1, "errors": 1, "skipped": 0, "deselected": 4, "seconds": 3.2}),
    ("\x1b[33m===== no tests ran in 0.01s =====\x1b[0m", {"passed": 0, "failed": 0, "skipped": 0, "errors": 0}),
    ("== 3 passed in 1.0s ==\n== 2 passed, 11 skipped in 9.5s ==\n", {"passed": 2, "skipped": 11, "seconds": 9.5}),
    ("== 3 passed in 1.0s ==\nbuilt 3 wheels in 2.0s\n", {"passed": 3, "seconds": 1.0}),  # not pytest's line
    ("ruff: All checks passed!\nmake: *** [Makefile:3: lint] Error 1\n", None),
])
def test_pytest_summary_line(output: str, counts: dict | None) -> None:
    got = summary_counts(output)
    if counts is None:
        assert got is None
    else:
        assert got is not None and {k: got.get(k) for k in counts} == counts


def test_the_readme_block_is_the_newest_setup_receipt() -> None:
    readme = REPO / "README.md"
    assert readme_block.BEGIN in readme.read_text(), "README.md has no set-up block (<!-- bench-setup:begin -->)"
    assert current_block(readme, readme_block.BEGIN, readme_block.END) == \
        readme_block.block(REPO / "benchmark" / "results", readme.parent), \
        "README.md's set-up block is stale: run `sglang-blackwell bench table --update README.md`"
