"""Facts about this machine and what to run on it: GPUs and links (topology, hazards, nvidia_smi), the installed
stack (stackinfo), NCCL tuning and its startup hook (nccl, nccl_hook), which all-reduce path sglang takes
(allreduce_paths) and the tuned dispatch table (allreduce_table), `doctor`, and `serve`."""
