"""`sglang-blackwell qualify`: one command, one receipt for a user's box. plan (inputs checked, nothing written),
runner (one step's process), steps (doctor, gpu-tests, allreduce, eagle3), receipt (the receipt and the pack),
run (the command); gpu_suite_checks / gpu_suite_receipt serve the lab-line GPU suite."""
