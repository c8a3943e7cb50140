"""`bench allreduce`: in-graph all-reduce latency per backend, one process per GPU (harness, worker), checked
against NCCL (correctness), and the tuner's dispatch table (report; the table itself is box/allreduce_table)."""
