#!/bin/bash
# One lab session (nvidia-h200-x2, 30 minutes of lab time) as four back-to-back device calls, run from the
# repository root on the lab. Each step writes what comes back into $OUT (at most 8 files):
#
#   step 1  carry .whl/c1  stage chunk 1, the lab image's package list, the model pair generated from seeds
#                          (/tmp/lab), the doctor receipt + nccl show + NCCL profile check         (~2-3 min)
#   step 2  carry .whl/c2  install the bundle into /tmp/site (verifies both chunks), the lab-line GPU suite
#                          (SGLB_DEADLINE_S, default 480)                                          (~8-9 min)
#   step 3  (nothing)      bench eagle3: lab-synthetic (one repeat, 3 arms) then lab-synthetic-untrained
#                          (must fail its verdict)                                                 (~9 min)
#   step 4  (nothing)      bench allreduce --tune, its GPU numerics test, doctor with the stack installed,
#                          and a server started by `serve` with the tuned table (its choices logged) (~5 min)
#
#   step 5  (nothing)      one more repeat of lab-synthetic, bench allreduce --tune (no GPU test), serve with it
#
#   bench   (carry .whl/c2 on a fresh step-1 machine) install the bundle if not yet installed, then REPEATS
#                          (default 1) trained repeats of lab-synthetic (DEADLINE_TRAINED, default 500 s) and, with
#                          UNTRAINED=1, lab-synthetic-untrained (DEADLINE_UNTRAINED, default 200 s)
#
#   bash benchmark/lab/session.sh step1|step2|step3|step4|step5|bench     (SKIP_DOCTOR=1: step 1 without the doctor)
#
# The machine must stay warm between the steps: /tmp/bundle, /tmp/site, /tmp/lab and /tmp/jit live on it.
# Every process runs with NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMMMEM=CUDA
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export FLASHINFER_CUDA_ARCH_LIST=9.0a FLASHINFER_WORKSPACE_BASE=/tmp/jit/fi TVM_FFI_CACHE_DIR=/tmp/jit/tvmffi
export TRITON_CACHE_DIR=/tmp/jit/triton MAX_JOBS=16
OUT=${OUT:-/tmp/out}
# shellcheck disable=SC1091  # lib.sh is shellchecked on its own (test_lab_session_tp2.py)
. "$(dirname "$0")/lib.sh"
mkdir -p "$OUT"

step1() {
  local o=/tmp/o1; rm -rf $o; mkdir -p $o
  bash .whl/c1/install.sh --stage /tmp/bundle --stage-only 2>&1 | tee $o/stage.log || return 3
  python3 -m pip list --format=freeze > "$OUT/installed-lab-image.txt"
  log "generating the lab pair into /tmp/lab (background)"
  ( /usr/bin/time -v python3 benchmark/models/gen_lab_pair.py --out /tmp/lab --device cuda > $o/gen_lab_pair.json \
      2> $o/gen_lab_pair.err; echo "exit $?" >> $o/gen_lab_pair.err ) &
  local gen=$!
  [ "${SKIP_DOCTOR:-0}" = 1 ] || bash benchmark/lab/doctor_receipt.sh lab-h200x2 $o
  wait $gen; log "pair: $(tail -1 $o/gen_lab_pair.err); $(du -sh /tmp/lab/* 2>/dev/null | tr '\n' ' ')"
  tar -czf "$OUT/step1.tar.gz" -C $o .
}

step2() {
  bash .whl/c2/install.sh --stage /tmp/bundle --target /tmp/site 2>&1 | tee "$OUT/install.log" || return 3
  SGLB_DEADLINE_S=${SGLB_DEADLINE_S:-480} OUT="$OUT" bash benchmark/lab/gpu_suite.sh
}

step3() {
  OUT=/tmp/o3a DEADLINE=${DEADLINE_TRAINED:-330} bash benchmark/lab/bench_eagle3.sh benchmark/lab-synthetic.toml \
    --repeats 1 2>&1 | tee /tmp/o3a.log
  log "lab-synthetic: exit ${PIPESTATUS[0]}"
  OUT=/tmp/o3b DEADLINE=${DEADLINE_UNTRAINED:-200} bash benchmark/lab/bench_eagle3.sh \
    benchmark/lab-synthetic-untrained.toml 2>&1 | tee /tmp/o3b.log
  log "lab-synthetic-untrained: exit ${PIPESTATUS[0]} (must be 1: verdict failed)"
  mv /tmp/o3a.log /tmp/o3a/ 2>/dev/null; mv /tmp/o3b.log /tmp/o3b/ 2>/dev/null
  tar -czf "$OUT/step3.tar.gz" -C /tmp o3a o3b
}

step4() {
  local o=/tmp/o4; rm -rf $o; mkdir -p $o
  OUT=$o DEADLINE=${DEADLINE_AR:-260} bash benchmark/lab/allreduce.sh 2>&1 | tail -40
  PYTHONPATH=$PWD/python:/tmp/site timeout 120 python3 -m sglang_blackwell.cli doctor \
    --out $o/doctor-lab-h200x2-installed.json > $o/doctor-lab-h200x2-installed.txt 2>&1
  log "doctor (stack installed): exit $?"
  PYTHONPATH=$PWD/python:/tmp/site bash benchmark/lab/serve_check.sh $o/ar/allreduce_table.json $o/serve 2>&1 \
    | tail -30
  tar -czf "$OUT/step4.tar.gz" -C $o .
}

step5() {  # a later repeat of the trained benchmark + the tuned table through `serve` (when step 4 must be redone)
  local o=/tmp/o5; rm -rf $o; mkdir -p $o
  OUT=$o/bench DEADLINE=${DEADLINE_TRAINED:-260} bash benchmark/lab/bench_eagle3.sh benchmark/lab-synthetic.toml \
    --repeats 1 > $o/bench.log 2>&1
  log "lab-synthetic: exit $?"; tail -25 $o/bench.log
  if [ "${DEADLINE_AR:-150}" -gt 0 ]; then  # DEADLINE_AR=0: only the benchmark repeat
    OUT=$o GPU_TEST=0 PROFILES=${PROFILES:-none} DEADLINE=${DEADLINE_AR:-150} bash benchmark/lab/allreduce.sh 2>&1 \
      | tail -12
    PYTHONPATH=$PWD/python:/tmp/site bash benchmark/lab/serve_check.sh $o/ar/allreduce_table.json $o/serve 2>&1 \
      | tail -30
  fi
  tar -czf "$OUT/step5.tar.gz" -C $o .
}

bench() {  # install the bundle if this machine has not (carry .whl/c2), then N trained repeats [+ the untrained check]
  local o=/tmp/ob; rm -rf $o; mkdir -p $o
  if [ ! -f /tmp/site/.sglang-blackwell-bundle.json ]; then
    bash .whl/c2/install.sh --stage /tmp/bundle --target /tmp/site > $o/install.log 2>&1 || { tail $o/install.log; return 3; }
    log "bundle installed into /tmp/site"
  fi
  if [ "${REPEATS:-1}" -gt 0 ]; then
    OUT=$o/trained DEADLINE=${DEADLINE_TRAINED:-500} bash benchmark/lab/bench_eagle3.sh benchmark/lab-synthetic.toml \
      --repeats "${REPEATS:-1}" > $o/trained.log 2>&1
    log "lab-synthetic x${REPEATS:-1}: exit $?"; tail -25 $o/trained.log
  fi
  if [ "${UNTRAINED:-0}" = 1 ]; then
    OUT=$o/untrained DEADLINE=${DEADLINE_UNTRAINED:-200} bash benchmark/lab/bench_eagle3.sh \
      benchmark/lab-synthetic-untrained.toml > $o/untrained.log 2>&1
    log "lab-synthetic-untrained: exit $? (must be 1: verdict failed)"; tail -12 $o/untrained.log
  fi
  tar -czf "$OUT/bench.tar.gz" -C $o .
}

case "${1:-}" in
  bench) bench; rc=$?; log "bench done: exit $rc"; ls -la "$OUT"; exit $rc ;;
  step1|step2|step3|step4|step5) "$1"; rc=$?; log "$1 done: exit $rc"; ls -la "$OUT"; exit $rc ;;
  *) usage; exit 2 ;;
esac
