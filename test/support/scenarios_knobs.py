"""P7's two knob families in one pair of CPU ranks (one sglang import instead of two): the fusion token cap
through the runner's workspace pre-initialization, then the symm-mem size knobs through the communicator.
The fusion scenario runs first: the symm-mem one simulates a CUDA machine (support.cuda_sim), which the
runner scenario must not see."""

from __future__ import annotations


def allreduce_knob_cases(rank: int, world_size: int) -> dict:
    from support.scenarios_fusion import workspace_at_capture
    from support.scenarios_symm_mem import communicator

    fusion = workspace_at_capture(rank, world_size, cuda_graph_bs=(1, 2, 4, 8, 16), draft_tokens=3)
    return {"fusion": fusion, "symm": communicator(rank, world_size, capability=(12, 0), p2p_atomics=True)}
