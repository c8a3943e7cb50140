#!/bin/bash
# One lab session on two GPUs (nvidia-h200-x2: 2x H200, NVLink, multicast off, TP=2) for issue 19: does all-reduce
# fusion make the 61-layer pair's verify faster, end to end? Back-to-back device calls, run from the repository
# root on the lab; each writes what comes back into $OUT (at most 8 files, 16 MiB each) and stays under ~9 min.
# The call plan with expected times: benchmark/README.md ("Lab call plan, TP=2 with the 61-layer pair").
#
#   A  carry .whl/c1  stage chunk 1 of the bundle; the lab image's package list; generate the 61-layer pair
#                     (/tmp/lab61: target with its tokenizer + the draft that misses by design) on the GPU
#   B  carry .whl/c2  stage chunk 2
#   C  carry .whl/c3  install the bundle into /tmp/site (verifies all three chunks; the prebuilt FlashInfer
#                     trtllm_comm + norm for 9.0a into flashinfer's AOT slots), then the lab-line GPU suite on
#                     the 61-layer pair: 121 fused kernels per verify on every rank, greedy outputs equal fusion
#                     on/off and speculation on/off, accept length equal, P5 workspace (SGLB_DEADLINE_S, 450)
#   D  (nothing)      bench eagle3 benchmark/lab-kimi61-tp2.toml, one repeat of baseline, eagle3, eagle3+fusion
#                     through the OpenAI API, every rank's profiler trace of both speculative arms (DEADLINE, 470)
#   E  (nothing)      the same, the second repeat
#   F  (nothing)      bench allreduce --tp 2 --tune (+ its GPU numerics test), then a server started by
#                     `sglang-blackwell serve --table <the tuned table>` on the 61-layer pair
#   G  (nothing)      only with >= 7 min of lab time left after F: a third repeat (as D)
#
#   bash benchmark/lab/session_tp2.sh A|B|C|D|E|F|G     on the lab
#   bash benchmark/lab/session_tp2.sh check             here, before asking for the lab: the bundle's chunks in
#                     .whl (or BUNDLE=DIR), each small enough to travel with the tree, the prebuilt modules in
#                     it; the config; the scripts (bash -n)
#
# The machine must stay warm between the calls (~30 s): /tmp/bundle, /tmp/site, /tmp/lab61 and /tmp/jit live on
# it. If C answers exit 3 (files missing), it went cold: start again at A. BUNDLE_ID=<the id `sglang-blackwell
# bundle` printed> in A, B and C: install.sh --expect-id refuses any other bundle (exit 4). Every process runs with
# NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMMMEM=CUDA.
# What comes back: A installed-lab-image.txt, stepA.tar.gz; C the GPU suite's receipt, JUnit XML, log, artifacts;
# D/E/G stepD.tar.gz (receipt, runs, plots, server logs, the harness log) and stepD-traces.tar.partNN (every
# rank's traces; cat stepD-traces.tar.part* | tar -xf -); F stepF.tar.gz.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMMMEM=CUDA
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export FLASHINFER_CUDA_ARCH_LIST=9.0a FLASHINFER_WORKSPACE_BASE=/tmp/jit/fi TVM_FFI_CACHE_DIR=/tmp/jit/tvmffi
export TRITON_CACHE_DIR=/tmp/jit/triton MAX_JOBS=16
OUT=${OUT:-/tmp/out}
CONFIG=benchmark/lab-kimi61-tp2.toml
PAIR=/tmp/lab61
# shellcheck disable=SC1091  # lib.sh is shellchecked on its own (test_lab_session_tp2.py)
. "$(dirname "$0")/lib.sh"

stepA() {
  local o=/tmp/oA; rm -rf "$o"; mkdir -p "$o"
  bash .whl/c1/install.sh --stage /tmp/bundle --stage-only ${BUNDLE_ID:+--expect-id "$BUNDLE_ID"} > "$o/stage.log" 2>&1
  local rc=$?; cat "$o/stage.log"; [ $rc = 0 ] || return $rc
  python3 -m pip list --format=freeze > "$OUT/installed-lab-image.txt"
  { nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.max.sm --format=csv; nvidia-smi topo -m; } \
    > "$o/gpus.txt" 2>&1
  log "generating $PAIR (kimi61 preset: the target and the draft that misses by design)"
  /usr/bin/time -v timeout 300 python3 benchmark/models/gen_lab_pair.py --out "$PAIR" --preset kimi61 --device cuda \
    --draft miss > "$o/gen-kimi61.json" 2> "$o/gen-kimi61.err"
  rc=$?
  log "generator: exit $rc; $(grep -E 'Elapsed|Maximum resident' "$o/gen-kimi61.err" | tr -s ' ' | tr '\n' ';')"
  du -sh "$PAIR"/* 2>&1 | tee "$o/sizes.txt"
  df -h /tmp | tail -1
  tar -czf "$OUT/stepA.tar.gz" -C "$o" .
  return $rc
}

stepB() {
  bash .whl/c2/install.sh --stage /tmp/bundle --stage-only ${BUNDLE_ID:+--expect-id "$BUNDLE_ID"} \
    > "$OUT/stage-c2.log" 2>&1
  local rc=$?; cat "$OUT/stage-c2.log"; return $rc
}

stepC() {
  bash .whl/c3/install.sh --stage /tmp/bundle --target /tmp/site ${BUNDLE_ID:+--expect-id "$BUNDLE_ID"} \
    > "$OUT/install.log" 2>&1
  local rc=$?; cat "$OUT/install.log"; [ $rc = 0 ] || return $rc  # 3: chunks missing (the machine went cold)
  log "AOT slots: $(find /tmp/site/flashinfer/data/aot -name '*.so' 2>/dev/null | tr '\n' ' ')"
  SGLB_LAB_TARGET=$PAIR/target SGLB_LAB_DRAFT=$PAIR/draft SGLB_LAB_LAYERS=61 \
    SGLB_DEADLINE_S=${SGLB_DEADLINE_S:-450} OUT="$OUT" bash benchmark/lab/gpu_suite.sh
}

bench() {  # bench TAG: one repeat of the config's three arms; receipt + runs + logs, the traces in parts
  local o=/tmp/o$1 t=/tmp/o$1-traces
  rm -rf "$o" "$t"; mkdir -p "$o" "$t"
  OUT=$o TRACES_DIR=$t DEADLINE=${DEADLINE:-470} bash benchmark/lab/bench_eagle3.sh "$CONFIG" --repeats 1 \
    > "$o/bench.log" 2>&1
  local rc=$?
  log "$CONFIG: exit $rc"; tail -40 "$o/bench.log"
  tar -czf "$OUT/step$1.tar.gz" -C /tmp "o$1"
  bash benchmark/lab/pack_parts.sh "$t" "$OUT/step$1-traces" 3  # <= 45 MiB + the tarball: under 64 MiB back
  return $rc
}

stepF() {
  local o=/tmp/oF; rm -rf "$o"; mkdir -p "$o"
  OUT=$o DEADLINE=${DEADLINE_AR:-240} bash benchmark/lab/allreduce.sh > "$o/allreduce.log" 2>&1
  log "bench allreduce: $(grep -E 'bench rc=|gpu test rc=' "$o/ar/run.log" 2>/dev/null | tr '\n' ' ')"
  tail -25 "$o/ar/bench.log" 2>/dev/null
  SGLB_LAB_TARGET=$PAIR/target SGLB_LAB_DRAFT=$PAIR/draft PYTHONPATH=$PWD/python:/tmp/site \
    timeout 240 bash benchmark/lab/serve_check.sh "$o/ar/allreduce_table.json" "$o/serve" > "$o/serve_check.log" 2>&1
  local rc=$?
  log "serve --table on $PAIR: exit $rc"; tail -30 "$o/serve_check.log"
  tar -czf "$OUT/stepF.tar.gz" -C "$o" .
  return $rc
}

check() {  # here: ready to carry?
  local b=${BUNDLE:-.whl} rc=0
  python3 benchmark/lab/carry_check.py --jit 9.0a:trtllm_comm,norm "$b/c1" "$b/c2" "$b/c3" || rc=1
  for s in benchmark/lab/session_tp2.sh benchmark/lab/bench_eagle3.sh benchmark/lab/gpu_suite.sh \
           benchmark/lab/allreduce.sh benchmark/lab/serve_check.sh benchmark/lab/pack_parts.sh; do
    bash -n "$s" || { echo "PROBLEM: $s does not parse"; rc=1; }
  done
  PYTHONPATH=$PWD/python python3 -c "import sys; from sglang_blackwell.bench.eagle3.config import load_config; \
c = load_config(sys.argv[1]); print(f'{c.path}: {c.name}, TP={c.server.tp}, arms {list(c.arms)}, ' \
f'profile {c.profile.steps} steps on {list(c.profile.arms)}, bar {c.verdict.min_ratio}')" "$CONFIG" || rc=1
  return $rc
}

case "${1:-}" in
  A) mkdir -p "$OUT"; stepA ;;
  B) mkdir -p "$OUT"; stepB ;;
  C) mkdir -p "$OUT"; stepC ;;
  D|E|G) mkdir -p "$OUT"; bench "$1" ;;
  F) mkdir -p "$OUT"; stepF ;;
  check) check; exit $? ;;
  *) usage; exit 2 ;;
esac
rc=$?
log "step $1 done: exit $rc"
ls -la "$OUT"
exit $rc
