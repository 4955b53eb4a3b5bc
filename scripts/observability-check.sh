#!/usr/bin/env bash
# Runs docker-compose.yml with the "observability" profile on the offline
# images (Jaeger v2, Prometheus, ckf-nats-exporter; see
# scripts/build-images.sh --observability), plays load through it, and
# checks what a person would look at:
#
#   (a) Jaeger's HTTP API holds one trace that follows one event across
#       the NATS hop: the relay's apply of an input message, the relay's
#       publish of the delta it went into, and an indexer's lane apply of
#       that delta (scripts/lib/obscheck.py trace);
#   (b) every PromQL expression of deploy/grafana/dashboards/ckfrelay.json
#       returns data from the running Prometheus (obscheck.py promql).
#
# Between the two it causes the faults the dashboard's fault panel counts
# (one malformed worker event in dc-a, a hub NATS restart, the lane stream
# deleted at the hub), so no panel is empty because nothing went wrong, and
# the load after them is verified against the exact ground truth again.
# Exits non-zero when a check fails; skips (one line, exit 0) when no
# Docker engine answers. The stack is torn
# down on any exit; a watchdog bounds the run after the image build.
#
#   scripts/observability-check.sh [--no-build] [--out DIR]
#
# --out DIR keeps the API output (trace.json, promql.txt) in DIR. Host
# ports, away from the defaults so a running demo or smoke stack does not
# collide (the dc-a leaf's on loopback only): CKF_OBS_PORT_BASE (20000)
# + 4222 NATS, + 8222 NATS monitoring, + 8080 indexer-1, + 9091..9094
# relays, + 6686 Jaeger query, + 4318 OTLP, + 9099 Prometheus, + 4223 the
# dc-a leaf's client port (for the malformed event). CKF_TRACE_SAMPLE_RATIO
# (default 0.2) is the share of input messages the relays trace. The images
# are tagged ckfrelay-obs:local and ckfrelay-nats-obs:local (CKF_OBS_IMAGE,
# CKF_OBS_NATS_IMAGE) beside ckfrelay-jaeger:local and
# ckfrelay-prometheus:local.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=1
OUT=
while [ $# -gt 0 ]; do
  case $1 in
    --no-build) BUILD=0 ;;
    --out) OUT=$2; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "observability-check: unknown argument $1 (want --no-build, --out DIR)" >&2; exit 2 ;;
  esac
  shift
done

# shellcheck source=scripts/lib/compose.sh
. scripts/lib/compose.sh
NAME=observability-check
compose_detect "$NAME"

B=${CKF_OBS_PORT_BASE:-20000}
export CKF_NATS_PORT=$((B + 4222)) CKF_NATS_MONITOR_PORT=$((B + 8222)) CKF_HTTP_PORT=$((B + 8080))
export CKF_RELAY_A1_PORT=$((B + 9091)) CKF_RELAY_A2_PORT=$((B + 9092)) CKF_RELAY_B1_PORT=$((B + 9093)) CKF_RELAY_B2_PORT=$((B + 9094))
export CKF_JAEGER_PORT=$((B + 6686)) CKF_OTLP_PORT=$((B + 4318)) CKF_PROMETHEUS_PORT=$((B + 9099))
export CKF_OTLP_ENDPOINT=jaeger:4318 CKF_TRACE_SAMPLE_RATIO=${CKF_TRACE_SAMPLE_RATIO:-0.2}
# Tags of their own, so a smoke test rebuilding ckfrelay:local beside this
# run does not swap the image under it.
export CKF_IMAGE=${CKF_OBS_IMAGE:-ckfrelay-obs:local} CKF_NATS_IMAGE=${CKF_OBS_NATS_IMAGE:-ckfrelay-nats-obs:local}
LEAF_PORT=$((B + 4223))
INDEXER=http://127.0.0.1:$CKF_HTTP_PORT
JAEGER=http://127.0.0.1:$CKF_JAEGER_PORT
PROM=http://127.0.0.1:$CKF_PROMETHEUS_PORT

PROJ=${CKF_OBS_PROJECT:-ckfobs$$}
START=$(date +%s)
LOGDIR=$(mktemp -d)
# The dc-a leaf's client port on the host's loopback, for this run only.
cat >"$LOGDIR/leaf-port.yml" <<EOF
services:
  nats-dc-a:
    ports: ["127.0.0.1:$LEAF_PORT:4222"]
EOF
DC=("${COMPOSE[@]}" -p "$PROJ" -f docker-compose.yml -f "$LOGDIR/leaf-port.yml" --profile observability)
SERVICES=(nats-hub nats-dc-a nats-dc-b indexer-1 indexer-2 relay-a1 relay-a2 relay-b1 relay-b2 jaeger prometheus nats-exporter)

ports_free "$CKF_NATS_PORT" "$CKF_NATS_MONITOR_PORT" "$CKF_HTTP_PORT" "$CKF_RELAY_A1_PORT" "$CKF_RELAY_A2_PORT" \
  "$CKF_RELAY_B1_PORT" "$CKF_RELAY_B2_PORT" "$CKF_JAEGER_PORT" "$CKF_OTLP_PORT" "$CKF_PROMETHEUS_PORT" "$LEAF_PORT"

# shellcheck source=scripts/lib/watchdog.sh
. scripts/lib/watchdog.sh
teardown() {
  local rc=$?
  watchdog_stop
  if [ $rc -ne 0 ]; then
    echo "$NAME: FAILED (exit $rc); last logs:" >&2
    "${DC[@]}" logs --no-color --tail=20 2>/dev/null | tail -120 >&2 || true
  fi
  "${DC[@]}" down -v --remove-orphans -t 3 >/dev/null 2>&1 || true
  rm -rf "$LOGDIR"
  exit $rc
}
trap teardown EXIT
trap 'exit 130' INT TERM

if [ "$BUILD" = 1 ]; then
  log "building the offline images (scripts/build-images.sh --observability)"
  t=$(now)
  scripts/build-images.sh --observability
  log "images built in $(since "$t")s"
fi
# Bounded from here on (the first Jaeger build alone takes many minutes).
OBS_LIMIT=${OBS_LIMIT:-900}
watchdog_start "$NAME" "$OBS_LIMIT"

lanes_active_here() { [ "$(curl -sf "$INDEXER/v1/lanes" | grep -o '"state":"active"' | wc -l)" -eq 2 ]; }
relay_active_at() { curl -sf "127.0.0.1:$1/v1/status" | grep -q '"state":"active"'; }
active_a() { relay_active_at "$CKF_RELAY_A1_PORT" || relay_active_at "$CKF_RELAY_A2_PORT"; }
all_up() { healthy "${SERVICES[@]}"; }
# replay NAME SPACE flags...: a replayer run, verified against the truth.
replay_verified() {
  local name=$1
  replay "$@"
  verified "$name" || { cat "$LOGDIR/$name" >&2; return 1; }
}
# A prometheus scrape target is up for every job.
targets_up() {
  curl -sf "$PROM/api/v1/targets?state=active" | python3 -c '
import json, sys
t = json.load(sys.stdin)["data"]["activeTargets"]
down = [x["scrapeUrl"] for x in t if x["health"] != "up"]
jobs = {x["labels"]["job"] for x in t}
sys.exit(0 if t and not down and {"indexer", "relay", "nats"} <= jobs else 1)'
}
# One malformed worker event on dc-a's KVEVENTS, over the NATS protocol
# itself (core publish; the stream captures it), no client needed.
publish_malformed() {
  exec 3<>"/dev/tcp/127.0.0.1/$LEAF_PORT"
  printf 'CONNECT {"verbose":false,"pedantic":false,"name":"observability-check"}\r\nPUB kvevents.demo.dc-a.7 14\r\nnot a json evt\r\nPING\r\n' >&3
  timeout 5 grep -m1 -q PONG <&3
  exec 3>&-
}

# Deletes the lane stream at the hub through the JetStream API.
delete_lanes() {
  exec 3<>"/dev/tcp/127.0.0.1/$CKF_NATS_PORT"
  printf 'CONNECT {"verbose":false,"pedantic":false,"name":"observability-check"}\r\nSUB _INBOX.obscheck 1\r\nPUB $JS.API.STREAM.DELETE.CKF_LANES _INBOX.obscheck 0\r\n\r\nPING\r\n' >&3
  timeout 5 grep -m1 -q '"success":true' <&3
  exec 3>&-
}

log "starting the stack with the observability profile (project $PROJ)"
"${DC[@]}" up -d --no-build "${SERVICES[@]}" >"$LOGDIR/up" 2>&1 || { cat "$LOGDIR/up" >&2; exit 1; }
t=$(now)
wait_for 150 "all ${#SERVICES[@]} containers healthy" all_up
wait_for 60 "both lanes active at the indexer" lanes_active_here
log "stack up, both lanes active after $(since "$t")s"
wait_for 60 "every Prometheus target up (indexer, relay, nats)" targets_up
log "prometheus: every scrape target up"

t=$(now)
replay_verified load 0 --speed 0 --max-requests 1500
log "load: 1500 requests replayed and verified in $(since "$t")s (traces sampled at $CKF_TRACE_SAMPLE_RATIO)"

# (a) a trace across the hop. The relays export in batches (5 s).
mkdir -p "$LOGDIR/out"
found_trace() { python3 scripts/lib/obscheck.py trace "$JAEGER" "$LOGDIR/out/trace.json" >"$LOGDIR/trace.log" 2>&1; }
if ! wait_for 60 "a relay → indexer trace in Jaeger" found_trace; then
  cat "$LOGDIR/trace.log" >&2
  exit 1
fi
sed 's/^/  /' "$LOGDIR/trace.log"
log "trace check passed"

# Faults the fault panel counts: a malformed event (relay bad events), a
# hub restart (relay fences and set-up retries), the lane stream deleted
# (indexer faults).
publish_malformed
wait_for 30 "the malformed event counted" sh -c "curl -sf 127.0.0.1:$CKF_RELAY_A1_PORT/metrics 127.0.0.1:$CKF_RELAY_A2_PORT/metrics | grep -q '^ckf_relay_bad_events_total{.*reason=\"malformed\"'"
log "fault: one malformed event counted by dc-a's active relay"
t=$(now)
docker restart -t 5 "$(cid nats-hub)" >/dev/null
# Until the relays and indexers have noticed (the lease lapses after 3 s),
# the lanes still read active.
sleep 5
wait_for 90 "both lanes active again" lanes_active_here
wait_for 60 "dc-a relay active again" active_a
log "fault: hub NATS restarted, lanes active again after $(since "$t")s"
# The lane stream deleted at the hub (JetStream API over the NATS
# protocol): the relays recreate it and publish a new snapshot; the
# indexers count lane_stream_replaced and bootstrap again.
t=$(now)
delete_lanes
wait_for 60 "an indexer fault counted" sh -c "curl -sf $INDEXER/metrics | grep -q '^ckf_indexer_faults_total{'"
wait_for 120 "both lanes active again" lanes_active_here
log "fault: lane stream CKF_LANES deleted, indexer fault counted and lanes active again after $(since "$t")s"
# Fresh load, so every rate and quantile over [1m] has observations; two
# more scrapes after it.
replay_verified after 1 --speed 0 --max-requests 1000
sleep 12

# (b) every dashboard expression.
promql_ok() { python3 scripts/lib/obscheck.py promql "$PROM" deploy/grafana/dashboards/ckfrelay.json "$LOGDIR/out/promql.txt" >"$LOGDIR/promql.log" 2>&1; }
if ! promql_ok; then
  # One retry after another scrape: a counter first seen in the last scrape
  # has no increase yet.
  sleep 10
  if ! promql_ok; then
    cat "$LOGDIR/promql.log"
    exit 1
  fi
fi
sed 's/^/  /' "$LOGDIR/promql.log"
log "promql check passed"

if [ -n "$OUT" ]; then
  mkdir -p "$OUT"
  cp "$LOGDIR/out/trace.json" "$LOGDIR/out/promql.txt" "$OUT/"
  log "API output kept in $OUT"
fi
echo "$NAME: OK in $(($(date +%s) - START))s"
