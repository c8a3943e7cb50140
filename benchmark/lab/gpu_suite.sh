#!/bin/bash
# The lab line's GPU suite (test/gpu/labline, marker gpu) in one bounded call, from the repository root, on a
# machine with >= 2 GPUs where the patched sglang 0.5.14 + flashinfer 0.6.12 stack is installed in /tmp/site
# (the lab line's install) and the lab model pair is generated (/tmp/lab/target, /tmp/lab/draft):
#     SGLB_DEADLINE_S=480 bash benchmark/lab/gpu_suite.sh [extra pytest arguments, e.g. -k "dist or arm_a"]
# or on the target-shaped pair (gen_lab_pair.py --preset kimi61: 61 layers, 2 x 61 - 1 = 121 fused kernels per
# verify step):
#     SGLB_LAB_TARGET=/tmp/lab61/target SGLB_LAB_DRAFT=/tmp/lab61/draft SGLB_LAB_LAYERS=61 bash benchmark/lab/gpu_suite.sh
# Three server launches (EAGLE-3 + fusion, EAGLE-3 without fusion, no speculation + fusion) and one
# two-process check; what does not fit in SGLB_DEADLINE_S is skipped. Writes four files into $OUT:
#     lab-line-gpu-suite-<date>.json  the receipt (kind lab-gpu-suite): commit it under benchmark/results/
#     gpu-suite-junit.xml             pytest's JUnit XML
#     gpu-suite-pytest.log            pytest's output
#     gpu-suite-artifacts.tar.gz      $SGLB_OUT: facts.json, progress.log, server logs, rank-0 traces, rank logs
# Environment: SGLB_TP (2: the servers' TP size), OUT (default /tmp/out), SGLB_OUT (/tmp/sglb-gpu-suite, emptied first), SGLB_DEADLINE_S (480; the
# call takes at most SGLB_DEADLINE_S + 100 s: fits a 600 s lab command at the default),
# SGLB_LAB_TARGET, SGLB_LAB_DRAFT, SGLB_LAB_LAYERS (the target's layer count the run is meant for: checked against
# its config.json here, and the suite expects 2L - 1 fused kernels per verify from it), SGLB_SITE (/tmp/site),
# SGLB_PYTHON (python3), SGLB_PYTEST_WHEELS (.whl/pytest: wheels installed into SGLB_SITE when the image has no pytest).
# Exit code: pytest's (0 = every test passed), 2 bad setting, 3 machine not prepared.
set -u
# shellcheck disable=SC1091  # lib.sh is shellchecked on its own (test_lab_session_tp2.py)
. "$(dirname "$0")/lib.sh"
case "${1:-}" in -h|--help) usage; exit 0 ;; esac
suite_runner_env /tmp/sglb-gpu-suite 480
export TORCH_SYMMMEM=CUDA  # torch symm-mem on its CUDA backend (as proven)
WHEELS=${SGLB_PYTEST_WHEELS:-.whl/pytest}

check_deadline 120
[ -d test/gpu/labline ] && [ -d python/sglang_blackwell ] || die 2 "run from the sglang-blackwell repository root (no test/gpu/labline in $PWD)"
case "$SGLB_OUT" in /|"$PWD"|"$HOME") die 2 "SGLB_OUT=$SGLB_OUT: refusing to empty it" ;; esac
command -v nvidia-smi >/dev/null || die 3 "no nvidia-smi: this needs a machine with >= 2 NVIDIA GPUs"
ngpu=$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | grep -c .)
export SGLB_TP=${SGLB_TP:-2}
[[ "$SGLB_TP" =~ ^[0-9]+$ ]] && [ "$SGLB_TP" -ge 2 ] || die 2 "SGLB_TP=$SGLB_TP: expected a whole number >= 2"
[ "$ngpu" -ge "$SGLB_TP" ] || die 3 "TP=$SGLB_TP needs >= $SGLB_TP GPUs, nvidia-smi lists $ngpu"
for v in SGLB_LAB_TARGET SGLB_LAB_DRAFT; do
  [ -f "${!v}/config.json" ] || die 3 "$v=${!v}: no config.json (generate the pair: python3 benchmark/models/gen_lab_pair.py --out $(dirname "$SGLB_LAB_TARGET") --device cuda)"
done
if [ -n "${SGLB_LAB_LAYERS:-}" ]; then
  [[ "$SGLB_LAB_LAYERS" =~ ^[0-9]+$ ]] && [ "$SGLB_LAB_LAYERS" -ge 1 ] || die 2 "SGLB_LAB_LAYERS=$SGLB_LAB_LAYERS: expected a whole number of layers >= 1"
  have=$("$PY" -c "import json, sys; print(json.load(open(sys.argv[1])).get('num_hidden_layers'))" "$SGLB_LAB_TARGET/config.json" 2>/dev/null) \
    || die 3 "SGLB_LAB_TARGET=$SGLB_LAB_TARGET: config.json is not readable JSON"
  [ "$have" = "$SGLB_LAB_LAYERS" ] || die 3 "SGLB_LAB_LAYERS=$SGLB_LAB_LAYERS, but $SGLB_LAB_TARGET/config.json says num_hidden_layers=$have (the wrong pair?)"
  export SGLB_LAB_LAYERS
fi
if ! "$PY" -c "import pytest" 2>/dev/null; then
  ls "$WHEELS"/*.whl >/dev/null 2>&1 || die 3 "$PY has no pytest and $WHEELS holds no wheels: carry pytest, pluggy, iniconfig (and packaging, pygments if the image lacks them) there"
  log "installing pytest from $WHEELS into $SITE"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$WHEELS"/*.whl 2>&1 | grep -v -i "warning: target directory" | tail -3
  "$PY" -c "import pytest" || die 3 "pytest still not importable after installing $WHEELS"
fi
"$PY" -c "import importlib.util as u, sys; m = [n for n in ('sglang', 'flashinfer', 'torch') if u.find_spec(n) is None]; print('not importable: ' + ', '.join(m)) if m else None; sys.exit(1 if m else 0)" \
  || die 3 "the lab-line stack is not on PYTHONPATH=$PYTHONPATH (install it into $SITE first)"

# a server session an earlier, hard-killed call left behind: end it by its id (bench/server.py writes it)
export SGLANG_BLACKWELL_BENCH_PIDFILE=/tmp/sglb-gpu-suite.sid
end_leftover_session
rm -rf "$SGLB_OUT"; mkdir -p "$SGLB_OUT" "$OUT"
log "deadline ${SGLB_DEADLINE_S}s; target $SGLB_LAB_TARGET${SGLB_LAB_LAYERS:+ ($SGLB_LAB_LAYERS layers)}; draft $SGLB_LAB_DRAFT; artifacts $SGLB_OUT"
log "GPU memory used before (MiB): $(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | tr '\n' ' ')"

# the suite skips what does not fit in the deadline; timeout is the hard stop (SIGTERM unwinds pytest like Ctrl-C:
# the running server is taken down and the JUnit XML written)
timeout -k 20 $(( SGLB_DEADLINE_S + 60 )) "$PY" -m pytest test/gpu/labline -m gpu -p no:cacheprovider -rA --tb=short \
  --junitxml="$OUT/gpu-suite-junit.xml" -o junit_family=xunit2 "$@" 2>&1 | tee "$OUT/gpu-suite-pytest.log"
rc=${PIPESTATUS[0]}
log "pytest exit code $rc"
end_leftover_session
log "GPU memory used after (MiB): $(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | tr '\n' ' ');" \
    "compute processes: $(nvidia-smi --query-compute-apps=pid --format=csv,noheader | grep -c .)"
"$PY" -m sglang_blackwell.qualify.gpu_suite_receipt --junit "$OUT/gpu-suite-junit.xml" --facts "$SGLB_OUT/facts.json" \
  --out "$OUT" --pytest-rc "$rc" || log "receipt NOT written"
cp "$OUT/gpu-suite-pytest.log" "$SGLB_OUT/" 2>/dev/null
tar -czf "$OUT/gpu-suite-artifacts.tar.gz" --exclude='*-TP-[1-9]*.trace.json*' -C "$(dirname "$SGLB_OUT")" \
  "$(basename "$SGLB_OUT")" || log "artifacts tarball NOT written"
ls -la "$OUT"
log "done in $(( $(date +%s) - T0 )) s"
exit "$rc"
