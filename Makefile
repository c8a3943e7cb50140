# `make`             build the patched wheels for the default base (or BASE=...) and print the patch report
# `make test`        ruff + the CPU test suite (what CI runs)
# `make image-test`  build docker/Dockerfile with buildah on a Debian stand-in base and test the image (root,
#                    Debian's buildah + debootstrap; a few minutes; not part of `make test`; .ci/run runs it)
PY     ?= python3
VENV   ?= .venv
BASE   ?=
OUT    ?= dist
PYTEST_ARGS ?=
BIN     = $(VENV)/bin
BASE_ARG = $(if $(BASE),--base $(BASE),)
# The test environment's torch is PyTorch's CPU build, on purpose: test/constraints.txt pins it with its +cpu
# label, which no PyPI release carries (PyPI's Linux torch is a CUDA build), and this is where that wheel comes
# from: PyTorch's CPU wheel index, or, on our machines (they reach no index but PyPI), the copy of that wheel in
# /opt/wheels. torch's own dependencies come from PyPI.
TORCH_CPU_WHEELS ?= /opt/wheels
TORCH_CPU_SOURCE ?= $(if $(wildcard $(TORCH_CPU_WHEELS)/torch-*+cpu-*.whl),--find-links $(TORCH_CPU_WHEELS),--extra-index-url https://download.pytorch.org/whl/cpu)

.PHONY: all build test image-test lint check clean
all: build

$(BIN)/sglang-blackwell: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e .
	touch $@

$(VENV)/.test-deps: $(BIN)/sglang-blackwell test/requirements-upstream.txt test/constraints.txt
	$(BIN)/pip install -q $(TORCH_CPU_SOURCE) -c test/constraints.txt torch
	$(BIN)/pip install -q -e '.[test,gpu,plot]' -c test/constraints.txt
	$(BIN)/pip install -q -r test/requirements-upstream.txt -c test/constraints.txt
	touch $@

build: $(BIN)/sglang-blackwell
	$(BIN)/sglang-blackwell build $(BASE_ARG) --out $(OUT) --report

check: $(BIN)/sglang-blackwell
	$(BIN)/sglang-blackwell check --all

lint: $(VENV)/.test-deps
	$(BIN)/ruff check python test

test: lint
	$(BIN)/pytest -m "not gpu and not image" $(PYTEST_ARGS)

image-test: $(VENV)/.test-deps
	$(BIN)/pytest -m image test/image $(PYTEST_ARGS)

clean:
	rm -rf $(OUT) build *.egg-info
