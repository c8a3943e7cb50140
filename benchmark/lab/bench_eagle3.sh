#!/bin/bash
# `bench eagle3` on the GPU lab (nvidia-h200-x2), run from the repository root:
#   DEADLINE=560 bash benchmark/lab/bench_eagle3.sh benchmark/lab-synthetic.toml --repeats 1
# Needs what the lab line leaves on a warm machine: sglang 0.5.14 + deps installed in /tmp/site (the lab bundle's
# install.sh --target /tmp/site), JIT caches in /tmp/jit, and the config's generated pair (its [model] target and
# draft directories: /tmp/lab/{target,draft} for lab-synthetic, /tmp/lab61/... for lab-kimi61).
# Writes into $OUT/bench: the receipt (.json), the runs (_runs.jsonl), plots if matplotlib is there; server logs
# and profiler traces as one $OUT/bench-logs.tar.gz (TRACES_DIR=DIR: the traces are moved into DIR/<logs dir>/
# instead). Exit code: the benchmark's (0 pass, 1 verdict failed, 2 bad config, 5/6 server start/teardown
# problem, 130 interrupted), 3/4 if the machine is not prepared.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMMMEM=CUDA
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 CUDA_HOME=/usr/local/cuda
export FLASHINFER_CUDA_ARCH_LIST=9.0a FLASHINFER_WORKSPACE_BASE=/tmp/jit/fi TVM_FFI_CACHE_DIR=/tmp/jit/tvmffi
export TRITON_CACHE_DIR=/tmp/jit/triton MAX_JOBS=16
OUT=${OUT:-/tmp/out}; DEADLINE=${DEADLINE:-540}
[ $# -ge 1 ] || { echo "usage: $0 CONFIG [bench eagle3 options]"; exit 2; }
CONFIG=$1; shift
[ -f /tmp/site/.sglang-blackwell-bundle.json ] || [ -f /tmp/site/.lab_installed ] \
  || { echo "no sglang install in /tmp/site: install the lab bundle first (benchmark/lab/README.md)"; exit 3; }
[ -f "$CONFIG" ] || { echo "no config $CONFIG"; exit 2; }
# the config's own model directories (the lab pair in /tmp/lab, the target-shaped pair in /tmp/lab61, ...)
dirs=$(python3 -c "import sys, tomllib; m = tomllib.load(open(sys.argv[1], 'rb')).get('model', {}); print(m.get('target', ''), m.get('draft', ''))" "$CONFIG") \
  || { echo "$CONFIG: not readable TOML"; exit 2; }
for d in $dirs; do
  case "$d" in /*) [ -f "$d/config.json" ] || { echo "missing $d/config.json: generate the model pair first (benchmark/models/README.md)"; exit 4; } ;; esac
done
export PYTHONPATH=/tmp/site:$PWD/python
# a server session an earlier, hard-killed call of this script left behind: end it by its id
export SGLANG_BLACKWELL_BENCH_PIDFILE=/tmp/sglang-blackwell-bench.sid
# shellcheck disable=SC1091  # lib.sh is shellchecked on its own (test_lab_session_tp2.py)
. "$(dirname "$0")/lib.sh"
end_leftover_session
mkdir -p "$OUT/bench"
echo "GPUs before: $(nvidia-smi --query-gpu=memory.used --format=csv,noheader | tr '\n' ' ')"
# the harness stops launching arms that would end after DEADLINE; timeout is the hard stop (SIGTERM: the harness
# tears the running server down and writes what it measured)
timeout -k 25 $(( DEADLINE + 20 )) python3 -m sglang_blackwell.cli bench eagle3 --config "$CONFIG" \
  --out "$OUT/bench" --deadline-s "$DEADLINE" "$@"
rc=$?
logs=$(cd "$OUT/bench" && ls -d *_logs 2>/dev/null)
# TRACES_DIR: the profiler traces (one per TP rank and profiled arm run, a few MB each at 61 layers) go there
# instead of into bench-logs.tar.gz, to come back in parts of their own (session_tp2.sh)
if [ -n "${TRACES_DIR:-}" ] && [ -n "$logs" ]; then
  for d in $logs; do
    mkdir -p "$TRACES_DIR/$d"
    find "$OUT/bench/$d" -maxdepth 1 -name '*.trace.json*' -exec mv -t "$TRACES_DIR/$d" {} +
  done
fi
[ -n "$logs" ] && tar -czf "$OUT/bench-logs.tar.gz" -C "$OUT/bench" $logs && (cd "$OUT/bench" && rm -rf $logs)
echo "GPUs after: $(nvidia-smi --query-gpu=memory.used --format=csv,noheader | tr '\n' ' ')"
ls -la "$OUT" "$OUT/bench"
exit $rc
