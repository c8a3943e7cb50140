# `make`             build the patched wheels for the default base (or BASE=...) and print the patch report
# `make test`        ruff + the CPU test suite (what CI runs)
# `make image-test`  build docker/Dockerfile with buildah on a Debian stand-in base and test the image (root,
#                    Debian's buildah + debootstrap; a few minutes; not part of `make test`; .ci/run runs it).
#                    Where it cannot run it says `image-test: NOT RUN: ...` and fails (exit 2); it is skipped, and
#                    says so, only when asked: `make image-test SGLANG_BLACKWELL_IMAGE_TEST=0`
PY     ?= python3
VENV   ?= .venv
BASE   ?=
OUT    ?= dist
PYTEST_ARGS ?=
# `make test` runs the suite on the machine's cores plus one (pytest-xdist, at most 4 workers: each holds its own
# probe zygote with torch imported; the extra worker runs while the others wait on servers and subprocesses: on a
# 2-core machine pytest took 610 s with 3 workers against 704 s with 2, 2026-12-07), a test file per worker at a
# time (--dist loadfile: a file's module fixtures are computed once, as in a serial run), the longest files first
# (test/support/worker_order.py, by the seconds each file took; xdist's own reorder would put the probes last).
# PYTEST_JOBS= runs it in one process.
PYTEST_WORKERS := $(shell n=$$(nproc 2>/dev/null || echo 1); n=$$((n + 1)); [ $$n -gt 4 ] && n=4; echo $$n)
PYTEST_JOBS ?= -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder
# One thread per process for the BLAS / OpenMP pools of torch and numpy (a value of yours in the environment wins):
# the workers already fill the cores, and a pool's threads spin while they wait. Measured on 2 cores: P8's kernel
# cases under Triton's interpreter took 49.3 s of CPU for 32.7 s of wall with the default pool, 32.2 s for 32.2 s
# with one thread (docs/verification.md, "Where make test's time goes").
OMP_NUM_THREADS ?= 1
OPENBLAS_NUM_THREADS ?= 1
MKL_NUM_THREADS ?= 1
BIN     = $(VENV)/bin
BASE_ARG = $(if $(BASE),--base $(BASE),)
# The test environment's torch is PyTorch's CPU build, on purpose: test/constraints.txt pins it with its +cpu
# label, which no PyPI release carries (PyPI's Linux torch is a CUDA build), and this is where that wheel comes
# from: PyTorch's CPU wheel index, or, on our machines (they reach no index but PyPI), the copy of that wheel in
# /opt/wheels. torch's own dependencies come from PyPI.
TORCH_CPU_WHEELS ?= /opt/wheels
TORCH_CPU_SOURCE ?= $(if $(wildcard $(TORCH_CPU_WHEELS)/torch-*+cpu-*.whl),--find-links $(TORCH_CPU_WHEELS),--extra-index-url https://download.pytorch.org/whl/cpu)

.PHONY: all build test image-test image-test-run lint check clean
all: build

# The venv's pip must be whole before it is used: a Ctrl-C during `pip install --upgrade pip` leaves it half old,
# half new (pip does not roll back on an interrupt), and every later pip run fails with an ImportError. PIP_WHOLE
# checks, without importing pip, that exactly one pip is installed and that every file its RECORD lists is there
# with that sha256; a venv that fails it is made again from scratch (`venv --clear`), saying so. A $(VENV) that is no
# venv at all (no pyvenv.cfg) is not ours to clear: refused.
define PIP_WHOLE
import base64, hashlib, importlib.metadata as md, sys
pips = [d for d in md.distributions() if (d.metadata["Name"] or "").lower() == "pip"]
if len(pips) != 1:
    sys.exit(f"{len(pips)} pip installations, not one")
for f in pips[0].files or sys.exit("pip has no RECORD"):
    if f.hash is None:
        continue
    try:
        data = f.locate().read_bytes()
    except OSError:
        sys.exit(f"{f} is missing")
    if base64.urlsafe_b64encode(hashlib.new(f.hash.mode, data).digest()).rstrip(b"=").decode() != f.hash.value:
        sys.exit(f"{f} is not the file pip installed")
endef
export PIP_WHOLE

$(BIN)/sglang-blackwell: pyproject.toml
	@if [ -e $(VENV) ] && [ ! -f $(VENV)/pyvenv.cfg ]; then \
	  echo "$(VENV): exists and is not a venv (no pyvenv.cfg): move it away, or give make VENV=<another folder>" >&2; \
	  exit 2; fi
	@if [ -e $(VENV) ] && ! why=$$($(BIN)/python -I -c "$$PIP_WHOLE" 2>&1); then \
	  echo "$(VENV): its pip is broken ($${why:-no python}: an interrupted pip upgrade?): making $(VENV) again"; \
	  echo "$(PY) -m venv --clear $(VENV)"; $(PY) -m venv --clear $(VENV); \
	else echo "$(PY) -m venv $(VENV)"; $(PY) -m venv $(VENV); fi
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e .
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
	OMP_NUM_THREADS=$(OMP_NUM_THREADS) OPENBLAS_NUM_THREADS=$(OPENBLAS_NUM_THREADS) MKL_NUM_THREADS=$(MKL_NUM_THREADS) \
	  $(BIN)/pytest -m "not gpu and not image" $(PYTEST_JOBS) $(PYTEST_ARGS)

# The gate comes first, before the test venv or anything else is built: a missing buildah, debootstrap or root is
# one NOT RUN line and exit 2 (test/support/image_preflight.py), never "11 skipped" and exit 0. The build and the
# tests are a second make, so that nothing of theirs starts before the gate has passed (make -j included).
image-test:
ifeq ($(SGLANG_BLACKWELL_IMAGE_TEST),0)
	@echo "image-test: SKIPPED (asked: SGLANG_BLACKWELL_IMAGE_TEST=0)"
else
	@$(PY) test/support/image_preflight.py
	@$(MAKE) --no-print-directory image-test-run
endif

image-test-run: $(VENV)/.test-deps
	$(BIN)/pytest -m image test/image $(PYTEST_ARGS)

clean:
	rm -rf $(OUT) build *.egg-info
