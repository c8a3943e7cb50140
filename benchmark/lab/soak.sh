#!/bin/bash
# The soak (test/gpu/soak, marker gpu; issue 31 item 4), from the repository root, on a machine with >= 1 GPU where
# the lab bundle is installed in $SGLB_SITE and the lab pair is generated with its tokenizer (/tmp/lab/target,
# /tmp/lab/draft: benchmark/models/gen_lab_pair.py). Two user servers on the one GPU at the same time (each started
# as users start it, `sglang-blackwell serve -- ...` on --host 0.0.0.0 with --api-key): without speculation and with
# the EAGLE-3 draft; one client drives both with the same seeded schedule (prompts of 256-32k tokens, outputs of
# 16-512, concurrency 1-32 in phases repeating every minute, a tenth of the requests cut by the client) for
# SGLB_SOAK_S seconds. Verdict (qualify/soak_verdict.py): no errors, p99 ITL and GPU / host memory flat from the
# first full minute to the last, reference outputs unchanged, the KV pool back to idle, the same server process.
#     bash benchmark/lab/soak.sh [run]            the whole soak in this call (SGLB_SOAK_S=420 fits a 600 s call)
#     bash benchmark/lab/soak.sh start            the soak detached (setsid nohup): returns at once
#     bash benchmark/lab/soak.sh status           running / finished / none, and the progress log's tail
#     bash benchmark/lab/soak.sh wait [SECONDS]   wait up to SECONDS (540) for the detached soak to finish, then
#                                                 write the receipt and the files into $OUT
#     bash benchmark/lab/soak.sh stop             end a detached soak (its servers are taken down)
# Writes into $OUT (run; wait, once the soak has finished):
#     lab-soak-<date>.json      the receipt (kind lab-soak: per-minute buckets per arm, the verdict per check):
#                               commit it under benchmark/results/
#     soak-junit.xml            pytest's JUnit XML
#     soak-pytest.log           pytest's output
#     soak-artifacts.tar.gz     $SGLB_OUT: facts.json, progress.log, server logs
# Environment: OUT (/tmp/out), SGLB_OUT (/tmp/sglb-soak, emptied at the start), SGLB_SOAK_STATE
# (/tmp/sglb-soak-state: the detached soak's pid, exit code and log), SGLB_SOAK_S (600), SGLB_SOAK_BUCKET_S (60),
# SGLB_SOAK_SEED (31), SGLB_DEADLINE_S (SGLB_SOAK_S + 420: pytest is killed past it), SGLB_LAB_TARGET,
# SGLB_LAB_DRAFT, SGLB_SITE (/tmp/site), SGLB_PYTHON (python3).
# Exit codes: pytest's (0 = the soak passed), 2 bad setting, 3 machine not prepared, 4 a soak still running (wait:
# not finished in SECONDS; start, run: one is running already; status: running), 5 no soak started (wait, status).
set -u
# shellcheck disable=SC1091  # lib.sh is shellchecked on its own (test_lab_session_tp2.py)
. "$(dirname "$0")/lib.sh"
action=${1:-run}
case "$action" in -h|--help) usage; exit 0 ;; run|start|status|wait|stop|_detached) ;;
  *) die 2 "unknown action '$action': run, start, status, wait [SECONDS] or stop" ;; esac
SOAK_S=${SGLB_SOAK_S:-600}
[[ "$SOAK_S" =~ ^[0-9]+$ ]] && [ "$SOAK_S" -ge 3 ] || die 2 "SGLB_SOAK_S=$SOAK_S: expected whole seconds, at least 3"
export SGLB_SOAK_S=$SOAK_S
suite_runner_env /tmp/sglb-soak $(( SOAK_S + 420 ))
STATE=${SGLB_SOAK_STATE:-/tmp/sglb-soak-state}
export SGLB_SOAK_SIDS=$STATE/servers.sids  # both servers' session ids (the soak writes them)

# running: the detached soak's session leader still runs
running() { [ -s "$STATE/pid" ] && [ -n "$(ps -o pid= -s "$(cat "$STATE/pid")" 2>/dev/null)" ]; }

# the soak itself (foreground or detached): pytest, bounded; its exit code to $STATE/rc
soak_pytest() {
  timeout -k 20 "$SGLB_DEADLINE_S" "$PY" -m pytest test/gpu/soak -m gpu -p no:cacheprovider -rA --tb=line \
    --junitxml="$SGLB_OUT/soak-junit.xml" -o junit_family=xunit2 2>&1 | tee "$SGLB_OUT/soak-pytest.log"
  local rc=${PIPESTATUS[0]}
  log "pytest exit code $rc"
  end_leftover_session "$SGLB_SOAK_SIDS"
  end_leftover_session
  echo "$rc" > "$STATE/rc"
}

# the receipt and the files into $OUT; exits with pytest's code
collect() {
  local rc
  rc=$(cat "$STATE/rc" 2>/dev/null || echo 137)  # no exit code: the soak was killed
  mkdir -p "$OUT"
  "$PY" -m sglang_blackwell.qualify.soak_receipt --junit "$SGLB_OUT/soak-junit.xml" --facts "$SGLB_OUT/facts.json" \
    --out "$OUT" --pytest-rc "$rc" || log "receipt NOT written"
  cp "$SGLB_OUT/soak-junit.xml" "$SGLB_OUT/soak-pytest.log" "$OUT/" 2>/dev/null
  cp "$STATE/runner.log" "$SGLB_OUT/" 2>/dev/null
  tar -czf "$OUT/soak-artifacts.tar.gz" -C "$(dirname "$SGLB_OUT")" "$(basename "$SGLB_OUT")" \
    || log "artifacts tarball NOT written"
  ls -la "$OUT"
  log "done in $(( $(date +%s) - T0 )) s"
  exit "$rc"
}

# what is running, or how it ended
report() {
  if running; then log "soak running (session $(cat "$STATE/pid"), started $(( $(date +%s) - $(cat "$STATE/started") )) s ago)"
  elif [ -s "$STATE/rc" ]; then log "soak finished: pytest exit code $(cat "$STATE/rc")"
  elif [ -s "$STATE/pid" ]; then log "soak ended without an exit code (killed)"
  else log "no soak started (no $STATE/pid)"; fi
  tail -n 5 "$SGLB_OUT/progress.log" 2>/dev/null
}

# fresh: the checks and the clean start of a new soak
fresh() {
  running && die 4 "a soak is running already (session $(cat "$STATE/pid")): soak.sh wait, or soak.sh stop"
  suite_preflight soak sglang pytest
  suite_fresh_start /tmp/sglb-soak.sid
  end_leftover_session "$SGLB_SOAK_SIDS"
  rm -rf "$STATE"; mkdir -p "$STATE"
  date +%s > "$STATE/started"
  log "soak ${SOAK_S}s in buckets of ${SGLB_SOAK_BUCKET_S:-60}s; state $STATE"
}

case "$action" in
  run)
    fresh
    soak_pytest
    collect ;;
  start)
    fresh
    setsid nohup bash "$0" _detached > "$STATE/runner.log" 2>&1 < /dev/null &
    for _ in $(seq 50); do [ -s "$STATE/pid" ] && break; sleep 0.1; done
    [ -s "$STATE/pid" ] || die 3 "the detached soak did not start: $(tail -n 5 "$STATE/runner.log")"
    log "soak started detached (session $(cat "$STATE/pid")); soak.sh wait collects it"
    exit 0 ;;
  _detached)
    echo $$ > "$STATE/pid"
    soak_pytest ;;
  status)
    report
    running && exit 4
    [ -s "$STATE/pid" ] || exit 5
    exit 0 ;;
  wait)
    limit=${2:-540}
    [[ "$limit" =~ ^[0-9]+$ ]] || die 2 "wait $limit: expected whole seconds"
    [ -s "$STATE/pid" ] || { report; exit 5; }
    end=$(( $(date +%s) + limit ))
    while running && [ "$(date +%s)" -lt "$end" ]; do sleep 2; done
    if running; then report; die 4 "the soak is still running after ${limit}s: soak.sh wait again"; fi
    report
    collect ;;
  stop)
    if running; then
      sid=$(cat "$STATE/pid")
      log "stopping the soak (session $sid)"
      for p in $(ps -o pid= -s "$sid"); do kill -TERM "$p" 2>/dev/null; done
      for _ in $(seq 60); do running || break; sleep 1; done
      for p in $(ps -o pid= -s "$sid" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
    fi
    end_leftover_session "$SGLB_SOAK_SIDS"
    end_leftover_session /tmp/sglb-soak.sid
    report
    exit 0 ;;
esac
