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
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# the GPU suites' shared helpers (../lab_accept.py), importable wherever this module is imported from
_GPU_TESTS = str(Path(__file__).resolve().parents[1])
if _GPU_TESTS not in sys.path:
    sys.path.append(_GPU_TESTS)
from lab_accept import draft_kind  # noqa: E402

T0 = time.monotonic()  # collection time of this directory: the suite's clock starts here

# every process the suite starts gets these (the lab's rule; harmless elsewhere): no NVLink SHARP, no
# multicast in torch symmetric memory, no NVLS in NVSHMEM; torch symm-mem on its CUDA backend (as proven)
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1",
            "TORCH_SYMMMEM": "CUDA"}
FACTS_SCHEMA = "sglang-blackwell/lab-gpu-suite-facts/1"


@dataclass(frozen=True)
class LabConfig:
    target: Path
    draft: Path
    out: Path
    deadline_s: float
    python: str
    layers: int | None = None  # SGLB_LAB_LAYERS: the layer count expected of the target (None: its own)
    draft_kind: str = "constructed"  # SGLB_LAB_DRAFT_KIND (lab_accept.KINDS)

    @classmethod
    def from_env(cls) -> LabConfig:
        raw = os.environ.get("SGLB_DEADLINE_S", "480")
        try:
            deadline = float(raw)
        except ValueError:
            raise ValueError(f"SGLB_DEADLINE_S={raw!r}: expected seconds") from None
        layers = os.environ.get("SGLB_LAB_LAYERS", "")
        if layers and not (layers.isdigit() and int(layers) >= 1):
            raise ValueError(f"SGLB_LAB_LAYERS={layers!r}: expected a whole number of layers >= 1")
        return cls(target=Path(os.environ.get("SGLB_LAB_TARGET", "/tmp/lab/target")),
                   draft=Path(os.environ.get("SGLB_LAB_DRAFT", "/tmp/lab/draft")),
                   out=Path(os.environ.get("SGLB_OUT", "/tmp/sglb-gpu-suite")),
                   deadline_s=deadline, python=os.environ.get("SGLB_PYTHON", sys.executable),
                   layers=int(layers) if layers else None, draft_kind=draft_kind())

    def child_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(SAFE_ENV)
        env["PYTHONUNBUFFERED"] = "1"
        return env


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


class Facts:
    """What the suite measured, saved to SGLB_OUT/facts.json after every update (temp file + rename), so a
    run that is cut off still leaves what it got. The receipt is built from this file."""

    def __init__(self, path: Path, config: LabConfig):
        self.path = path
        self.data: dict[str, Any] = {
            "schema": FACTS_SCHEMA,
            "started_unix": round(time.time(), 1),
            "config": {"target": str(config.target), "draft": str(config.draft), "draft_kind": config.draft_kind,
                       "out": str(config.out), "deadline_s": config.deadline_s, "python": config.python,
                       "layers": config.layers},
            "arms": {},
            "dist": None,
        }
        self.save()

    def set(self, key: str, value: Any) -> None:
        self.data[key] = value
        self.save()

    def set_arm(self, name: str, value: dict[str, Any]) -> None:
        self.data["arms"][name] = value
        self.save()

    def save(self) -> None:
        self.data["elapsed_s"] = round(time.monotonic() - T0, 1)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name("." + self.path.name + ".tmp")
        tmp.write_text(json.dumps(self.data, indent=1, default=str) + "\n")
        os.replace(tmp, self.path)


def read_json(path: Path) -> Any:
    return json.loads(path.read_text())


def model_config(model_dir: Path) -> dict[str, Any]:
    return read_json(model_dir / "config.json")
