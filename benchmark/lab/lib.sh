# shellcheck shell=bash
# Shared by the lab scripts (source it): end a server session a hard-killed earlier call left behind.
# bench eagle3 writes the live server's session id to $SGLANG_BLACKWELL_BENCH_PIDFILE while it runs; a call killed
# at its limit leaves the session (and its GPU memory) behind on the warm machine. The caller defines `log`.

end_leftover_session() {
  [ -s "$SGLANG_BLACKWELL_BENCH_PIDFILE" ] || return 0
  local sid p
  sid=$(cat "$SGLANG_BLACKWELL_BENCH_PIDFILE")
  if [[ "$sid" =~ ^[0-9]+$ ]] && [ -n "$(ps -o pid= -s "$sid" 2>/dev/null)" ]; then
    log "ending leftover server session $sid"; kill -KILL -- "-$sid" 2>/dev/null
    for p in $(ps -o pid= -s "$sid" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done; sleep 3
  fi
  rm -f "$SGLANG_BLACKWELL_BENCH_PIDFILE"
}
