"""What a GPU test measured, beside its verdict: one JSON line per record in $SGLB_GPU_RECORD (when set), so that
a lab run's receipt holds each case's errors against its bound, not only "passed"."""

from __future__ import annotations

import json
import os


def record(name: str, **values) -> None:
    path = os.environ.get("SGLB_GPU_RECORD")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"test": name, **values}) + "\n")
