#!/bin/bash
# One lab session on one GPU (nvidia-h200: 1x H200, TP=1) as back-to-back device calls, run from the repository
# root on the lab, for the user path (issue 14) and the target-shaped pair (issue 16). Each step writes what comes
# back into $OUT (at most 8 files) and stays under ~9 minutes:
#
#   A  carry .whl/c1  stage chunk 1; the lab image's package list; generate, in parallel on the GPU, the 10-layer
#                     lab pair with its tokenizer (/tmp/lab: target, draft) and the 61-layer target-shaped pair
#                     (/tmp/lab61: target, draft = misses by design, draft-constructed = exact), and the
#                     NCCL config check (benchmark/lab/nccl_conf_check.sh, issue 17)              (~1.5-2.5 min)
#   B  carry .whl/c2  install the bundle into /tmp/site (verifies both chunks), then the user-path GPU tests:
#                     two servers started by `sglang-blackwell serve` driven by the openai client
#                     (benchmark/lab/userpath.sh, SGLB_DEADLINE_S default 420)                       (~6-8.5 min)
#   C  (nothing)      bench eagle3 benchmark/lab-kimi61.toml, one repeat: baseline + eagle3 through the OpenAI API
#                     at TP=1 (DEADLINE default 470)                                                  (~5-8.5 min)
#   C2 (nothing)      if time is left: the ceiling, lab-kimi61-exact.toml (the exact draft)           (~5-8.5 min)
#
#   bash benchmark/lab/session_tp1.sh A|B|C|C2
#
# The machine must stay warm between the steps (~30 s): /tmp/bundle, /tmp/site, /tmp/lab, /tmp/lab61 and /tmp/jit
# live on it. Every process runs with NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export FLASHINFER_CUDA_ARCH_LIST=9.0a FLASHINFER_WORKSPACE_BASE=/tmp/jit/fi TVM_FFI_CACHE_DIR=/tmp/jit/tvmffi
export TRITON_CACHE_DIR=/tmp/jit/triton MAX_JOBS=16
OUT=${OUT:-/tmp/out}
# shellcheck disable=SC1091  # lib.sh is shellchecked on its own (test_lab_session_tp2.py)
. "$(dirname "$0")/lib.sh"
mkdir -p "$OUT"

gen() {  # gen NAME OUTDIR ARGS...: one generator run, timed, its summary and stderr kept in /tmp/oA
  local name=$1 dir=$2; shift 2
  ( /usr/bin/time -v timeout 300 python3 benchmark/models/gen_lab_pair.py --out "$dir" --device cuda "$@" \
      > "/tmp/oA/gen-$name.json" 2> "/tmp/oA/gen-$name.err"; echo "exit $?" >> "/tmp/oA/gen-$name.err" )
}

stepA() {
  rm -rf /tmp/oA; mkdir -p /tmp/oA
  bash .whl/c1/install.sh --stage /tmp/bundle --stage-only 2>&1 | tee /tmp/oA/stage.log || return 3
  python3 -m pip list --format=freeze > "$OUT/installed-lab-image.txt"
  log "generating /tmp/lab (lab preset) and /tmp/lab61 (kimi61 preset) in parallel"
  gen lab /tmp/lab --preset lab --draft constructed &
  local a=$!
  gen kimi61 /tmp/lab61 --preset kimi61 --draft miss,constructed &
  local b=$!
  log "NCCL config check (issue 17: the profile through NCCL_CONF_FILE reaches a program Python never started)"
  ( PATH=/usr/local/cuda/bin:$PATH timeout 120 bash benchmark/lab/nccl_conf_check.sh /tmp/oA/nccl \
      > /tmp/oA/nccl-check.log 2>&1; echo "exit $?" >> /tmp/oA/nccl-check.log ) &
  local c=$!
  wait $a $b $c
  log "nccl check: $(tail -2 /tmp/oA/nccl-check.log | tr '\n' ' ')"
  for n in lab kimi61; do log "$n: $(tail -1 /tmp/oA/gen-$n.err); $(grep -E 'Elapsed|Maximum resident' /tmp/oA/gen-$n.err | tr -s ' ' | tr '\n' ';')"; done
  du -sh /tmp/lab/* /tmp/lab61/* 2>&1 | tee /tmp/oA/sizes.txt
  df -h /tmp | tail -1
  tar -czf "$OUT/stepA.tar.gz" -C /tmp/oA .
  grep -q "exit 0" /tmp/oA/gen-lab.err && grep -q "exit 0" /tmp/oA/gen-kimi61.err
}

stepB() {
  bash .whl/c2/install.sh --stage /tmp/bundle --target /tmp/site 2>&1 | tee "$OUT/install.log" || return 3
  SGLB_DEADLINE_S=${SGLB_DEADLINE_S:-420} OUT="$OUT" bash benchmark/lab/userpath.sh
}

bench() {  # bench CONFIG TAG: one repeat of a bench eagle3 config, everything it wrote tarred into $OUT
  local o=/tmp/o$2; rm -rf "$o"
  OUT=$o DEADLINE=${DEADLINE:-470} bash benchmark/lab/bench_eagle3.sh "$1" --repeats 1 > "/tmp/$2.log" 2>&1
  local rc=$?
  log "$1: exit $rc"; tail -30 "/tmp/$2.log"
  mv "/tmp/$2.log" "$o/" 2>/dev/null
  tar -czf "$OUT/step$2.tar.gz" -C /tmp "o$2"
  return $rc
}

case "${1:-}" in
  A) stepA ;;
  B) stepB ;;
  C) bench benchmark/lab-kimi61.toml C ;;
  C2) bench benchmark/lab-kimi61-exact.toml C2 ;;
  *) usage; exit 2 ;;
esac
rc=$?
log "step $1 done: exit $rc"
ls -la "$OUT"
exit $rc
