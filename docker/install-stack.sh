#!/usr/bin/env bash
# The one install script of the serving image: docker/Dockerfile runs it in the builder stage, and
# test/unit/release/test_install_stack.py runs it in a venv on a CPU machine (CUDA wheels skipped) so CI exercises
# it, as does the image build on a stand-in base (docker/standin-image.sh, `make image-test`).
# Nothing is pinned here: every version, index URL and hash comes from patches/<BASE>/base.toml through the
# sglang-blackwell CLI installed from SRC.
#
# Environment:
#   SRC           sglang-blackwell checkout to install the tool from                        (required)
#   VENV          environment to create; must not exist (removed again if a step fails)    (required)
#   DIST          wheels, build manifest, install record, image labels                      (required)
#   BASE          base line (default: the base whose base.toml says default = true)
#   PYTHON        interpreter the venv is made from (default: python3)
#   CUDA_ARCHS    FlashInfer AOT module archs, e.g. "12.0a" or "12.0a 9.0a"; empty: no AOT modules
#   AOT_MODULES   default trtllm_comm,norm
#   AOT_PYTHON    interpreter that runs FlashInfer's JIT specs (default: the venv's, which has torch by then)
#   NCCL_PROFILE  profile of the NCCL startup block (default pcie-ll). `auto` is refused: it resolves against
#                 the GPUs of the machine running this script, and an image build sees none.
#   SGLANG_BLACKWELL_SKIP_CUDA_WHEELS=1  CPU test mode: no torch/kernel wheels; our wheels go in with --no-deps
#                 (the full pip command is still written to $DIST/install-command.txt)
set -euo pipefail

: "${SRC:?SRC: the sglang-blackwell checkout}" "${VENV:?VENV: the environment to create}" "${DIST:?DIST: output dir}"
PYTHON=${PYTHON:-python3}
CUDA_ARCHS=${CUDA_ARCHS-12.0a}
AOT_MODULES=${AOT_MODULES:-trtllm_comm,norm}
NCCL_PROFILE=${NCCL_PROFILE:-pcie-ll}
SKIP_CUDA=${SGLANG_BLACKWELL_SKIP_CUDA_WHEELS:-0}

say() { printf '== install-stack: %s\n' "$*"; }
die() { printf 'install-stack: error: %s\n' "$*" >&2; exit 2; }

[[ -d $SRC && -f $SRC/pyproject.toml ]] || die "SRC=$SRC is not a sglang-blackwell checkout (no pyproject.toml)"
[[ ! -e $VENV ]] || die "VENV=$VENV exists; refusing to install over it"
[[ $NCCL_PROFILE != auto ]] || die "NCCL_PROFILE=auto resolves against this machine's GPUs and an image build \
sees none (it would pick 'none'): name the profile, e.g. pcie-ll"
[[ $SKIP_CUDA == 0 || $SKIP_CUDA == 1 ]] || die "SGLANG_BLACKWELL_SKIP_CUDA_WHEELS=$SKIP_CUDA: use 0 or 1"

cleanup() {
  local rc=$?
  if [[ $rc -ne 0 ]]; then
    rm -rf "$VENV"
    printf 'install-stack: failed (exit %s); removed %s\n' "$rc" "$VENV" >&2
  fi
}
trap cleanup EXIT

say "venv $VENV from $PYTHON"
"$PYTHON" -m venv "$VENV"
PY=$VENV/bin/python
SB=$VENV/bin/sglang-blackwell
PYVER=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')

say "sglang-blackwell from $SRC"
"$PY" -m pip install --quiet --no-cache-dir "${SRC}[gpu]"
BASE=${BASE:-$("$SB" image facts --get default_base)}

say "patched wheels, base $BASE, Python $PYVER"
"$SB" build --base "$BASE" --python-version "$PYVER" --out "$DIST"
"$SB" install --base "$BASE" --dist "$DIST" --python "$PY" --dry-run > "$DIST/install-command.txt"
if [[ $SKIP_CUDA == 1 ]]; then
  say "CUDA wheels skipped (SGLANG_BLACKWELL_SKIP_CUDA_WHEELS=1): our wheels only, --no-deps"
  "$SB" install --base "$BASE" --dist "$DIST" --python "$PY" --no-deps
else
  say "the stack: $(cat "$DIST/install-command.txt")"
  "$SB" install --base "$BASE" --dist "$DIST" --python "$PY"
fi

verify_aot=()
if [[ -n $CUDA_ARCHS ]]; then
  say "FlashInfer AOT modules $AOT_MODULES for $CUDA_ARCHS"
  "$SB" build --base "$BASE" --python-version "$PYVER" --out "$DIST" \
    --aot "$CUDA_ARCHS" --aot-modules "$AOT_MODULES" --aot-python "${AOT_PYTHON:-$PY}"
  "$SB" install --base "$BASE" --dist "$DIST" --python "$PY" --no-deps
  verify_aot=(--aot "$CUDA_ARCHS")
fi

say "NCCL profile $NCCL_PROFILE"
"$SB" nccl install --profile "$NCCL_PROFILE" --python "$PY"

say "verify"
skip=()
[[ $SKIP_CUDA == 1 ]] && skip=(--skip-cuda-wheels)
"$SB" image verify --base "$BASE" --dist "$DIST" --python "$PY" --nccl-profile "$NCCL_PROFILE" \
  "${verify_aot[@]}" "${skip[@]}"
"$SB" image labels --base "$BASE" --dist "$DIST" > "$DIST/labels.txt"
say "done: $VENV (base $BASE)"
