#!/bin/bash
# `bench allreduce --tune` on the GPU lab in ONE device call: the 2x H200 kind, the sglang 0.5.14 stack already
# installed in /tmp/site (shared/lab/run_lab.sh stage2), our package straight from this checkout (no install).
#   OUT=... bash benchmark/lab/allreduce.sh          (run from the repository root)
# Writes $OUT/allreduce.tar.gz (receipt JSON, plot PNG if matplotlib is there, dispatch table, logs, facts).
# Env: SITE (default /tmp/site), TOKENS, REPS, PROFILES (default none,pcie-ll), GPU_TEST (1: also run
# test/gpu/test_allreduce_numerics.py if pytest is importable), DEADLINE (s, default 540) bounds the script.
# Expected wall time with FlashInfer modules cached (AOT or JIT cache): ~1.5 min bench + ~0.5 min GPU test.
# Cold FlashInfer JIT adds ~150 s (trtllm_comm) + ~20 s (norm) to the first run.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMMMEM=CUDA
export PYTHONUNBUFFERED=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} MAX_JOBS=${MAX_JOBS:-16}
export FLASHINFER_CUDA_ARCH_LIST=${FLASHINFER_CUDA_ARCH_LIST:-9.0a}
export FLASHINFER_WORKSPACE_BASE=${FLASHINFER_WORKSPACE_BASE:-/tmp/jit/fi}   # shared with run_lab.sh's servers
SITE=${SITE:-/tmp/site}
export PYTHONPATH=$PWD/python:$SITE
OUT=${OUT:-/tmp/out}; R=$OUT/ar; mkdir -p "$R"
DEADLINE=${DEADLINE:-540}; T0=$(date +%s)
left() { echo $(( DEADLINE - ($(date +%s) - T0) )); }
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a "$R/run.log"; }

[ -d "$SITE/flashinfer" ] || { log "no flashinfer in $SITE: run shared/lab/run_lab.sh stage2 first"; exit 3; }
# FlashInfer modules prebuilt on a CPU machine (lab bundle .whl/c2/aot) into the AOT slots, as run_lab.sh does
if ls .whl/c2/aot/*.so >/dev/null 2>&1; then
  for so in .whl/c2/aot/*.so; do n=$(basename "$so" .so)
    [ -f "$SITE/flashinfer/data/aot/$n/$n.so" ] || { mkdir -p "$SITE/flashinfer/data/aot/$n"; cp "$so" "$SITE/flashinfer/data/aot/$n/$n.so"; }
  done
fi
{
  date -u +%FT%TZ; nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.mem --format=csv
  nvidia-smi topo -m
  ls "$SITE"/flashinfer/data/aot 2>/dev/null | sed 's/^/aot: /'
  find "$FLASHINFER_WORKSPACE_BASE" -name '*.so' 2>/dev/null | sed 's/^/jit: /' | head -20
  python3 -c "import sys, torch, flashinfer; print(sys.version.split()[0], torch.__version__, torch.version.cuda, 'flashinfer', flashinfer.__version__)"
  python3 -c "import matplotlib; print('matplotlib', matplotlib.__version__)" 2>&1 | tail -1
} > "$R/facts.txt" 2>&1
log "facts written; starting bench (budget $(left) s)"

set -o pipefail
timeout $(( $(left) - 60 )) python3 -m sglang_blackwell.cli bench allreduce --tp 2 --tune \
  --tokens "${TOKENS:-1,2,3,4,8,16,32,64,128,256,512}" --reps "${REPS:-25}" \
  --nccl-profile "${PROFILES:-none,pcie-ll}" --timeout 360 \
  --out "$R/allreduce-h200-tp2.json" --table "$R/allreduce_table.json" 2>&1 | tee "$R/bench.log"
log "bench rc=$?"

if [ "${GPU_TEST:-1}" = 1 ] && [ "$(left)" -gt 120 ] && python3 -c "import pytest" 2>/dev/null; then
  timeout $(( $(left) - 20 )) python3 -m pytest -q -m gpu -p no:cacheprovider test/gpu/test_allreduce_numerics.py \
    2>&1 | tee "$R/gpu_test.log" | tail -15
  log "gpu test rc=$?"
else
  log "gpu test skipped (GPU_TEST=${GPU_TEST:-1}, $(left) s left, pytest importable: $(python3 -c 'import pytest' 2>/dev/null && echo yes || echo no))"
fi
tar -czf "$OUT/allreduce.tar.gz" -C "$OUT" ar && log "wrote $OUT/allreduce.tar.gz ($(du -h "$OUT/allreduce.tar.gz" | cut -f1))"
