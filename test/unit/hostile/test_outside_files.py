"""Hostile input, round 3 class 6 (part) and class 8 (parts) (issue 32): files and paths from outside.

- doctor and `nccl show` read NCCL's config files without blocking and bounded: a FIFO as NCCL_CONF_FILE or
  ~/.nccl.conf is not opened for a blocking read (they hung), a 3 GB file is not read whole (sparse here), and each
  is one line naming the file; a name too long to look up is one line too (it was an "unexpected OSError").
- `serve --dry-run --config` refuses a deeply nested YAML file (a RecursionError reached the net) and a
  billion-laughs one (its aliases expanded into every argument) in one line naming the file.
- `bench setup` refuses a too-long --out, --workdir or --repo by name (an "unexpected OSError").
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from support.hostile import Case, assert_clean

from .test_bench_serve_doctor import SERVE_ENV, _sglang_here

LONG = "/tmp/" + "a" * 300 + "/" + "b" * 3000  # a component and a whole name too long for the kernel


def says(*needles: str, stream: str = "stdout") -> Callable[[Path, subprocess.CompletedProcess], str | None]:
    def after(tmp: Path, r: subprocess.CompletedProcess) -> str | None:
        out = getattr(r, stream)
        missing = [n.replace("{tmp}", str(tmp)) for n in needles if n.replace("{tmp}", str(tmp)) not in out]
        return f"{stream} lacks {missing}: {out[-1500:]}" if missing else None
    return after


def fifo(name: str) -> Callable[[Path], None]:
    def setup(tmp: Path) -> None:
        (tmp / name).parent.mkdir(parents=True, exist_ok=True)
        os.mkfifo(tmp / name)
    return setup


def sparse(name: str, size: int = 3 << 30) -> Callable[[Path], None]:
    def setup(tmp: Path) -> None:
        with open(tmp / name, "wb") as f:
            f.truncate(size)  # 3 GB that take no disk
    return setup


FIFO_LINE = "a FIFO, not a regular file: not read (NCCL would wait on it for a writer)"
BIG_LINE = f"{3 << 30} bytes, more than 1048576: not read"


def show(id: str, env: dict[str, str], setup: Callable[[Path], None] | None, *needles: str) -> Case:
    return Case(id, "32.6", ["nccl", "show"], rc=0, env={"HOME": "{tmp}/home", **env}, setup=setup,
                after=says(*needles), timeout=60)


def doctor(id: str, env: dict[str, str], setup: Callable[[Path], None] | None, *needles: str) -> Case:
    return Case(id, "32.6", ["doctor", "--out", "{tmp}/d.json"], rc=1, env={"HOME": "{tmp}/home", **env},
                setup=setup, after=says(*needles), timeout=60)


def in_home(step: Callable[[Path], None]) -> Callable[[Path], None]:
    def setup(tmp: Path) -> None:
        (tmp / "home").mkdir(exist_ok=True)
        step(tmp)
    return setup


CONF = [
    show("show-conf-file-a-fifo", {"NCCL_CONF_FILE": "{tmp}/fifo"}, fifo("fifo"),
         f"{{tmp}}/fifo (NCCL_CONF_FILE): {FIFO_LINE}"),
    show("show-home-conf-a-fifo", {}, fifo("home/.nccl.conf"), f"{{tmp}}/home/.nccl.conf (~/.nccl.conf): {FIFO_LINE}"),
    show("show-conf-file-3-gb", {"NCCL_CONF_FILE": "{tmp}/big.conf"}, sparse("big.conf"),
         f"{{tmp}}/big.conf (NCCL_CONF_FILE): {BIG_LINE}"),
    show("show-conf-file-name-too-long", {"NCCL_CONF_FILE": LONG}, None, "File name too long"),
    doctor("doctor-conf-file-a-fifo", {"NCCL_CONF_FILE": "{tmp}/fifo"}, fifo("fifo"),
           f"{{tmp}}/fifo (NCCL_CONF_FILE): {FIFO_LINE}"),
    doctor("doctor-home-conf-3-gb", {}, in_home(sparse("home/.nccl.conf")),
           f"{{tmp}}/home/.nccl.conf (~/.nccl.conf): {BIG_LINE}"),
]


@pytest.mark.parametrize("case", CONF, ids=[c.id for c in CONF])
def test_nccl_conf_files_are_read_bounded_and_never_block(tmp_path, case):
    assert_clean(case, tmp_path)


# ---- serve --config: a YAML file from outside --------------------------------------------------------------

def laughs(levels: int = 9) -> bytes:
    """A billion laughs: each level an alias list of nine of the level below (9^levels strings once expanded)."""
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return ("\n".join(lines) + "\ntp-size: 2\n").encode()


def yaml_case(id: str, data: bytes, *names: str) -> Case:
    def setup(tmp: Path) -> None:
        _sglang_here(tmp)
        (tmp / "s.yaml").write_bytes(data)
    return Case(id, "32.8", ["serve", "--dry-run", "--", "--model-path", "m", "--config", "{tmp}/s.yaml"],
                names=("{tmp}/s.yaml", *names), setup=setup, env=SERVE_ENV, timeout=60)


YAML = [
    yaml_case("serve-yaml-nested-lists", b"x: " + b"[" * 5000 + b"]" * 5000 + b"\ntp-size: 2\n", "nested too deeply"),
    yaml_case("serve-yaml-nested-maps", b"x: " + b"{a: " * 3000 + b"1" + b"}" * 3000 + b"\ntp-size: 2\n",
              "nested too deeply"),
    yaml_case("serve-yaml-nested-40", b"x: " + b"[" * 40 + b"]" * 40 + b"\ntp-size: 2\n", "nested deeper than 32"),
    yaml_case("serve-yaml-billion-laughs", laughs(), "more than 100000 values once its aliases are expanded"),
    yaml_case("serve-yaml-larger-than-1-mib", b"tp-size: 2\n" + b"# " + b"x" * (1 << 20) + b"\n",
              "larger than 1048576 bytes"),
]


@pytest.mark.parametrize("case", YAML, ids=[c.id for c in YAML])
def test_serve_refuses_a_hostile_yaml_config_in_one_line(tmp_path, case):
    assert_clean(case, tmp_path)


# ---- bench setup: paths too long to look up ----------------------------------------------------------------

def git_repo(tmp: Path) -> None:
    repo = tmp / "repo"
    repo.mkdir()
    (repo / "README.md").write_text("x\n")
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "PATH": os.environ["PATH"], "HOME": str(tmp)}
    for argv in (["init", "-q"], ["add", "README.md"], ["commit", "-qm", "x"]):
        subprocess.run(["git", *argv], cwd=repo, check=True, env=env, capture_output=True)


def setup_case(id: str, flag: str, value: str) -> Case:
    return Case(id, "32.8", ["bench", "setup", "--repo", "{tmp}/repo", "--steps", "make", flag, value],
                names=(flag, "longer than a path can be"), setup=git_repo, watch=("repo",), timeout=60)


TOO_LONG = [
    setup_case("setup-out-too-long", "--out", LONG),
    setup_case("setup-out-component-too-long", "--out", "{tmp}/" + "c" * 300),
    setup_case("setup-workdir-too-long", "--workdir", LONG),
    setup_case("setup-repo-too-long", "--repo", "{tmp}/" + "r" * 300),
]


@pytest.mark.parametrize("case", TOO_LONG, ids=[c.id for c in TOO_LONG])
def test_bench_setup_refuses_a_too_long_path_by_name(tmp_path, case):
    assert_clean(case, tmp_path)
