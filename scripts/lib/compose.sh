# Helpers shared by scripts/compose-smoke.sh and scripts/chaos.sh. Source it
# after `set -euo pipefail`; it defines functions only, plus:
#
#   compose_detect NAME   sets COMPOSE=(docker compose | docker-compose), or
#                         prints "NAME: skipped (…)" and exits 0 when no
#                         Docker engine (or no Compose) answers; sets
#                         MODELS to the models of deploy/pools.yaml, the
#                         pools every relay runs (and the indexers serve)
#
# Every check holds per model: a relay status lists a pool per model, the
# indexer a lane per model and DC, and the replayer prefixes each model's
# lines with "[MODEL] " when it replays several.
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
  mapfile -t MODELS < <(sed -n 's/^ *- domain: *\([^ #]*\).*/\1/p' deploy/pools.yaml)
  if [ ${#MODELS[@]} -eq 0 ]; then
    echo "$1: deploy/pools.yaml declares no pool" >&2
    exit 2
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
# relay_pools SERVICE: one line "MODEL STATE EPOCH" per pool of the relay's
# /v1/status (a relay of one domain answers with one such object, a relay
# with --pools-file with a list of them).
relay_pools() {
  curl -sf "localhost:$(relay_port "$1")/v1/status" |
    grep -o '"state":"[a-z]*","domain":"[^"]*"[^{}]*"epoch":[0-9]*' |
    sed 's/"state":"\([a-z]*\)","domain":"\([^"]*\)".*"epoch":\([0-9]*\)/\2 \1 \3/'
}
# relay_state SERVICE [MODEL], relay_epoch SERVICE [MODEL]: the state and
# epoch of the relay's pool of MODEL (default: the first model).
relay_state() { relay_pools "$1" | awk -v m="${2:-${MODELS[0]}}" '$1 == m { print $2 }'; }
relay_epoch() { relay_pools "$1" | awk -v m="${2:-${MODELS[0]}}" '$1 == m { print $3 }'; }
# relay_active SERVICE [MODEL]: the relay is active for MODEL, or without
# one for every model (as a standby is once it took over from a dead relay).
relay_active() {
  local pools m
  if [ $# -gt 1 ]; then
    [ "$(relay_state "$1" "$2")" = active ]
    return
  fi
  pools=$(relay_pools "$1") || return 1
  for m in "${MODELS[@]}"; do
    grep -q "^$m active " <<<"$pools" || return 1
  done
}
# active_of X [MODEL]: the service name of dc-X's relay active for MODEL
# (default: the first model). Fails unless MODEL (or without one, every
# model) has an active relay in dc-X: the pools of one DC may be active on
# different relays.
active_of() {
  local m r found first= models=("${MODELS[@]}")
  [ $# -lt 2 ] || models=("$2")
  for m in "${models[@]}"; do
    found=
    for r in "relay-$1"1 "relay-$1"2; do
      if relay_active "$r" "$m"; then
        found=$r
        break
      fi
    done
    [ -n "$found" ] || return 1
    first=${first:-$found}
  done
  echo "$first"
}
# lanes_active [N]: the indexer on localhost:8080 has N (default 2) active
# lanes of every model and is ready for each.
lanes_active() {
  local lanes m
  lanes=$(curl -sf localhost:8080/v1/lanes) || return 1
  for m in "${MODELS[@]}"; do
    [ "$(grep -o '"domain":"[^"]*"[^{}]*"state":"[a-z]*"' <<<"$lanes" | grep -c "^\"domain\":\"$m\".*\"state\":\"active\"$")" -eq "${1:-2}" ] || return 1
    curl -sf -o /dev/null "localhost:8080/readyz?domain=$m" || return 1
  done
}

# replay NAME HASH_SPACE [flags...]: one replayer run (its own hash space,
# so earlier phases' blocks never count); its output goes to $LOGDIR/NAME.
replay() {
  local name=$1 space=$2
  shift 2
  "${DC[@]}" run --rm -T --no-deps replayer --repeat=false --hash-space "$space" \
    --status-interval 5s --verify-timeout "${VERIFY_TIMEOUT:-150s}" "$@" >"$LOGDIR/$name" 2>&1
}
# model_out NAME MODEL: the lines of run NAME for MODEL: those the replayer
# prefixed with "[MODEL] " and its errors naming the model (every line when
# it replays one model, unprefixed).
model_out() {
  if [ ${#MODELS[@]} -gt 1 ]; then
    grep -F -e "[$2] " -e "model $2: " "$LOGDIR/$1" || true
  else
    cat "$LOGDIR/$1"
  fi
}
# add A B: their sum, or ? when either is not a number.
add() {
  if [[ $1 =~ ^[0-9]+$ && $2 =~ ^[0-9]+$ ]]; then echo $(($1 + $2)); else echo '?'; fi
}
# model_sum NAME PATTERN KEY: over the models, the sum of KEY=<n> in each
# model's last line of run NAME matching PATTERN (? if a model has none).
model_sum() {
  local m v sum=0
  for m in "${MODELS[@]}"; do
    v=$(model_out "$1" "$m" | grep -e "$2" | tail -1 | grep -o "$3=[0-9]*" | tail -1 | cut -d= -f2 || true)
    sum=$(add "$sum" "$v")
  done
  echo "$sum"
}
# field NAME KEY: KEY=<n> of every model's last status line, summed.
field() { model_sum "$1" ' t=\|^t=' "$2"; }
# verified NAME: every model's verification passed (no false negative).
verified() {
  local m out
  for m in "${MODELS[@]}"; do
    out=$(model_out "$1" "$m")
    grep -q 'no false negative' <<<"$out" || return 1
  done
}
