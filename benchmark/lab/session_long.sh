#!/bin/bash
# The past-8k issue's lab session on one GPU (nvidia-h200: 1x H200, TP=1) as back-to-back device calls, run from the
# repository root on the lab: benchmark/lab-kimi61-long.toml (the 61-layer pair with both drafts that miss by
# design, GQA and MLA; contexts 32k / 64k / 128k at c=1, decode rate, OpenAI API), one arm per call. Each step
# writes what comes back into $OUT (at most 8 files) and stays under ~9.5 minutes:
#
#   A  carry .whl/c1  stage chunk 1; generate the 61-layer pair with the GQA and MLA drafts that miss by design and
#                     the exact MLA draft (/tmp/lab61); the drafts' attention at 128k (check_draft_attention.py)
#   B  carry .whl/c2  install the bundle into /tmp/site; P8 and P11 on the GPU (test/gpu/test_verify_splitkv_gpu.py,
#                     test_draft_extend_splitkv_gpu.py: errors against their bounds to gpu-record.jsonl); the
#                     kernels per layer call at 8k-128k (verify_kernel_bench.py --shapes target gqa mla); then the
#                     baseline arm in the time left
#   C  (nothing)      the eagle3-mla arm (the MLA draft)
#   D  (nothing)      the eagle3 arm (the GQA draft)
#   B, C and D install the bundle when /tmp/site has none (a machine that went cold: carry .whl/c2 then, after A).
#
#   bash benchmark/lab/session_long.sh A|B|C|D
#
# The machine must stay warm between the steps (~30 s): /tmp/bundle, /tmp/site, /tmp/lab61 and /tmp/jit live on it.
# Every process runs with NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export FLASHINFER_CUDA_ARCH_LIST=9.0a FLASHINFER_WORKSPACE_BASE=/tmp/jit/fi TVM_FFI_CACHE_DIR=/tmp/jit/tvmffi
export TRITON_CACHE_DIR=/tmp/jit/triton MAX_JOBS=16
OUT=${OUT:-/tmp/out}
CONFIG=benchmark/lab-kimi61-long.toml
# shellcheck disable=SC1091  # lib.sh is shellchecked on its own (test_lab_session_tp2.py)
. "$(dirname "$0")/lib.sh"
mkdir -p "$OUT"

stepA() {
  rm -rf /tmp/oA; mkdir -p /tmp/oA
  bash .whl/c1/install.sh --stage /tmp/bundle --stage-only 2>&1 | tee /tmp/oA/stage.log || return 3
  log "generating /tmp/lab61 (kimi61 preset: the GQA and MLA drafts that miss by design, the exact MLA draft)"
  /usr/bin/time -v timeout 300 python3 benchmark/models/gen_lab_pair.py --out /tmp/lab61 --device cuda \
    --preset kimi61 --draft miss,mla-miss,mla > /tmp/oA/gen-kimi61.json 2> /tmp/oA/gen-kimi61.err
  local rc=$?
  log "gen: exit $rc; $(grep -E 'Elapsed|Maximum resident' /tmp/oA/gen-kimi61.err | tr -s ' ' | tr '\n' ';')"
  du -sh /tmp/lab61/* | tee /tmp/oA/sizes.txt
  timeout 120 python3 benchmark/models/check_draft_attention.py --pair /tmp/lab61 --context 131072 --device cuda \
    --drafts draft draft-mla-miss draft-mla 2>&1 | tee /tmp/oA/draft-attention.jsonl
  tar -czf "$OUT/stepA.tar.gz" -C /tmp/oA .
  return $rc
}

bench_arm() {  # bench_arm ARM TAG DEADLINE: one arm, everything it wrote (but traces) tarred into $OUT
  local o=/tmp/o$2; rm -rf "$o"
  OUT=$o DEADLINE=$3 TRACES_DIR=/tmp/traces bash benchmark/lab/bench_eagle3.sh "$CONFIG" --arms "$1" --repeats 1 \
    > "/tmp/$2.log" 2>&1
  local rc=$?
  log "$CONFIG --arms $1: exit $rc"; grep -vE '^\s*$' "/tmp/$2.log" | tail -40
  mv "/tmp/$2.log" "$o/" 2>/dev/null
  tar -czf "$OUT/step$2.tar.gz" -C /tmp "o$2"
  return $rc
}

install_bundle() {  # the bundle into /tmp/site, once per machine (c2 carried)
  if [ -f /tmp/site/.sglang-blackwell-bundle.json ]; then log "bundle already installed"; return 0; fi
  bash .whl/c2/install.sh --stage /tmp/bundle --target /tmp/site 2>&1 | tail -5 | tee "$OUT/install.log" || return 3
}

gpu_checks() {  # P8 and P11 on the GPU (their errors against the bounds recorded), the kernels per layer call
  log "P8 and P11 on the GPU"
  SGLB_GPU_RECORD=$OUT/gpu-record.jsonl PYTHONPATH=/tmp/site:$PWD/python:$PWD/test timeout 200 python3 -m pytest \
    -q -m gpu -p no:cacheprovider test/gpu/test_verify_splitkv_gpu.py test/gpu/test_draft_extend_splitkv_gpu.py \
    2>&1 | tail -15 | tee "$OUT/p8-p11-gpu-test.log"
  log "kernels per layer call"
  PYTHONPATH=/tmp/site:$PWD/python:$PWD/test timeout 150 python3 benchmark/lab/verify_kernel_bench.py --out "$OUT" \
    --shapes gqa mla target --contexts 8192 32768 131072 --batch 1 4 --calls 10 --reps 5 --warmup 2 --no-tiles \
    --no-per-head 2>&1 | tail -20
}

arm_step() {  # arm_step ARM TAG: install if needed, then the arm within the call's ~9.5 minutes
  install_bundle || return 3
  [ "$2" = B ] && gpu_checks
  local left=$(( 550 - ($(date +%s) - T0) ))
  log "$1 arm, deadline ${left} s"
  bench_arm "$1" "$2" "$left"
}

case "${1:-}" in
  A) stepA ;;
  B) arm_step baseline B ;;
  C) arm_step eagle3-mla C ;;
  D) arm_step eagle3 D ;;
  *) usage; exit 2 ;;
esac
rc=$?
log "step $1 done: exit $rc"
ls -la "$OUT"
exit $rc
