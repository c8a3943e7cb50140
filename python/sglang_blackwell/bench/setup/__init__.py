"""`sglang-blackwell bench setup`: the README's set-up steps (`make`, `make test`, `make image-test`) timed in a
fresh clone, with the machine, its load and the cache state; a `bench-setup` receipt, and the README block the
set-up figures come from (`readme_block.py`, written by `bench table --update README.md`)."""
