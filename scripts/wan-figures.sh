#!/usr/bin/env bash
# Measures the WAN figures of docs/chaos.md on the clustered stack
# (docker-compose.yml + docker-compose.cluster.yml), impairing dc-b's link
# through its ckf-wanproxy:
#
#   latency    event → queryable p50/p99 (ckf-wanprobe: a fresh block
#              published to dc-b's leaf until the indexer answers it, one
#              probe at a time) at RTT 0, 50 ms (25 ± 5 ms each way) and
#              150 ms (75 ± 10 ms), idle and beside a 1,000 events/s load;
#              dc-a's leaf is wired straight to the hub (no proxy) as the
#              same path without a WAN hop
#   keepup     a paced 10,000 events/s load on dc-b for 20 s at 150 ms RTT
#              (and at RTT 0): acknowledged rate, drain, probes under load,
#              relay CPU
#   bootstrap  a 4,194,304-bucket lane (32 MiB body; --expected-blocks
#              13421772, set by the environment of the override only) with
#              dc-b's link capped at 10 Mbit/s: relay start → lane active,
#              and a kill -9 takeover → lane active under the new epoch;
#              first with the compose defaults (lease TTL 3s, leaf ping
#              window 2s × 3, write deadline 10s), then with the link
#              settings such a link needs
#
#   scripts/wan-figures.sh [--no-build] [--only latency|keepup|bootstrap]
#
# Skips (one line, exit 0) when no Docker engine answers. Uses the ports of
# scripts/chaos.sh; every stack is torn down on exit.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=1
ONLY=
while [ $# -gt 0 ]; do
  case $1 in
    --no-build) BUILD=0 ;;
    --only) ONLY=${2:?--only needs a section}; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "wan-figures: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
case $ONLY in "" | latency | keepup | bootstrap) ;; *) echo "wan-figures: --only latency, keepup or bootstrap" >&2; exit 2 ;; esac

# shellcheck source=scripts/lib/compose.sh
. scripts/lib/compose.sh
NAME=wan-figures
compose_detect "$NAME"
START=$(date +%s)
LOGDIR=$(mktemp -d)
PROJ=
DC=()
WAN_B=127.0.0.1:8475
SUMMARY=()
INFRA=(nats-hub-1 nats-hub-2 nats-hub-3 wan-dc-a wan-dc-b nats-dc-a nats-dc-b indexer-1 indexer-2)

ports_free 4222 8080 8222 8223 8224 8474 8475 9091 9092 9093 9094

down() {
  if [ -n "$PROJ" ]; then
    "${DC[@]}" down -v --remove-orphans -t 3 >/dev/null 2>&1 || true
  fi
  PROJ=
}
teardown() {
  local rc=$?
  if [ $rc -ne 0 ] && [ -n "$PROJ" ]; then
    echo "wan-figures: FAILED (exit $rc); last logs:" >&2
    "${DC[@]}" logs --no-color --tail=15 2>/dev/null | tail -80 >&2 || true
  fi
  down
  rm -rf "$LOGDIR"
  exit $rc
}
trap teardown EXIT
trap 'exit 130' INT TERM

# stack NAME [extra compose file]: a fresh project with the infrastructure up.
stack() {
  PROJ=ckfwan$1$$
  DC=("${COMPOSE[@]}" -p "$PROJ" -f docker-compose.yml -f docker-compose.cluster.yml ${2:+-f "$2"})
  "${DC[@]}" up -d --no-build "${INFRA[@]}" >"$LOGDIR/up" 2>&1 || { cat "$LOGDIR/up" >&2; exit 1; }
  wait_for 180 "the infrastructure healthy" healthy "${INFRA[@]}"
}
wan() { curl -sf -X POST "$WAN_B/v1/$1" -d "${2:-}" >/dev/null; }
dc_lane() { # DC → "state epoch" of its lane at indexer-1
  curl -sf localhost:8080/v1/lanes | python3 -c '
import json, sys
for l in json.load(sys.stdin)["lanes"]:
    if l["dc"] == sys.argv[1]:
        print(l["state"], l["epoch"])' "$1"
}
lane_active() { [ "$(dc_lane "$1" | cut -d' ' -f1)" = active ]; }
lane_active_above() { # DC EPOCH: active under an epoch above EPOCH
  local s
  s=$(dc_lane "$1")
  [ "${s% *}" = active ] && [ "${s#* }" -gt "$2" ]
}
probe() { # DC flags...: ckf-wanprobe from the replayer's networks
  local dc=$1
  shift
  "${DC[@]}" run --rm -T --no-deps --entrypoint /ckf-wanprobe replayer --nats-url "nats://nats.$dc.local:4222" \
    --dc "$dc" --domain demo --indexer-url http://indexer-1:8080 "$@"
}
note() {
  SUMMARY+=("$*")
  log "$*"
}
load_avg() { cut -d' ' -f1-3 /proc/loadavg; }
relay_counters() { # relay-b1's "events deltas pending" counters
  curl -sf localhost:9093/metrics | awk '
    /^ckf_relay_events_total/ { e += $NF }
    /^ckf_relay_deltas_published_total/ { d += $NF }
    /^ckf_relay_input_pending_messages/ { p += $NF }
    END { print e + 0, d + 0, p + 0 }'
}
cpu_of() { # SERVICE: its CPU % and RSS now (docker stats)
  docker stats --no-stream --format '{{.CPUPerc}} {{.MemUsage}}' "$(cid "$1")" | sed 's| / .*||'
}

if [ "$BUILD" = 1 ]; then
  log "building the offline images"
  scripts/build-images.sh
fi

if [ -z "$ONLY" ] || [ "$ONLY" = latency ] || [ "$ONLY" = keepup ]; then
  # dc-a's leaf dials the hub nodes directly: the same path, no WAN hop.
  direct=$LOGDIR/direct-dc-a.yml
  cat >"$direct" <<'EOF'
services:
  nats-dc-a:
    environment:
      HUB_LEAF_URL_1: nats-leaf://nats-hub-1:7422
      HUB_LEAF_URL_2: nats-leaf://nats-hub-2:7422
      HUB_LEAF_URL_3: nats-leaf://nats-hub-3:7422
EOF
  log "stack for latency and keep-up (dc-a direct, dc-b through its proxy)"
  stack lat "$direct"
  "${DC[@]}" up -d --no-build relay-a1 relay-b1 >/dev/null 2>&1
  wait_for 120 "both lanes active" lanes_active 2
  if [ -z "$ONLY" ] || [ "$ONLY" = latency ]; then
    # One probe at a time (the gap exceeds a probe), so probes never
    # queue behind each other: idle, then beside a paced 1,000 events/s
    # load on the same DC (the relay then usually has a delta in flight,
    # and publishes one at a time, waiting for its ack).
    for load in 0 1000; do
      what=idle
      [ $load = 0 ] || what="under $load events/s"
      probe dc-a --probes 50 --probe-gap 200ms --load-rate $load --load-duration 14s >"$LOGDIR/pd-$load"
      note "no WAN hop (dc-a's leaf straight to the hub), $what: $(head -1 "$LOGDIR/pd-$load" | cut -d: -f2-)"
    done
    for rtt in "0 0" "25 5" "75 10"; do
      set -- $rtt
      wan latency "{\"delay\":\"${1}ms\",\"jitter\":\"${2}ms\"}"
      gap=$((4 * $1 + 200))
      for load in 0 1000; do
        what=idle
        [ $load = 0 ] || what="under $load events/s"
        probe dc-b --probes 50 --probe-gap "${gap}ms" --load-rate $load --load-duration "$((50 * gap / 1000 + 4))s" >"$LOGDIR/p-$1-$load"
        note "RTT $((2 * $1)) ms (each way ${1} ± ${2} ms), $what: $(head -1 "$LOGDIR/p-$1-$load" | cut -d: -f2-)"
      done
    done
    wan clear
  fi
  if [ -z "$ONLY" ] || [ "$ONLY" = keepup ]; then
    for rtt in "0 0" "75 10"; do
      set -- $rtt
      wan latency "{\"delay\":\"${1}ms\",\"jitter\":\"${2}ms\"}"
      probe dc-b --probes 100 --probe-gap 100ms --load-rate 10000 --load-duration 20s >"$LOGDIR/k-$1" 2>&1 &
      lp=$!
      # The relay's own counters 6 s and 16 s into the load: events
      # applied and deltas published per second, input still pending.
      sleep 6
      m1=$(relay_counters)
      t1=$(now)
      sleep 6
      relay_cpu=$(cpu_of relay-b1)
      leaf_cpu=$(cpu_of nats-dc-b)
      sleep 4
      m2=$(relay_counters)
      rate=$(awk -v a="$m1" -v b="$m2" -v dt="$(since "$t1")" 'BEGIN { split(a, x); split(b, y); e = (y[1] - x[1]) / dt; d = (y[2] - x[2]) / dt; printf "%.0f events/s applied in %.0f deltas/s (%.0f events per delta), %d input messages pending", e, d, (d > 0 ? e / d : 0), y[3] }')
      wait $lp || true # probes that time out are part of the figure
      note "10k events/s offered at RTT $((2 * $1)) ms: $(grep 'load:' "$LOGDIR/k-$1" | cut -d: -f2-); relay-b1 6-16 s into the load: ${rate}; probes under load:$(grep 'under' "$LOGDIR/k-$1" | cut -d: -f2-); relay-b1 CPU/RSS ${relay_cpu}, leaf ${leaf_cpu}"
    done
    wan clear
  fi
  down
fi

if [ -z "$ONLY" ] || [ "$ONLY" = bootstrap ]; then
  export CKF_EXPECTED_BLOCKS=13421772 # 5n/16 → 4,194,304 buckets: a 33,554,472-byte body
  for mode in defaults tuned; do
    if [ $mode = tuned ]; then
      # Above the longest transfer (32 MiB at 1.25 MB/s: 27 s), and no
      # compression: a full lane's fingerprints would not compress either.
      export CKF_LEASE_TTL=45s CKF_LEAF_PING_INTERVAL=20s CKF_LEAF_PING_MAX=3 CKF_LEAF_WRITE_DEADLINE=120s CKF_LEAF_COMPRESSION=off
    fi
    log "bootstrap, $mode: stack with 4,194,304-bucket lanes"
    stack boot$mode
    wan bandwidth '{"bytes_per_second":1250000}'
    t0=$(now)
    "${DC[@]}" up -d --no-build relay-b1 >/dev/null 2>&1
    if [ $mode = defaults ]; then
      if wait_for 120 "dc-b's lane active" lane_active dc-b 2>/dev/null; then
        note "bootstrap 32 MiB lane at 10 Mbit/s, compose defaults: lane active $(since "$t0")s after the relay started"
      else
        fences=$(curl -sf localhost:9093/metrics | awk '/^ckf_relay_fences_total/ { s += $NF } END { print s + 0 }' || true)
        why=$("${DC[@]}" logs --no-color relay-b1 2>&1 | { grep -o '"error":"[^"]*"' || true; } | sed 's/"error":"//; s/"$//; s/expires [^:]*:[0-9:.]*Z//' | sort | uniq -c | sort -rn | head -3 | tr '\n' ';')
        slow=$("${DC[@]}" logs --no-color nats-dc-b 2>&1 | grep -c 'Slow Consumer Detected\|Stale Connection' || true)
        note "bootstrap 32 MiB lane at 10 Mbit/s, compose defaults (lease TTL 3s, leaf ping 2s×3, write deadline 10s): NOT active within 120 s; relay fences ${fences}; leaf link slow-consumer/stale closes ${slow}; errors: ${why}"
      fi
    else
      wait_for 180 "dc-b's lane active" lane_active dc-b
      cold=$(since "$t0")
      snap=$("${DC[@]}" logs --no-color relay-b1 2>&1 | grep -c 'barrier snapshot published' || true)
      "${DC[@]}" up -d --no-build relay-b2 >/dev/null 2>&1
      wait_for 60 "relay-b2 healthy" healthy relay-b2
      sleep 5
      e=$(dc_lane dc-b | cut -d' ' -f2)
      t1=$(now)
      docker kill -s KILL "$(cid relay-b1)" >/dev/null
      wait_for 180 "relay-b2 takes over" relay_active relay-b2
      take=$(since "$t1")
      wait_for 180 "dc-b's lane active under a new epoch" lane_active_above dc-b "$e"
      note "bootstrap 32 MiB lane at 10 Mbit/s, link tuned (lease TTL 45s, leaf ping 20s×3, write deadline 120s, compression off): relay start → lane active ${cold}s (${snap} snapshot(s) published); kill -9 → standby active ${take}s (the 45 s TTL) → lane active under epoch $(dc_lane dc-b | cut -d' ' -f2) after $(since "$t1")s"
    fi
    down
  done
fi

echo
for s in "${SUMMARY[@]}"; do echo "$s"; done
echo "(host load average at the end: $(load_avg) on $(nproc) cores)"
echo
echo "wan-figures: done in $(($(date +%s) - START))s"
