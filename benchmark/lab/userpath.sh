#!/bin/bash
# The user-path GPU tests (test/gpu/userpath, marker gpu) in one bounded call, from the repository root, on a
# machine with >= 1 GPU where the lab bundle is installed in $SGLB_SITE and the lab pair is generated with its
# tokenizer (/tmp/lab/target, /tmp/lab/draft: benchmark/models/gen_lab_pair.py):
#     SGLB_DEADLINE_S=420 bash benchmark/lab/userpath.sh [extra pytest arguments, e.g. -k openai]
# Two servers at TP=1, one after the other, each started as users start it (`sglang-blackwell serve -- ...`:
# tokenizer, default grammar backend, radix cache, decode CUDA graphs), driven by the real `openai` client: without
# speculation, then with the EAGLE-3 draft. Meanwhile benchmark/lab/launch_path_probe.py imports the launch path
# once more on this machine's image (no GPU). Writes into $OUT:
#     lab-userpath-<date>.json     the receipt (kind lab-userpath): commit it under benchmark/results/
#     userpath-junit.xml           pytest's JUnit XML
#     userpath-pytest.log          pytest's output
#     userpath-artifacts.tar.gz    $SGLB_OUT: facts.json, progress.log, server logs, launch-path-probe.json
# Environment: OUT (/tmp/out), SGLB_OUT (/tmp/sglb-userpath, emptied first), SGLB_DEADLINE_S (420; the call takes at
# most SGLB_DEADLINE_S + 90 s), SGLB_LAB_TARGET, SGLB_LAB_DRAFT, SGLB_SITE (/tmp/site), SGLB_PYTHON (python3),
# PROBE (1; 0: no launch-path probe).
# Exit code: pytest's (0 = every test passed), 2 bad setting, 3 machine not prepared.
set -u
# shellcheck disable=SC1091  # lib.sh is shellchecked on its own (test_lab_session_tp2.py)
. "$(dirname "$0")/lib.sh"
case "${1:-}" in -h|--help) usage; exit 0 ;; esac
suite_runner_env /tmp/sglb-userpath 420

suite_preflight userpath sglang openai transformers pytest
suite_fresh_start /tmp/sglb-userpath.sid

probe=
if [ "${PROBE:-1}" = 1 ]; then  # CPU only (no GPU visible to it): it must not take GPU memory from the servers
  CUDA_VISIBLE_DEVICES='' timeout 150 "$PY" benchmark/lab/launch_path_probe.py --tokenizer "$SGLB_LAB_TARGET" \
    --site "$SITE" --out "$SGLB_OUT/launch-path-probe.json" > "$SGLB_OUT/launch-path-probe.log" 2>&1 &
  probe=$!
fi

timeout -k 20 $(( SGLB_DEADLINE_S + 60 )) "$PY" -m pytest test/gpu/userpath -m gpu -p no:cacheprovider -rA --tb=short \
  --junitxml="$OUT/userpath-junit.xml" -o junit_family=xunit2 "$@" 2>&1 | tee "$OUT/userpath-pytest.log"
rc=${PIPESTATUS[0]}
log "pytest exit code $rc"
end_leftover_session
if [ -n "$probe" ]; then
  wait "$probe"; log "launch-path probe: exit $? ($(tail -1 "$SGLB_OUT/launch-path-probe.log" | head -c 300))"
fi
log "GPU memory used after (MiB): $(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | tr '\n' ' ');" \
    "compute processes: $(nvidia-smi --query-compute-apps=pid --format=csv,noheader | grep -c .)"
"$PY" -m sglang_blackwell.qualify.userpath_receipt --junit "$OUT/userpath-junit.xml" --facts "$SGLB_OUT/facts.json" \
  --out "$OUT" --pytest-rc "$rc" || log "receipt NOT written"
cp "$OUT/userpath-pytest.log" "$SGLB_OUT/" 2>/dev/null
tar -czf "$OUT/userpath-artifacts.tar.gz" -C "$(dirname "$SGLB_OUT")" "$(basename "$SGLB_OUT")" \
  || log "artifacts tarball NOT written"
ls -la "$OUT"
log "done in $(( $(date +%s) - T0 )) s"
exit "$rc"
