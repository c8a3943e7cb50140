# shellcheck shell=bash
# Shared by the lab scripts (source it: `. "$(dirname "$0")/lib.sh"`; it travels with them, in the same folder):
# the script's clock and its log lines, die, the --help from the script's header, the suite runners' deadline
# check, and the end of a server session a hard-killed earlier call left behind.

T0=$(date +%s)  # the calling script's clock starts when it sources this file
LOG_TAG=$(basename "$0" .sh)

# log MESSAGE...: "[<script> <seconds since T0>s] MESSAGE" on stdout
log() { echo "[$LOG_TAG $(( $(date +%s) - T0 ))s] $*"; }

# die CODE MESSAGE: log MESSAGE and exit with CODE
die() { log "$2"; exit "$1"; }

# usage: the calling script's header comment (its lines 2.. up to the first line that is not a comment)
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }

# check_deadline MIN: SGLB_DEADLINE_S is whole seconds, at least MIN (what one server launch needs); exit 2 if not
check_deadline() {
  [[ "$SGLB_DEADLINE_S" =~ ^[0-9]+$ ]] || die 2 "SGLB_DEADLINE_S=$SGLB_DEADLINE_S: expected whole seconds"
  [ "$SGLB_DEADLINE_S" -ge "$1" ] || die 2 "SGLB_DEADLINE_S=$SGLB_DEADLINE_S: below $1 s not even one server fits"
}

# suite_runner_env SGLB_OUT_DEFAULT SGLB_DEADLINE_S_DEFAULT: the environment of a GPU suite's one-call runner
# (gpu_suite.sh, userpath.sh, hostile.sh): the lab's rule for every process (no NVLink SHARP, no multicast, no
# NVLS), offline hub, the JIT caches in /tmp/jit, PYTHONPATH with the repository's python/ and $SITE; sets SITE,
# OUT and PY
suite_runner_env() {
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
  export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
  export FLASHINFER_CUDA_ARCH_LIST=${FLASHINFER_CUDA_ARCH_LIST:-9.0a} FLASHINFER_WORKSPACE_BASE=/tmp/jit/fi
  export TVM_FFI_CACHE_DIR=/tmp/jit/tvmffi TRITON_CACHE_DIR=/tmp/jit/triton MAX_JOBS=${MAX_JOBS:-16}
  SITE=${SGLB_SITE:-/tmp/site}
  export PYTHONPATH=$PWD/python:$SITE${PYTHONPATH:+:$PYTHONPATH}
  OUT=${OUT:-/tmp/out}
  export SGLB_OUT=${SGLB_OUT:-$1} SGLB_DEADLINE_S=${SGLB_DEADLINE_S:-$2}
  export SGLB_LAB_TARGET=${SGLB_LAB_TARGET:-/tmp/lab/target} SGLB_LAB_DRAFT=${SGLB_LAB_DRAFT:-/tmp/lab/draft}
  PY=${SGLB_PYTHON:-python3}
  export SGLB_PYTHON=$PY
}

# end_leftover_session [FILE]: bench eagle3 writes the live server's session id to $SGLANG_BLACKWELL_BENCH_PIDFILE
# while it runs (the soak writes both of its servers' to its own FILE, one a line); a call killed at its limit
# leaves the sessions (and their GPU memory) behind on the warm machine: end each by its id, then remove FILE
end_leftover_session() {
  local file=${1:-$SGLANG_BLACKWELL_BENCH_PIDFILE} sid p
  [ -s "$file" ] || { rm -f "$file"; return 0; }
  while read -r sid; do
    if [[ "$sid" =~ ^[0-9]+$ ]] && [ -n "$(ps -o pid= -s "$sid" 2>/dev/null)" ]; then
      log "ending leftover server session $sid"; kill -KILL -- "-$sid" 2>/dev/null
      for p in $(ps -o pid= -s "$sid" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done; sleep 3
    fi
  done < "$file"
  rm -f "$file"
}

# suite_preflight SUITE MODULE...: the checks a GPU suite's runner makes before it starts anything (run from the
# repository root with test/gpu/SUITE; SGLB_OUT safe to empty; a GPU; the lab pair generated; MODULEs importable
# with $PY); exit 2 for a bad setting, 3 for a machine not prepared
suite_preflight() {
  local suite=$1; shift
  check_deadline 150
  [ -d "test/gpu/$suite" ] && [ -d python/sglang_blackwell ] || die 2 "run from the sglang-blackwell repository root (no test/gpu/$suite in $PWD)"
  case "$SGLB_OUT" in /|"$PWD"|"$HOME") die 2 "SGLB_OUT=$SGLB_OUT: refusing to empty it" ;; esac
  command -v nvidia-smi >/dev/null || die 3 "no nvidia-smi: this needs a machine with an NVIDIA GPU"
  local ngpu
  ngpu=$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | grep -c .)
  [ "$ngpu" -ge 1 ] || die 3 "nvidia-smi lists no GPU"
  [ -f "$SGLB_LAB_TARGET/tokenizer.json" ] || die 3 "SGLB_LAB_TARGET=$SGLB_LAB_TARGET: no tokenizer.json (generate the pair: python3 benchmark/models/gen_lab_pair.py --out $(dirname "$SGLB_LAB_TARGET") --device cuda)"
  [ -f "$SGLB_LAB_DRAFT/config.json" ] || die 3 "SGLB_LAB_DRAFT=$SGLB_LAB_DRAFT: no config.json (generate the pair)"
  local mods
  mods=$(printf "'%s', " "$@")
  "$PY" -c "import importlib.util as u, sys; m = [n for n in (${mods}) if u.find_spec(n) is None]; print('not importable: ' + ', '.join(m)) if m else None; sys.exit(1 if m else 0)" \
    || die 3 "the stack is not on PYTHONPATH=$PYTHONPATH (install the bundle into $SITE first)"
}

# suite_fresh_start SID_FILE: end the server session an earlier, hard-killed call left behind (by its id:
# bench/eagle3/server.py writes it to SGLANG_BLACKWELL_BENCH_PIDFILE), empty SGLB_OUT, log the settings
suite_fresh_start() {
  export SGLANG_BLACKWELL_BENCH_PIDFILE=$1
  end_leftover_session
  rm -rf "$SGLB_OUT"; mkdir -p "$SGLB_OUT" "$OUT"
  log "deadline ${SGLB_DEADLINE_S}s; target $SGLB_LAB_TARGET; draft $SGLB_LAB_DRAFT; artifacts $SGLB_OUT"
}
