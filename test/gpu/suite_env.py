"""What the GPU suites (labline/, userpath/, hostile/) share of their configuration: the suite's clock, the
environment rules every process they start gets, the settings all read from the environment, the deadline, the
progress log, the facts file, and the flags of a user's TP=1 launch (userpath/ and hostile/ start it). Each suite's
own module (labline/labline_env.py, userpath/userpath_env.py, hostile/hostile_env.py) puts this directory on
sys.path, then subclasses SuiteConfig and FactsFile with its own variables, defaults and schema. Imports nothing
heavy: CPU CI collects the GPU suites too (and deselects them: marker `gpu`). Also shared: require_lab, the
session fixture's skips where the machine cannot run a TP=1 suite, and SuiteEnv, what that fixture hands the tests.

    SGLB_LAB_TARGET      target model dir (default /tmp/lab/target)
    SGLB_LAB_DRAFT       EAGLE-3 draft dir (default /tmp/lab/draft)
    SGLB_LAB_DRAFT_KIND  which draft that is (lab_accept.py): constructed (the default, exact) or miss
    SGLB_OUT             the suite's artifacts (each suite's own default)
    SGLB_DEADLINE_S      seconds from collection for the whole suite (default 480; hostile/ 300): what does not
                         fit is skipped
    SGLB_PYTHON          interpreter for the processes the suite starts (default: this one)
"""

from __future__ import annotations

import importlib.util
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from lab_accept import draft_kind

T0 = time.monotonic()  # collection time of the suite: its clock starts here

# every process a suite starts gets these (the lab's rule; harmless elsewhere): no NVLink SHARP, no multicast in
# torch symmetric memory, no NVLS in NVSHMEM
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


# A user's launch at TP=1: tokenizer, default grammar backend, radix cache and decode CUDA graphs all left at their
# defaults. Two flags differ from sglang's defaults, both for the lab: the bundle's kernel has no FA3 (sglang's
# default MLA backend on Hopper), and the prefill CUDA graph (torch.compile piecewise) would add minutes of compile
# to each start of a 30-minute session; decode graphs are captured up to batch 16 (the tests send at most 4).
USER_FLAGS = ["--attention-backend", "triton", "--cuda-graph-backend-prefill", "disabled",
              "--cuda-graph-max-bs-decode", "16"]
# The EAGLE-3 launch also lowers --mem-fraction-static: at sglang 0.5.14's default the draft's KV pool does not fit
# next to the target's on one GPU (the lab, 2026-12-01: 18.3 GiB asked, 4.4 GiB free; the server dies at start:
# benchmark/results/lab-userpath-2026-12-01-default-mem-fraction-oom.json). A user on one GPU has to do the same.
SPECULATIVE_FLAGS = ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "2", "--speculative-eagle-topk",
                     "1", "--speculative-num-draft-tokens", "3"]  # + draft path
EAGLE3_FLAGS = ["--mem-fraction-static", "0.7", *SPECULATIVE_FLAGS]


def with_value(flags: list[str], flag: str, value: str) -> list[str]:
    """flags with `flag`'s value replaced (the flag must be there)."""
    i = flags.index(flag)
    return [*flags[:i + 1], value, *flags[i + 2:]]


def deadline_from_env(default_s: str = "480") -> float:
    raw = os.environ.get("SGLB_DEADLINE_S", default_s)
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"SGLB_DEADLINE_S={raw!r}: expected seconds") from None


def gpu_count() -> int:
    """How many GPUs nvidia-smi lists (0 without nvidia-smi)."""
    if not shutil.which("nvidia-smi"):
        return 0
    r = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    return sum(1 for ln in r.stdout.splitlines() if ln.startswith("GPU "))


def require_lab(cfg: SuiteConfig, modules: tuple[str, ...]) -> None:
    """Skip the session (pytest.skip, with the reason) where this machine cannot run a TP=1 suite: no GPU that
    nvidia-smi lists, one of `modules` not importable, or a file of the lab pair (cfg.target, cfg.draft) missing."""
    import pytest

    if gpu_count() < 1:
        pytest.skip("needs a CUDA GPU (nvidia-smi lists none)")
    for mod in modules:
        if importlib.util.find_spec(mod) is None:
            pytest.skip(f"{mod} is not importable (PYTHONPATH must hold the installed bundle)")
    for f in (cfg.target / "tokenizer.json", cfg.target / "lab_pair.json", cfg.draft / "config.json"):
        if not f.is_file():
            pytest.skip(f"{f}: missing (generate the lab pair: benchmark/models/gen_lab_pair.py)")


@dataclass(frozen=True)
class SuiteConfig:
    """The settings both suites read; a subclass names its SGLB_OUT default and the environment rules it adds."""

    target: Path
    draft: Path
    out: Path
    deadline_s: float
    python: str
    draft_kind: str = "constructed"  # SGLB_LAB_DRAFT_KIND (lab_accept.KINDS)
    DEFAULT_OUT: ClassVar[str]
    SAFE_ENV: ClassVar[dict[str, str]] = SAFE_ENV

    @classmethod
    def common_from_env(cls, deadline_s: float) -> dict[str, Any]:
        """The shared fields, as keyword arguments of the subclass (SGLB_DEADLINE_S parsed by the caller, first)."""
        return {"target": Path(os.environ.get("SGLB_LAB_TARGET", "/tmp/lab/target")),
                "draft": Path(os.environ.get("SGLB_LAB_DRAFT", "/tmp/lab/draft")),
                "out": Path(os.environ.get("SGLB_OUT", cls.DEFAULT_OUT)), "deadline_s": deadline_s,
                "python": os.environ.get("SGLB_PYTHON", sys.executable), "draft_kind": draft_kind()}

    def child_env(self) -> dict[str, str]:
        return {**os.environ, **self.SAFE_ENV, "PYTHONUNBUFFERED": "1"}

    def deadline(self) -> Deadline:
        """SGLB_DEADLINE_S, counted from T0."""
        return Deadline(self.deadline_s)

    def progress(self) -> Progress:
        return Progress(self.out / "progress.log")


@dataclass(frozen=True)
class ExposedServerConfig(SuiteConfig):
    """A suite whose servers a user exposes (hostile/, soak/): TP=1, reachable beyond loopback (--host 0.0.0.0) with
    --api-key and no --admin-api-key (`serve` then closes the admin endpoints: P12), started as the README tells
    users. A subclass names its flags after the user's (SERVER_FLAGS), and may change the user's (USER) or the
    speculative arm's (SPECULATIVE)."""

    api_key: str = field(default_factory=lambda: secrets.token_hex(16))
    SERVER_FLAGS: ClassVar[list[str]] = []
    USER: ClassVar[list[str]] = USER_FLAGS
    SPECULATIVE: ClassVar[list[str]] = EAGLE3_FLAGS

    def sglang_args(self, port: int, speculative: bool) -> list[str]:
        args = ["--model-path", str(self.target), "--host", "0.0.0.0", "--port", str(port), "--api-key",
                self.api_key, *self.USER, *self.SERVER_FLAGS]
        if speculative:
            args += [*self.SPECULATIVE, "--speculative-draft-model-path", str(self.draft)]
        return args

    def serve_command(self, port: int, speculative: bool) -> list[str]:
        """As the README tells users: `sglang-blackwell serve -- <sglang args>` (TP=1: no --tp)."""
        return [self.python, "-m", "sglang_blackwell.cli", "serve", "--", *self.sglang_args(port, speculative)]

    def masked(self, cmd: list[str]) -> list[str]:
        """cmd with the API key masked (it goes into the facts and the receipt)."""
        return ["<api-key>" if a == self.api_key else a for a in cmd]


class Deadline:
    def __init__(self, total_s: float, t0: float = T0):
        self.total_s, self.t0 = total_s, t0

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def left(self) -> float:
        return self.total_s - self.elapsed()


class Progress:
    """Timestamped lines to the real stderr (pytest does not capture them) and to SGLB_OUT/progress.log."""

    def __init__(self, path: Path):
        self.path = path

    def __call__(self, msg: str) -> None:
        line = f"[{time.monotonic() - T0:6.1f}s] {msg}"
        print(line, file=sys.__stderr__, flush=True)
        with open(self.path, "a") as f:
            f.write(line + "\n")


class FactsFile:
    """What a suite measured, saved to SGLB_OUT/facts.json after every update (temp file + rename), so a run that
    is cut off still leaves what it got: {schema, started_unix, config, <the suite's sections>, elapsed_s}."""

    def __init__(self, path: Path, schema: str, config: dict[str, Any], **sections: Any):
        self.path = path
        self.data: dict[str, Any] = {"schema": schema, "started_unix": round(time.time(), 1), "config": config,
                                     **sections}
        self.save()

    def save(self) -> None:
        self.data["elapsed_s"] = round(time.monotonic() - T0, 1)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name("." + self.path.name + ".tmp")
        tmp.write_text(json.dumps(self.data, indent=1, default=str) + "\n")
        os.replace(tmp, self.path)


C = TypeVar("C", bound=SuiteConfig)
F = TypeVar("F", bound=FactsFile)


@dataclass
class SuiteEnv(Generic[C, F]):
    """What a suite's session fixture `env` hands its tests: the suite's own Config and Facts (the type
    parameters), the deadline and the progress log; a suite subclasses it, adding what it shares besides."""

    cfg: C
    deadline: Deadline
    facts: F
    progress: Progress
