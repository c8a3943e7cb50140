#!/bin/bash
# The verify issue's lab session on one GPU (nvidia-h200: 1x H200, TP=1) as back-to-back device calls, run from the
# repository root on the lab: P8's kernel on the GPU, then benchmark/lab-kimi61-grid.toml one arm per call (the
# 61-layer pair, contexts 256 / 2048 / 8192 x concurrency 1 / 4 / 16, first burst and warm, OpenAI API). Each step
# writes what comes back into $OUT (at most 8 files) and stays under ~9 minutes:
#
#   A  carry .whl/c1  stage chunk 1; generate the 61-layer pair with the draft that misses by design (/tmp/lab61)
#   B  carry .whl/c2  install the bundle into /tmp/site; P8 on the GPU (test/gpu/test_verify_splitkv_gpu.py: equal to
#                     extend_attention_fwd at 256-32k tokens, bf16 and fp8 KV, CUDA-graph replay at other lengths);
#                     the grid's baseline arm
#   C  (nothing)      the grid's eagle3 arm (P8 and P9 on; after the baseline, so its EAGLE-only kernels are cold)
#   D  (nothing)      the grid's eagle3-p8-p9-off arm (both patches off, a cold Triton cache of its own)
#   B, C and D install the bundle and run the GPU test first when /tmp/site has none (a machine that went cold
#   between calls: carry .whl/c2 then, after step A again).
#   E  (nothing)      P8's kernel benchmark (benchmark/lab/verify_kernel_bench.py, a receipt)       (~1.5-2 min)
#
#   bash benchmark/lab/session_grid.sh A|B|C|D|E
#
# The machine must stay warm between the steps (~30 s): /tmp/bundle, /tmp/site, /tmp/lab61 and /tmp/jit live on it.
# Every process runs with NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export FLASHINFER_CUDA_ARCH_LIST=9.0a FLASHINFER_WORKSPACE_BASE=/tmp/jit/fi TVM_FFI_CACHE_DIR=/tmp/jit/tvmffi
export TRITON_CACHE_DIR=/tmp/jit/triton MAX_JOBS=16
OUT=${OUT:-/tmp/out}
CONFIG=benchmark/lab-kimi61-grid.toml
# shellcheck disable=SC1091  # lib.sh is shellchecked on its own (test_lab_session_tp2.py)
. "$(dirname "$0")/lib.sh"
mkdir -p "$OUT"

stepA() {
  rm -rf /tmp/oA; mkdir -p /tmp/oA
  bash .whl/c1/install.sh --stage /tmp/bundle --stage-only 2>&1 | tee /tmp/oA/stage.log || return 3
  log "generating /tmp/lab61 (kimi61 preset, the draft that misses by design)"
  /usr/bin/time -v timeout 300 python3 benchmark/models/gen_lab_pair.py --out /tmp/lab61 --device cuda \
    --preset kimi61 --draft miss > /tmp/oA/gen-kimi61.json 2> /tmp/oA/gen-kimi61.err
  local rc=$?
  log "gen: exit $rc; $(grep -E 'Elapsed|Maximum resident' /tmp/oA/gen-kimi61.err | tr -s ' ' | tr '\n' ';')"
  du -sh /tmp/lab61/* | tee /tmp/oA/sizes.txt
  tar -czf "$OUT/stepA.tar.gz" -C /tmp/oA .
  return $rc
}

bench_arm() {  # bench_arm ARM TAG DEADLINE: one arm of the grid, everything it wrote (but traces) tarred into $OUT
  local o=/tmp/o$2; rm -rf "$o"
  OUT=$o DEADLINE=$3 TRACES_DIR=/tmp/traces bash benchmark/lab/bench_eagle3.sh "$CONFIG" --arms "$1" --repeats 1 \
    > "/tmp/$2.log" 2>&1
  local rc=$?
  log "$CONFIG --arms $1: exit $rc"; grep -vE '^\s*$' "/tmp/$2.log" | tail -45
  mv "/tmp/$2.log" "$o/" 2>/dev/null
  tar -czf "$OUT/step$2.tar.gz" -C /tmp "o$2"
  return $rc
}

install_and_test() {  # the bundle into /tmp/site (once per machine: c2 carried), then P8 on the GPU
  if [ -f /tmp/site/.sglang-blackwell-bundle.json ]; then log "bundle already installed"; return 0; fi
  bash .whl/c2/install.sh --stage /tmp/bundle --target /tmp/site 2>&1 | tail -5 | tee "$OUT/install.log" || return 3
  log "P8 on the GPU"
  PYTHONPATH=/tmp/site:$PWD/python:$PWD/test timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider \
    test/gpu/test_verify_splitkv_gpu.py 2>&1 | tail -15 | tee "$OUT/p8-gpu-test.log"
}

arm_step() {  # arm_step ARM TAG: install if needed, then the arm within the call's ~9 minutes
  install_and_test || return 3
  local left=$(( 535 - ($(date +%s) - T0) ))
  log "$1 arm, deadline ${left} s"
  bench_arm "$1" "$2" "$left"
}

case "${1:-}" in
  A) stepA ;;
  B) arm_step baseline B ;;
  C) arm_step eagle3 C ;;
  D) rm -rf /tmp/jit/triton-cold; arm_step eagle3-p8-p9-off D ;;
  E) PYTHONPATH=/tmp/site:$PWD/python:$PWD/test timeout 500 python3 benchmark/lab/verify_kernel_bench.py --out "$OUT" \
       --contexts 256 2048 8192 32768 --batch 1 4 16 --reps 10 2>&1 | tail -25 ;;
  *) usage; exit 2 ;;
esac
rc=$?
log "step $1 done: exit $rc"
ls -la "$OUT"
exit $rc
