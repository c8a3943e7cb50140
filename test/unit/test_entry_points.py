"""Every place that starts one of our modules as a process names a module that exists and runs as a program.

Module paths written as strings are the arrows a reader and every tool cannot see: `python -m sglang_blackwell...`
in the lab scripts, workflows, Makefile, Dockerfile and the package itself, the console script in pyproject.toml,
and the scripts run by file path (the AOT worker, the bundle installer). A module moved without its strings fails
here, not on the GPU lab. Imports of our own modules by string (importlib) are not allowed at all.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path

from sglang_blackwell.tomlio import tomllib

REPO = Path(__file__).resolve().parents[2]
MODULE_RUN = re.compile(r"""-m["',\s]+(sglang_blackwell(?:\.\w+)*)""")


def _launchers() -> list[Path]:
    files = [*REPO.glob("benchmark/**/*.sh"), *REPO.glob("docker/*"), *REPO.glob(".github/workflows/*.yml"),
             REPO / "Makefile", REPO / ".ci" / "run", *REPO.glob("python/**/*.py"), *REPO.glob("test/gpu/**/*.py"),
             *REPO.glob("test/unit/**/*.py"), *REPO.glob("benchmark/**/*.py")]
    return [f for f in files if f.is_file() and f.resolve() != Path(__file__).resolve()]


def module_runs() -> dict[str, list[str]]:
    """module -> where it is started with `-m`."""
    found: dict[str, list[str]] = {}
    for f in _launchers():
        for m in MODULE_RUN.finditer(f.read_text(errors="replace")):
            found.setdefault(m[1], []).append(str(f.relative_to(REPO)))
    return found


def test_the_scan_finds_the_known_launchers():
    runs = module_runs()
    assert "sglang_blackwell.cli" in runs and "sglang_blackwell.qualify.gpu_suite_receipt" in runs
    assert any(w.startswith("benchmark/lab/") for w in runs["sglang_blackwell.cli"])


def test_every_module_started_with_dash_m_exists_and_is_a_program():
    for name, where in module_runs().items():
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.origin, f"{name} (started in {', '.join(sorted(set(where)))}) does not exist"
        src = Path(spec.origin).read_text()
        assert '__name__ == "__main__"' in src, f"{name} has no __main__ block: `python -m {name}` does nothing"


def test_console_script_and_file_run_workers_resolve():
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    for cmd, target in scripts.items():
        mod, fn = target.split(":")
        assert callable(getattr(importlib.import_module(mod), fn)), f"[project.scripts] {cmd} = {target}"
    from sglang_blackwell.artifacts import aot, bundle

    for path in (aot.WORKER, bundle.INSTALLER):
        assert path.is_file(), f"{path} is run by file path and does not exist"


def test_no_import_of_our_own_modules_by_string():
    bad = []
    for f in (REPO / "python").rglob("*.py"):
        for i, line in enumerate(f.read_text().splitlines(), 1):
            if re.search(r"""(import_module|__import__)\(\s*f?["']sglang_blackwell""", line):
                bad.append(f"{f.relative_to(REPO)}:{i}: {line.strip()}")
    assert not bad, "imports by string hide arrows; import the module: " + "; ".join(bad)
