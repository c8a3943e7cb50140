"""Configuration of the lab-line GPU suite (from the environment), its global deadline, its facts file and its
progress log. Imports nothing heavy: CPU CI collects this directory too (and deselects it: marker `gpu`).

    SGLB_LAB_TARGET   target model dir (default /tmp/lab/target; the target-shaped pair: /tmp/lab61/target)
    SGLB_LAB_DRAFT    EAGLE-3 draft dir (default /tmp/lab/draft; the target-shaped pair: /tmp/lab61/draft)
    SGLB_LAB_DRAFT_KIND  which draft that is (../lab_accept.py): constructed (the default, exact) or miss (the
                      target-shaped pair's /tmp/lab61/draft); the accept length expected follows from it
    SGLB_LAB_LAYERS   the target's layer count the run is meant for (optional; 61 for the target-shaped pair):
                      the fused kernels expected per verify step are then 2 x SGLB_LAB_LAYERS - 1, whatever the
                      target's config.json says, so a run on the wrong pair fails instead of passing on its own
                      count
    SGLB_OUT          artifacts: facts.json, progress.log, server logs, traces, rank logs
                      (default /tmp/sglb-gpu-suite)
    SGLB_DEADLINE_S   seconds from collection for the whole suite (default 480): what does not fit is skipped
    SGLB_PYTHON       interpreter for servers and rank workers (default: this one)
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# the GPU suites' shared modules (../suite_env.py, ../lab_accept.py), importable wherever this one is imported from
_GPU_TESTS = str(Path(__file__).resolve().parents[1])
if _GPU_TESTS not in sys.path:
    sys.path.append(_GPU_TESTS)
import suite_env  # noqa: E402

FACTS_SCHEMA = "sglang-blackwell/lab-gpu-suite-facts/1"


@dataclass(frozen=True)
class LabConfig(suite_env.SuiteConfig):
    layers: int | None = None  # SGLB_LAB_LAYERS: the layer count expected of the target (None: its own)
    DEFAULT_OUT = "/tmp/sglb-gpu-suite"
    # the rules every suite gets, and torch symm-mem on its CUDA backend (as proven)
    SAFE_ENV = {**suite_env.SAFE_ENV, "TORCH_SYMMMEM": "CUDA"}

    @classmethod
    def from_env(cls) -> LabConfig:
        deadline = suite_env.deadline_from_env()
        layers = os.environ.get("SGLB_LAB_LAYERS", "")
        if layers and not (layers.isdigit() and int(layers) >= 1):
            raise ValueError(f"SGLB_LAB_LAYERS={layers!r}: expected a whole number of layers >= 1")
        return cls(**cls.common_from_env(deadline), layers=int(layers) if layers else None)


class Facts(suite_env.FactsFile):
    """The lab-line suite's facts (suite_env.FactsFile): its config, the arms, the two-process check. The receipt
    is built from this file."""

    def __init__(self, path: Path, config: LabConfig):
        super().__init__(path, FACTS_SCHEMA,
                         {"target": str(config.target), "draft": str(config.draft), "draft_kind": config.draft_kind,
                          "out": str(config.out), "deadline_s": config.deadline_s, "python": config.python,
                          "layers": config.layers},
                         arms={}, dist=None)

    def set(self, key: str, value: Any) -> None:
        self.data[key] = value
        self.save()

    def set_arm(self, name: str, value: dict[str, Any]) -> None:
        self.data["arms"][name] = value
        self.save()


def read_json(path: Path) -> Any:
    return json.loads(path.read_text())


def model_config(model_dir: Path) -> dict[str, Any]:
    return read_json(model_dir / "config.json")
