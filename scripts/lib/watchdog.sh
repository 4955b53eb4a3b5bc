# shellcheck shell=bash
# A time limit for a script (sourced; bash).
#
#   watchdog_start NAME LIMIT   # once LIMIT seconds have passed, the script
#                               # prints "NAME: over LIMITs, aborting" on its
#                               # stderr and exits 124 (its EXIT trap runs)
#   watchdog_stop               # from the script's EXIT trap
#
# The watchdog holds none of the script's file descriptors, so a caller
# that captures the script's output (out=$(script)) gets it as soon as the
# script ends, and watchdog_stop ends the watchdog and its sleep with the
# script: it never signals a PID that may by then belong to another
# process. The script is signalled with ALRM, so TERM and INT keep meaning
# what the script's own traps say.
watchdog_start() {
  WATCHDOG_NAME=$1 WATCHDOG_LIMIT=$2
  trap 'echo "$WATCHDOG_NAME: over ${WATCHDOG_LIMIT}s, aborting" >&2; exit 124' ALRM
  (
    exec </dev/null >/dev/null 2>&1
    trap 'kill "$s" 2>/dev/null; exit 0' TERM
    sleep "$WATCHDOG_LIMIT" &
    s=$!
    wait "$s" && kill -ALRM $$
  ) &
  WATCHDOG_PID=$!
}

watchdog_stop() {
  if [ -n "${WATCHDOG_PID:-}" ]; then
    kill "$WATCHDOG_PID" 2>/dev/null || true
    wait "$WATCHDOG_PID" 2>/dev/null || true
    WATCHDOG_PID=
  fi
}
