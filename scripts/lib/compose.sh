# Helpers shared by scripts/compose-smoke.sh and scripts/chaos.sh. Source it
# after `set -euo pipefail`; it defines functions only, plus:
#
#   compose_detect NAME   sets COMPOSE=(docker compose | docker-compose), or
#                         prints "NAME: skipped (…)" and exits 0 when no
#                         Docker engine (or no Compose) answers
#
# The functions read these globals of the caller:
#
#   DC       the compose command with its project and files, an array
#   PROJ     the compose project name
#   LOGDIR   where replay runs write their output
#   START    the script's start (date +%s), for log
#   NAME     the script's name, for messages
# shellcheck shell=bash

compose_detect() {
  if ! docker info >/dev/null 2>&1; then
    echo "$1: skipped (no Docker engine answers)"
    exit 0
  fi
  if docker compose version >/dev/null 2>&1; then
    COMPOSE=(docker compose)
  elif command -v docker-compose >/dev/null; then
    COMPOSE=(docker-compose)
  else
    echo "$1: skipped (Docker engine without Compose)"
    exit 0
  fi
}

# ports_free PORT...: fails naming the first host port already in use.
ports_free() {
  local port
  for port in "$@"; do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "$NAME: host port $port is in use; the stack publishes it" >&2
      return 1
    fi
  done
}

now() { date +%s.%N; }
# since T: seconds from T (a now) until now, one decimal.
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
# between A B: seconds from A to B, one decimal.
between() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
log() { printf '[%5ss] %s\n' "$(($(date +%s) - START))" "$*"; }
# cid SERVICE: its container (running or not) in project $PROJ; docker ps
# answers in milliseconds where docker-compose v1 takes a second.
cid() {
  docker ps -aq --filter "label=com.docker.compose.project=$PROJ" \
    --filter "label=com.docker.compose.service=$1" --filter "label=com.docker.compose.oneoff=False"
}

# wait_for SECONDS WHAT CMD...: polls CMD every 0.5 s.
wait_for() {
  local limit=$1 what=$2 deadline=$(($(date +%s) + $1))
  shift 2
  until "$@" >/dev/null 2>&1; do
    if [ "$(date +%s)" -ge $deadline ]; then
      echo "$NAME: $what not reached within ${limit}s" >&2
      return 1
    fi
    sleep 0.5
  done
}

# healthy SERVICE...: every named service's container of project $PROJ
# reports healthy.
healthy() {
  local st s
  st=$(docker ps --filter "label=com.docker.compose.project=$PROJ" --filter "label=com.docker.compose.oneoff=False" \
    --format '{{.Label "com.docker.compose.service"}} {{.Status}}')
  for s in "$@"; do
    grep -q "^$s .*(healthy)" <<<"$st" || return 1
  done
}

# relay_port relay-<letter><n>: its host port, 9090 + 2 × the letter's
# index + n (relay-a1 9091, relay-a2 9092, relay-b1 9093 … relay-p2 9122).
relay_port() {
  local s=${1#relay-} i
  i=$(($(printf '%d' "'${s:0:1}") - 97))
  echo $((9090 + 2 * i + ${s:1}))
}
relay_state() { curl -sf "localhost:$(relay_port "$1")/v1/status" | sed -n 's/.*"state":"\([a-z]*\)".*/\1/p'; }
relay_epoch() { curl -sf "localhost:$(relay_port "$1")/v1/status" | sed -n 's/.*"epoch":\([0-9]*\).*/\1/p'; }
relay_active() { [ "$(relay_state "$1")" = active ]; }
active_of() { # DC letter → the active relay's service name
  local r
  for r in "relay-$1"1 "relay-$1"2; do
    if relay_active "$r"; then
      echo "$r"
      return 0
    fi
  done
  return 1
}
# lanes_active [N]: the indexer on localhost:8080 has N (default 2) active lanes.
lanes_active() { [ "$(curl -sf localhost:8080/v1/lanes | grep -o '"state":"active"' | wc -l)" -eq "${1:-2}" ]; }

# replay NAME HASH_SPACE [flags...]: one replayer run (its own hash space,
# so earlier phases' blocks never count); its output goes to $LOGDIR/NAME.
replay() {
  local name=$1 space=$2
  shift 2
  "${DC[@]}" run --rm -T --no-deps replayer --repeat=false --hash-space "$space" \
    --status-interval 5s --verify-timeout "${VERIFY_TIMEOUT:-150s}" "$@" >"$LOGDIR/$name" 2>&1
}
# field NAME KEY: the last value of KEY=<n> in a run's status lines.
field() { grep -o "$2=[0-9]*" "$LOGDIR/$1" | tail -1 | cut -d= -f2; }
verified() { grep -q 'no false negative' "$LOGDIR/$1"; }
