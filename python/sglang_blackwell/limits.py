"""The documented bounds of the numbers users give us (flags, configs), each with why. A value beyond one is a typo
or hostile input: it would end in a MemoryError or an OverflowError, or plan for hardware nobody has. Every reader
refuses it naming the limit (exit 2); `tp_problem` is the one check of a tensor-parallel size (--tp, a config's tp,
sglang's --tp-size as serve reads it).
"""

from __future__ import annotations

import re

MAX_TP = 1024  # GPUs in one tensor-parallel group: beyond any box or cluster sglang runs on
MAX_CONTEXT_TOKENS = 1_048_576  # one prompt: 1M tokens (2^20), the longest context of the models we serve
MAX_CONCURRENCY = 4096  # concurrent requests of one benchmark level (one client thread each)
MAX_CELL_TOKENS = 1 << 27  # prompt token ids one grid cell holds (context x concurrency x rounds): ~1 GB of ids
MAX_OUTPUT_TOKENS = MAX_CONTEXT_TOKENS  # output_len of one request
MAX_SECONDS = 7 * 86_400  # a deadline or timeout: one week (threading and sockets overflow near 1e10 s)

CANONICAL_INT = re.compile(r"0|[1-9][0-9]*")  # how an integer key is written: no sign, no leading zero, no '_'


def tp_problem(value: int) -> str | None:
    """Why `value` is not a tensor-parallel size; None: it is one."""
    return None if 1 <= value <= MAX_TP else f"expected a tensor-parallel size from 1 to {MAX_TP} (GPUs)"
