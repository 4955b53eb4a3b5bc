#!/usr/bin/env bash
# Runs docker-compose.yml for real with the offline images and injects the
# multi-DC faults, checking after each one that every DC's lane of every
# model (deploy/pools.yaml: demo and demo-2, one relay process per DC
# running both pools) converges to the exact ground truth (no false
# negative) with nothing lost:
#
#   1. kill -9 the active relay of dc-a (the first model's) → its standby
#      takes over every model
#   2. stop one indexer replica               → NATS queries keep being answered
#   3. cut dc-b's NATS off the WAN for 30 s while dc-b's workers publish
#   4. restart the hub NATS server
#
# Prints fault → time to converge → under/over counts summed over the
# models (each model verified on its own), and tears the stack
# down whatever happens. Skips (one line, exit 0) when no Docker engine
# answers. Uses the host ports 4222, 8080, 8222 and 9091-9094.
#
#   scripts/compose-smoke.sh [--secure]
#
# --secure adds docker-compose.secure.yml (per-role NATS users and
# permissions, leaf links over mutual TLS; certificates from
# deploy/gen-certs.sh, made when deploy/certs/ has none) and fails on any
# permission violation logged by the NATS servers.
set -euo pipefail
cd "$(dirname "$0")/.."

SECURE=0
for arg in "$@"; do
  case $arg in
    --secure) SECURE=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "compose-smoke: unknown argument $arg (want --secure)" >&2; exit 2 ;;
  esac
done

# shellcheck source=scripts/lib/compose.sh
. scripts/lib/compose.sh
NAME=compose-smoke
compose_detect "$NAME"

PROJ=${CKF_SMOKE_PROJECT:-ckfsmoke$$}
DC=("${COMPOSE[@]}" -p "$PROJ")
if [ "$SECURE" = 1 ]; then
  DC+=(-f docker-compose.yml -f docker-compose.secure.yml)
fi
CUT_SECONDS=${CUT_SECONDS:-30}
START=$(date +%s)
LOGDIR=$(mktemp -d)

ports_free 4222 8080 8222 9091 9092 9093 9094

# Bounded: the whole run (image build included) must fit in SMOKE_LIMIT.
SMOKE_LIMIT=${SMOKE_LIMIT:-480}
# shellcheck source=scripts/lib/watchdog.sh
. scripts/lib/watchdog.sh
watchdog_start compose-smoke "$SMOKE_LIMIT"

teardown() {
  local rc=$?
  watchdog_stop
  if [ $rc -ne 0 ]; then
    echo "compose-smoke: FAILED (exit $rc); last logs:" >&2
    "${DC[@]}" logs --no-color --tail=30 2>/dev/null | tail -150 >&2 || true
  fi
  "${DC[@]}" down -v --remove-orphans -t 3 >/dev/null 2>&1 || true
  rm -rf "$LOGDIR"
  exit $rc
}
trap teardown EXIT
trap 'exit 130' INT TERM

all_healthy() {
  local ids n
  ids=$("${DC[@]}" ps -q)
  n=$(echo "$ids" | wc -w)
  [ "$n" -ge 9 ] && [ "$(docker inspect -f '{{.State.Health.Status}}' $ids | grep -c '^healthy$')" -eq "$n" ]
}

ROWS=()
row() { # fault, converge seconds, run name, note; counts summed over the models
  local under over unav
  under=$(field "$3" 'under(lag)')
  over=$(model_sum "$3" 'no false negative' over)
  unav=$(field "$3" unavailable)
  ROWS+=("$(printf '%-44s %9s %12s %13s %12s  %s' "$1" "$2" "${under:-?}" "0 / ${over:-?}" "${unav:-?}" "$4")")
}

log "building the offline images (static binaries, FROM scratch)"
scripts/build-images.sh
if [ "$SECURE" = 1 ]; then
  if [ ! -s deploy/certs/ca.pem ]; then
    deploy/gen-certs.sh deploy/certs >/dev/null
  fi
  log "secure: per-role NATS users (deploy/auth), leaf links over mutual TLS (deploy/certs)"
fi
log "starting the stack (project $PROJ)"
"${DC[@]}" up -d --no-build nats-hub nats-dc-a nats-dc-b indexer-1 indexer-2 relay-a1 relay-a2 relay-b1 relay-b2 >"$LOGDIR/up" 2>&1 \
  || { cat "$LOGDIR/up" >&2; exit 1; }
t=$(now)
wait_for 120 "all containers healthy" all_healthy
wait_for 60 "both lanes of every model active and ready at the indexer" lanes_active
wait_for 30 "a dc-a active relay for every model" active_of a
wait_for 30 "a dc-b active relay for every model" active_of b
log "stack up, both lanes of ${MODELS[*]} active after $(since "$t")s"
if [ "$SECURE" = 1 ]; then
  log "hub clients by user: $(curl -sf 'localhost:8222/connz?auth=true&limit=1024' | grep -o '"authorized_user": *"[^"]*"' | sed 's/.*"\([^"]*\)"$/\1/' | sort | uniq -c | awk '{printf "%s%s×%s", sep, $2, $1; sep=", "}'); leaf links: $(curl -sf localhost:8222/leafz | grep -c '"account"')"
fi

# Baseline: 1,000 requests over both DCs and the models as fast as possible.
t=$(now)
replay baseline 0 --speed 0 --max-requests 1000
verified baseline
row "none (baseline, 1000 requests)" "$(since "$t")" baseline "replay + verify"
log "baseline verified"

# 1. kill -9 the active relay of dc-a (the first model's; the other
# model's pool may be active there too, or on the standby already).
victim=$(active_of a)
standby=relay-a1
[ "$victim" = relay-a1 ] && standby=relay-a2
declare -A held=() # model → the victim's epoch, for the models it was active for
for m in "${MODELS[@]}"; do
  if relay_active "$victim" "$m"; then held[$m]=$(relay_epoch "$victim" "$m"); fi
done
t=$(now)
docker kill -s KILL "$(cid "$victim")" >/dev/null
wait_for 60 "$standby takes over every model" relay_active "$standby"
takeover=$(since "$t")
epochs=()
for m in "${!held[@]}"; do
  [ "$(relay_epoch "$standby" "$m")" -gt "${held[$m]}" ]
  epochs+=("$m ${held[$m]}→$(relay_epoch "$standby" "$m")")
done
replay relay-kill 1 --speed 0 --max-requests 1000
verified relay-kill
row "kill -9 $victim (active, dc-a)" "$(since "$t")" relay-kill "$standby active for all after ${takeover}s, epoch $(IFS=,; echo "${epochs[*]}" | sed 's/,/, /g')"
log "relay kill: $standby took over after ${takeover}s"

# 2. stop one indexer replica: queries over the queue group keep working.
t=$(now)
"${DC[@]}" stop -t 5 indexer-2 >/dev/null 2>&1
replay indexer-stop 2 --speed 0 --max-requests 1000
verified indexer-stop
[ "$(field indexer-stop unavailable)" = 0 ]
row "stop indexer-2 (1 of 2 replicas)" "$(since "$t")" indexer-stop "all queries answered by indexer-1"
"${DC[@]}" start indexer-2 >/dev/null 2>&1
log "indexer stop: every query answered"

# 3. cut dc-b's NATS off the WAN while dc-b's workers keep publishing.
net="${PROJ}_wan"
docker network inspect "$net" >/dev/null 2>&1 || net=$(docker network ls --format '{{.Name}}' | grep "^${PROJ}.wan$")
leaf=$(cid nats-dc-b)
declare -A b_epoch=()
for m in "${MODELS[@]}"; do b_epoch[$m]=$(relay_epoch "$(active_of b "$m")" "$m"); done
docker network disconnect "$net" "$leaf"
t_cut=$(now)
# 1,500 trace requests at speed 17 last about 30 s.
replay partition 3 --speed 17 --max-requests 1500 &
rp=$!
sleep "$CUT_SECONDS"
docker network connect --alias nats-dc-b "$net" "$leaf"
t=$(now)
wait $rp
verified partition
wait_for 30 "a dc-b relay active again for every model" active_of b
epochs=()
for m in "${MODELS[@]}"; do
  b_after=$(relay_epoch "$(active_of b "$m")" "$m")
  [ "$b_after" -gt "${b_epoch[$m]}" ] # the cut fenced the epoch; the heal took a new one
  epochs+=("$m ${b_epoch[$m]}→$b_after")
done
row "WAN cut of dc-b for ${CUT_SECONDS}s" "$(since "$t")" partition "dc-b kept publishing; dc-b epoch $(IFS=,; echo "${epochs[*]}" | sed 's/,/, /g') after the heal"
log "partition: converged $(since "$t")s after the heal"

# 4. restart the hub NATS server (JetStream state on its disk).
t=$(now)
docker restart -t 5 "$(cid nats-hub)" >/dev/null
wait_for 90 "both lanes of every model active again" lanes_active
replay hub-restart 4 --speed 0 --max-requests 1000
verified hub-restart
row "restart hub NATS" "$(since "$t")" hub-restart "relays re-fenced: ${MODELS[0]} dc-a epoch $(relay_epoch "$(active_of a)"), dc-b epoch $(relay_epoch "$(active_of b)")"
log "hub restart: converged"

if [ "$SECURE" = 1 ]; then
  # Every role did its job under its permissions: no server refused one.
  violations=$("${DC[@]}" logs --no-color nats-hub nats-dc-a nats-dc-b 2>&1 | grep -cE '(Publish|Subscription) Violation' || true)
  log "secure: $violations permission violations logged by the NATS servers"
  if [ "$violations" != 0 ]; then
    "${DC[@]}" logs --no-color nats-hub nats-dc-a nats-dc-b 2>&1 | grep -E '(Publish|Subscription) Violation' | sort | uniq -c | sort -rn | head -20 >&2
    exit 1
  fi
fi

echo
printf '%-44s %9s %12s %13s %12s  %s\n' "fault" "converge" "under(lag)" "under / over" "unavailable" "note"
printf '%-44s %9s %12s %13s %12s  %s\n' "" "(s)" "during" "after" "queries" ""
for r in "${ROWS[@]}"; do echo "$r"; done
echo
echo "compose-smoke: OK in $(( $(date +%s) - START ))s, models ${MODELS[*]} each verified (converge: fault → every sampled lane answer at or above the exact depth; under(lag): live answers below the truth while the fault lasted; after: each model's sampled queries × 2 DCs once settled; counts summed over the models)"
