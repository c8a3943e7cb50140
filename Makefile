# `make`       build the patched wheels for the default base (or BASE=...) and print the patch report
# `make test`  ruff + the CPU test suite (what CI runs)
PY     ?= python3
VENV   ?= .venv
BASE   ?=
OUT    ?= dist
PYTEST_ARGS ?=
BIN     = $(VENV)/bin
BASE_ARG = $(if $(BASE),--base $(BASE),)

.PHONY: all build test lint check clean
all: build

$(BIN)/sglang-blackwell: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e .
	touch $@

$(VENV)/.test-deps: $(BIN)/sglang-blackwell test/requirements-upstream.txt test/constraints.txt
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
	$(BIN)/pytest -m "not gpu" $(PYTEST_ARGS)

clean:
	rm -rf $(OUT) build *.egg-info
