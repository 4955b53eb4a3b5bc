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
#
# The watchdog is one process with no child: it waits with bash's own
# `read -t` on a FIFO nobody writes. An earlier form waited on a `sleep`
# child, and a TERM that reached that child between its fork and its exec
# was swallowed by the inherited trap, so the sleep outlived the script.
watchdog_start() {
  WATCHDOG_NAME=$1 WATCHDOG_LIMIT=$2
  trap 'echo "$WATCHDOG_NAME: over ${WATCHDOG_LIMIT}s, aborting" >&2; exit 124' ALRM
  WATCHDOG_DIR=$(mktemp -d)
  mkfifo "$WATCHDOG_DIR/wait"
  (
    exec </dev/null >/dev/null 2>&1
    # Opened read-write, the FIFO never reaches end of file and never has
    # data: read returns only at the limit (status over 128).
    exec 3<>"$WATCHDOG_DIR/wait"
    rm -rf "$WATCHDOG_DIR"
    read -r -t "$WATCHDOG_LIMIT" -u 3 _ || kill -ALRM $$
  ) &
  WATCHDOG_PID=$!
}

watchdog_stop() {
  # Quiet as a whole: bash 5.2 can warn "wait_for: No record of process"
  # when it reaps the watchdog during this function's own commands.
  {
    if [ -n "${WATCHDOG_DIR:-}" ]; then
      rm -rf "$WATCHDOG_DIR"
      WATCHDOG_DIR=
    fi
    if [ -n "${WATCHDOG_PID:-}" ]; then
      kill "$WATCHDOG_PID" || true
      wait "$WATCHDOG_PID" || true
      WATCHDOG_PID=
    fi
  } 2>/dev/null
}
