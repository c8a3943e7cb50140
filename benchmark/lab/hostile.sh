#!/bin/bash
# The hostile-request GPU suite (test/gpu/hostile, marker gpu; issue 31 item 3) in one bounded call, from the
# repository root, on a machine with >= 1 GPU where the lab bundle is installed in $SGLB_SITE and the lab pair is
# generated with its tokenizer (/tmp/lab/target, /tmp/lab/draft: benchmark/models/gen_lab_pair.py):
#     SGLB_DEADLINE_S=300 bash benchmark/lab/hostile.sh [extra pytest arguments, e.g. -k baseline]
# Two servers at TP=1, one after the other, each started as users start it (`sglang-blackwell serve -- ...`, with
# the tokenizer) on --host 0.0.0.0 with --api-key and no --admin-api-key: without speculation, then with the EAGLE-3
# draft. Each gets every hostile case (out-of-vocab ids, prompts at and past the context, 64 MiB and 100k-deep
# bodies, invalid grammars, 200 clients hanging up, an abort storm, c=256 past --max-queued-requests, every admin
# endpoint without its key, ...); after each: /health, the same scheduler process, the reference text, the KV pool
# back to idle. A server a case killed is started again for the cases after it while the deadline allows.
# Writes into $OUT:
#     lab-hostile-<date>.json      the receipt (kind lab-hostile: case x arm x verdict): commit it under
#                                  benchmark/results/
#     hostile-junit.xml            pytest's JUnit XML
#     hostile-pytest.log           pytest's output
#     hostile-artifacts.tar.gz     $SGLB_OUT: facts.json, progress.log, server logs
# Environment: OUT (/tmp/out), SGLB_OUT (/tmp/sglb-hostile, emptied first), SGLB_DEADLINE_S (300; the call takes at
# most SGLB_DEADLINE_S + 90 s), SGLB_LAB_TARGET, SGLB_LAB_DRAFT, SGLB_SITE (/tmp/site), SGLB_PYTHON (python3).
# Exit code: pytest's (0 = every case clean on both arms), 2 bad setting, 3 machine not prepared.
set -u
# shellcheck disable=SC1091  # lib.sh is shellchecked on its own (test_lab_session_tp2.py)
. "$(dirname "$0")/lib.sh"
case "${1:-}" in -h|--help) usage; exit 0 ;; esac
suite_runner_env /tmp/sglb-hostile 300

suite_preflight hostile sglang transformers pytest
suite_fresh_start /tmp/sglb-hostile.sid

timeout -k 20 $(( SGLB_DEADLINE_S + 60 )) "$PY" -m pytest test/gpu/hostile -m gpu -p no:cacheprovider -rA --tb=line \
  --junitxml="$OUT/hostile-junit.xml" -o junit_family=xunit2 "$@" 2>&1 | tee "$OUT/hostile-pytest.log"
rc=${PIPESTATUS[0]}
log "pytest exit code $rc"
end_leftover_session
log "GPU memory used after (MiB): $(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | tr '\n' ' ');" \
    "compute processes: $(nvidia-smi --query-compute-apps=pid --format=csv,noheader | grep -c .)"
"$PY" -m sglang_blackwell.qualify.hostile_receipt --junit "$OUT/hostile-junit.xml" --facts "$SGLB_OUT/facts.json" \
  --out "$OUT" --pytest-rc "$rc" || log "receipt NOT written"
cp "$OUT/hostile-pytest.log" "$SGLB_OUT/" 2>/dev/null
tar -czf "$OUT/hostile-artifacts.tar.gz" -C "$(dirname "$SGLB_OUT")" "$(basename "$SGLB_OUT")" \
  || log "artifacts tarball NOT written"
ls -la "$OUT"
log "done in $(( $(date +%s) - T0 )) s"
exit "$rc"
