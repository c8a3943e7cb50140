#!/bin/bash
# The past-8k issue's lab session on one GPU (nvidia-h200: 1x H200, TP=1) as back-to-back device calls, run from the
# repository root on the lab: the 61-layer pair with both drafts that miss by design (GQA and MLA), c=1, decode
# rate, OpenAI API, one arm per call; the configs benchmark/lab-kimi61-long-64k.toml (32k and 64k, as the MLA arm
# ran it on 2026-12-02) and benchmark/lab-kimi61-long-128k.toml (128k alone: one arm's cell fits a call). Each
# step writes what comes back into $OUT (at most 8 files) and stays under ~9.5 minutes:
#
#   A  carry .whl/c1  stage chunk 1; generate the 61-layer pair with the GQA and MLA drafts that miss by design
#                     (/tmp/lab61); DRAFT_ATTENTION=1 also checks the drafts' attention at 128k
#   A3 carry .whl/c3  (a bundle of three chunks, after A) stage chunk 3
#   B  carry .whl/c2  install the bundle into /tmp/site; the 128k config's eagle3-mla arm (the MLA draft)
#                     (GPU_CHECKS=1 first runs P8 and P11 on the GPU, errors against their bounds to gpu-record.jsonl)
#   C  (nothing)      the 128k config's eagle3 arm (the GQA draft)
#   D  (nothing)      the 128k config's baseline arm, then the kernels per layer call at 32k-128k, bs 1 and 4: first
#                     the drafts' Triton decode per cap on its KV splits, then verify and the default tile capped at
#                     64 / 128 splits (verify_kernel_bench.py), in the time the call has left
#   E  (nothing)      the 64k config's baseline arm
#   F  (nothing)      the 64k config's eagle3 arm (the GQA draft)
#   K  carry .whl/c2  (a machine gone cold after A) install the bundle, P8 and P11 on the GPU (errors against their
#                     bounds), then D's kernel bench; no arm
#   J  carry .whl/c2  (after A) install the bundle, then the drafts' Triton decode per cap on its KV splits alone
#                     (verify_kernel_bench.py --decode, ~1 min); no arm, no GPU tests
#   G  (nothing)      the 32k config's baseline arm (lab-kimi61-long-32k-c4.toml: c = 1 and 4, bench_serving at c=4)
#   H  (nothing)      the 32k config's eagle3-mla arm
#   I  (nothing)      the 32k config's eagle3 arm (the GQA draft)
#   L  (nothing)      the 32k config with answers of 2048 tokens (lab-kimi61-long-32k-c4-2048.toml: c = 1 and 4, the
#                     c = 4 requests decoding together): its baseline arm
#   M  (nothing)      its eagle3-mla arm
#   N  (nothing)      its eagle3 arm (the GQA draft)
#   P  (nothing)      where a round goes at 32k (lab-kimi61-long-32k-profile.toml: c = 1 and the profiler window by
#                     stage, the first 8 decode batches of a 32k request): its eagle3-mla arm
#   Q  (nothing)      its baseline arm
#   R  (nothing)      its eagle3 arm (the GQA draft)
#   S  (nothing)      the grid to 8k with both drafts (lab-kimi61-grid-mla.toml: contexts 256 / 2048 / 8192 x
#                     c = 1 / 4 / 16, first burst and warm, bench_serving at c = 1 of each): its baseline arm
#   T  (nothing)      its eagle3-mla arm
#   U  (nothing)      its eagle3 arm (the GQA draft)
#   V  (nothing)      many users at once (lab-kimi61-c64.toml: contexts 2k / 8k x c = 16 / 32 / 64, sglang's
#                     --speculative-adaptive beside the fixed 2 steps; issue 30): its baseline arm
#   X  (nothing)      its eagle3-mla arm (2 steps)
#   Y  (nothing)      its eagle3-mla-adaptive arm
#   Z  (nothing)      its eagle3 arm (the GQA draft, 2 steps)
#   V2 (nothing)      lab-kimi61-c64-2k.toml (the c64 config at 2k x c = 32 / 64 only, for a session short of lab
#                     time): its baseline arm
#   X2 (nothing)      its eagle3-mla arm (2 steps)
#   Y2 (nothing)      its eagle3-mla-adaptive arm
#   B2 carry .whl/c2  where a round goes at 128k (lab-kimi61-long-128k-profile.toml: c = 1, the profiler window by
#                     stage over the cell's warm request again, its prefill from the radix cache; outputs compared):
#                     its eagle3-mla arm (installs the bundle after A)
#   C2 (nothing)      its eagle3 arm (the GQA draft)
#   D2 (nothing)      its baseline arm
#   W  carry .whl/c2  (after A) install the bundle, generate the 10-layer lab pair with its tokenizer (/tmp/lab),
#                     then the hostile-request suite on both arms (benchmark/lab/hostile.sh, SGLB_DEADLINE_S 400)
#   SO carry .whl/c2  (after A) the soak detached (benchmark/lab/soak.sh start: baseline and EAGLE-3 servers at once,
#                     the 10-layer pair), its status after 480 s; SO2 (nothing, the same warm machine): collect it
#                     (soak.sh wait 540); SOF carry .whl/c2: the soak in one call (SGLB_SOAK_S=420 soak.sh run) where
#                     a detached soak does not outlive its call (issue 31 item 4)
#   JIT (nothing)     after the arms: the JIT caches this machine built (/tmp/jit: Triton, FlashInfer, TVM-FFI), a
#                     listing with sizes and a tar.gz in parts of 15 MiB (at most 7) for issue 31's cold start (a
#                     cache the bundle carries to a fresh machine)
#   JR carry .jit     on a fresh machine, before its first arm: the JIT caches an earlier machine's JIT step returned
#                     (here: cat the parts into .jit/), restored into /tmp/jit, so that the arm after it shows what a
#                     carried cache saves (time to healthy, startup_triton_compiles)
#   B-Z install the bundle when /tmp/site has none (a machine that went cold: carry .whl/c2 then, after A).
#
#   bash benchmark/lab/session_long.sh SO|SO2|SOF|JIT|JR|A|A3|B|C|D|E|F|G|H|I|J|K|L|M|N|P|Q|R|S|T|U|V|W|X|Y|Z|V2|X2|Y2|B2|C2|D2
#
# The machine must stay warm between the steps (~30 s): /tmp/bundle, /tmp/site, /tmp/lab61 and /tmp/jit live on it.
# Every process runs with NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export FLASHINFER_CUDA_ARCH_LIST=9.0a FLASHINFER_WORKSPACE_BASE=/tmp/jit/fi TVM_FFI_CACHE_DIR=/tmp/jit/tvmffi
export TRITON_CACHE_DIR=/tmp/jit/triton MAX_JOBS=16
OUT=${OUT:-/tmp/out}
LONG64=benchmark/lab-kimi61-long-64k.toml
LONG128=benchmark/lab-kimi61-long-128k.toml
LONG128P=benchmark/lab-kimi61-long-128k-profile.toml
LONG32C4=benchmark/lab-kimi61-long-32k-c4.toml
LONG32C4L=benchmark/lab-kimi61-long-32k-c4-2048.toml
LONG32P=benchmark/lab-kimi61-long-32k-profile.toml
GRID_MLA=benchmark/lab-kimi61-grid-mla.toml
C64=benchmark/lab-kimi61-c64.toml
C64S=benchmark/lab-kimi61-c64-2k.toml
# shellcheck disable=SC1091  # lib.sh is shellchecked on its own (test_lab_session_tp2.py)
. "$(dirname "$0")/lib.sh"
mkdir -p "$OUT"

stepA() {
  rm -rf /tmp/oA; mkdir -p /tmp/oA
  bash .whl/c1/install.sh --stage /tmp/bundle --stage-only 2>&1 | tee /tmp/oA/stage.log || return 3
  log "generating /tmp/lab61 (kimi61 preset: the GQA and MLA drafts that miss by design)"
  /usr/bin/time -v timeout 300 python3 benchmark/models/gen_lab_pair.py --out /tmp/lab61 --device cuda \
    --preset kimi61 --draft miss,mla-miss > /tmp/oA/gen-kimi61.json 2> /tmp/oA/gen-kimi61.err
  local rc=$?
  log "gen: exit $rc; $(grep -E 'Elapsed|Maximum resident' /tmp/oA/gen-kimi61.err | tr -s ' ' | tr '\n' ';')"
  du -sh /tmp/lab61/* | tee /tmp/oA/sizes.txt
  [ "${DRAFT_ATTENTION:-0}" = 1 ] && timeout 120 python3 benchmark/models/check_draft_attention.py --pair /tmp/lab61 \
    --context 131072 --device cuda --drafts draft draft-mla-miss 2>&1 | tee /tmp/oA/draft-attention.jsonl
  tar -czf "$OUT/stepA.tar.gz" -C /tmp/oA .
  return $rc
}

bench_arm() {  # bench_arm CONFIG ARM TAG DEADLINE: one arm, everything it wrote (but traces) tarred into $OUT
  local o=/tmp/o$3; rm -rf "$o"
  OUT=$o DEADLINE=$4 TRACES_DIR=/tmp/traces bash benchmark/lab/bench_eagle3.sh "$1" --arms "$2" --repeats 1 \
    > "/tmp/$3.log" 2>&1
  local rc=$?
  log "$1 --arms $2: exit $rc"; grep -vE '^\s*$' "/tmp/$3.log" | tail -40
  mv "/tmp/$3.log" "$o/" 2>/dev/null
  tar -czf "$OUT/step$3.tar.gz" -C /tmp "o$3"
  return $rc
}

install_bundle() {  # the bundle into /tmp/site, once per machine (c2 carried)
  if [ -f /tmp/site/.sglang-blackwell-bundle.json ]; then log "bundle already installed"; return 0; fi
  bash .whl/c2/install.sh --stage /tmp/bundle --target /tmp/site 2>&1 | tail -5 | tee "$OUT/install.log" || return 3
}

gpu_checks() {  # P8 and P11 on the GPU, errors against their bounds (GPU_CHECKS=1)
  [ "${GPU_CHECKS:-0}" = 1 ] || return 0
  log "P8 and P11 on the GPU"
  SGLB_GPU_RECORD=$OUT/gpu-record.jsonl PYTHONPATH=/tmp/site:$PWD/python:$PWD/test timeout 200 python3 -m pytest \
    -q -m gpu -p no:cacheprovider test/gpu/test_verify_splitkv_gpu.py test/gpu/test_draft_extend_splitkv_gpu.py \
    2>&1 | tail -15 | tee "$OUT/p8-p11-gpu-test.log"
}

kernel_bench() {  # the kernels per layer call: first the GQA and MLA drafts' Triton decode (decode_attention_fwd)
  # per cap on its KV splits (8: upstream's GQA cap; 64: P13's at 128k; 256: MLA's on an H200), then verify and
  # draft-extend, the default tile at split caps 64 (the old rule) and 128; every row also in kernel-bench.log
  local left=$(( ${KERNEL_END_S:-570} - ($(date +%s) - T0) ))
  [ "$left" -gt 40 ] || { log "kernel bench: skipped, ${left} s left in the call"; return 0; }
  log "Triton decode per split cap, kernels per layer call, the split rule as shipped and capped at 64 / 128" \
    "(${left} s left)"
  PYTHONPATH=/tmp/site:$PWD/python:$PWD/test timeout "$left" python3 benchmark/lab/verify_kernel_bench.py \
    --out "$OUT" --decode gqa mla --decode-contexts 32768 131072 --decode-batch 1 4 \
    --decode-splits 8 16 32 64 128 256 \
    --shapes target mla --contexts 32768 65536 131072 --batch 1 4 --splits 64 128 --calls 10 \
    --reps 5 --warmup 2 --no-per-head --no-tiles 2>&1 | tee "$OUT/kernel-bench.log" | tail -30
}

decode_bench() {  # the drafts' Triton decode alone, per cap on its KV splits (upstream's GQA 8, P13's 16-64, MLA's)
  log "Triton decode per split cap (GQA and MLA drafts, 32k / 128k, bs 1 / 4)"
  PYTHONPATH=/tmp/site:$PWD/python:$PWD/test timeout 150 python3 benchmark/lab/verify_kernel_bench.py \
    --out "$OUT" --decode gqa mla --decode-contexts 32768 131072 --decode-batch 1 4 \
    --decode-splits 8 16 32 64 128 256 --shapes --calls 10 --reps 5 --warmup 2 --no-per-head --no-tiles 2>&1 \
    | tee "$OUT/kernel-bench.log" | tail -40
}

lab_pair() {  # the 10-layer lab pair with its tokenizer in /tmp/lab, once per machine
  [ -f /tmp/lab/target/tokenizer.json ] && return 0
  log "generating /tmp/lab (lab preset, the constructed draft, its tokenizer)"
  timeout 200 python3 benchmark/models/gen_lab_pair.py --out /tmp/lab --device cuda > "$OUT/gen-lab.json" \
    2> "$OUT/gen-lab.err" || { log "gen: failed"; tail -5 "$OUT/gen-lab.err"; return 3; }
}

hostile_step() {  # the bundle, the 10-layer lab pair, then the hostile-request suite in what the call has left
  install_bundle || return 3
  lab_pair || return 3
  local left=$(( ${HOSTILE_END_S:-495} - ($(date +%s) - T0) ))
  log "hostile suite, deadline ${left} s"
  SGLB_DEADLINE_S=$left OUT="$OUT" bash benchmark/lab/hostile.sh
}

jit_step() {  # the JIT caches this machine built, listed and tarred in parts for $OUT (8 files at most)
  [ -d /tmp/jit ] || { log "no /tmp/jit on this machine"; return 3; }
  (cd /tmp/jit && find . -type f -printf '%s %p\n' | sort -k2) > "$OUT/jit-files.txt"
  log "$(wc -l < "$OUT/jit-files.txt") files, $(du -sh /tmp/jit | cut -f1); per cache: $(du -sh /tmp/jit/* | tr '\t\n' ': ')"
  tar -czf /tmp/jit-cache.tar.gz -C /tmp jit
  split -b 15M -d -a 1 /tmp/jit-cache.tar.gz "$OUT/jit-cache.tar.gz.part"
  local parts; parts=$(find "$OUT" -name 'jit-cache.tar.gz.part*' | wc -l)
  log "jit-cache.tar.gz: $(du -h /tmp/jit-cache.tar.gz | cut -f1) in $parts parts"
  [ "$parts" -le 7 ] || { log "more than 7 parts: only the listing comes back"; rm -f "$OUT"/jit-cache.tar.gz.part*; }
}

soak_step() {  # soak_step start|wait|run: the bundle, the 10-layer lab pair, then the soak (benchmark/lab/soak.sh)
  install_bundle || return 3
  lab_pair || return 3
  case "$1" in
    start) OUT="$OUT" bash benchmark/lab/soak.sh start || return $?
           sleep 480; OUT="$OUT" bash benchmark/lab/soak.sh status ;;  # exit 4: still running (as it should be)
    wait) OUT="$OUT" bash benchmark/lab/soak.sh wait 540 ;;
    run) SGLB_SOAK_S=420 OUT="$OUT" bash benchmark/lab/soak.sh run ;;
  esac
}

jit_restore_step() {  # the carried JIT caches (.jit/jit-cache.tar.gz.part*, the JIT step's) into /tmp/jit
  compgen -G ".jit/jit-cache.tar.gz.part*" > /dev/null || { log "no .jit/jit-cache.tar.gz.part* carried"; return 3; }
  [ -d /tmp/jit ] && log "replacing /tmp/jit ($(du -sh /tmp/jit | cut -f1))" && rm -rf /tmp/jit
  cat .jit/jit-cache.tar.gz.part* | tar -xz -C /tmp || { log "the carried parts do not untar"; return 3; }
  log "restored /tmp/jit: $(find /tmp/jit -type f | wc -l) files, $(du -sh /tmp/jit | cut -f1); Triton entries:" \
      "$(find /tmp/jit/triton -mindepth 1 -maxdepth 1 -type d 2>/dev/null | wc -l)"
}

arm_step() {  # arm_step CONFIG ARM TAG: install if needed, then the arm within the call's ~9.5 minutes
  install_bundle || return 3
  [ "$3" = B ] && gpu_checks
  local left=$(( ${ARM_END_S:-550} - ($(date +%s) - T0) ))
  log "$2 arm of $1, deadline ${left} s"
  bench_arm "$1" "$2" "$3" "$left"
}

case "${1:-}" in
  A) stepA ;;
  A3) bash .whl/c3/install.sh --stage /tmp/bundle --stage-only 2>&1 | tail -3 ;;
  B) arm_step "$LONG128" eagle3-mla B ;;
  C) arm_step "$LONG128" eagle3 C ;;
  D) ARM_END_S=480 arm_step "$LONG128" baseline D; rc=$?; kernel_bench; (exit $rc) ;;
  E) arm_step "$LONG64" baseline E ;;
  F) arm_step "$LONG64" eagle3 F ;;
  K) install_bundle && GPU_CHECKS=1 gpu_checks && KERNEL_END_S=330 kernel_bench ;;
  J) install_bundle && decode_bench ;;
  G) arm_step "$LONG32C4" baseline G ;;
  H) arm_step "$LONG32C4" eagle3-mla H ;;
  I) arm_step "$LONG32C4" eagle3 I ;;
  L) arm_step "$LONG32C4L" baseline L ;;
  M) arm_step "$LONG32C4L" eagle3-mla M ;;
  N) arm_step "$LONG32C4L" eagle3 N ;;
  P) arm_step "$LONG32P" eagle3-mla P ;;
  Q) arm_step "$LONG32P" baseline Q ;;
  R) arm_step "$LONG32P" eagle3 R ;;
  S) arm_step "$GRID_MLA" baseline S ;;
  T) arm_step "$GRID_MLA" eagle3-mla T ;;
  U) arm_step "$GRID_MLA" eagle3 U ;;
  V) arm_step "$C64" baseline V ;;
  X) arm_step "$C64" eagle3-mla X ;;
  Y) arm_step "$C64" eagle3-mla-adaptive Y ;;
  Z) arm_step "$C64" eagle3 Z ;;
  V2) arm_step "$C64S" baseline V2 ;;
  X2) arm_step "$C64S" eagle3-mla X2 ;;
  Y2) arm_step "$C64S" eagle3-mla-adaptive Y2 ;;
  B2) arm_step "$LONG128P" eagle3-mla B2 ;;
  C2) arm_step "$LONG128P" eagle3 C2 ;;
  D2) arm_step "$LONG128P" baseline D2 ;;
  W) hostile_step ;;
  SO) soak_step start ;;
  SO2) soak_step wait ;;
  SOF) soak_step run ;;
  JIT) jit_step ;;
  JR) jit_restore_step ;;
  *) usage; exit 2 ;;
esac
rc=$?
log "step $1 done: exit $rc"
ls -la "$OUT"
exit $rc
