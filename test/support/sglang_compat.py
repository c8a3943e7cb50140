"""What differs between the sglang lines the scenarios run (0.5.9, 0.5.14, 0.5.23), in one place.

sglang >= 0.5.23 keeps its configuration in a process-wide runtime context: a ServerArgs record is `publish`ed
(with the launcher's rank placement), and code reads resolved namespaces (`get_exec().comm...`) and the
parallel layout (`get_parallel()`) from it; distributed groups are built from the published widths. Older lines
read a global ServerArgs set with `set_global_server_args_for_scheduler` and take the TP size as an argument.
"""

from __future__ import annotations

import os


def has_module(name: str) -> bool:
    """Does the sglang tree under test have this module (by file, without importing it)?"""
    import sglang

    rel = name.split(".", 1)[1].replace(".", os.sep)
    root = os.path.dirname(sglang.__file__)
    return os.path.exists(os.path.join(root, rel + ".py")) or os.path.isdir(os.path.join(root, rel))


def runtime_context() -> bool:
    """sglang >= 0.5.23: configuration is published into sglang.srt.runtime_context."""
    return has_module("sglang.srt.runtime_context") and _has_publish()


def _has_publish() -> bool:
    import importlib

    return hasattr(importlib.import_module("sglang.srt.runtime_context"), "publish")


def publish_server_args(rank: int = 0, **fields):
    """sglang >= 0.5.23: a resolved ServerArgs (no model: model_path "dummy" unless given), published for this
    process as rank `rank` of its TP group. Returns the record."""
    from sglang.srt.runtime_context import SpawnRanks, publish
    from sglang.srt.server_args import ServerArgs

    fields.setdefault("model_path", "dummy")
    args = ServerArgs(**fields)
    publish(args, role="test", ranks=SpawnRanks(world_rank=rank, gpu_id=rank))
    return args


def current_rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
