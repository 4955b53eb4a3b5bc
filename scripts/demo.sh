#!/usr/bin/env bash
# The whole pipeline on one machine: the global indexer with an embedded
# nats-server (JetStream on, 127.0.0.1 only), one relay-producer per DC, and
# the trace replayer feeding both DCs with the Mooncake trace and checking
# every answer against the exact ground truth.
#
#   ./scripts/demo.sh            # replay at 20x, keep serving until Ctrl-C
#   ./scripts/demo.sh --smoke    # fast replay of 2000 requests, verify, exit
#
# Environment: DOMAIN, NATS_PORT, HTTP_ADDR, SPEED, DCS, EXPECTED_BLOCKS, RELAY_PORT (first relay status port),
# KEEP_LOGS=1 (keep the log folder; it is kept anyway when the demo fails).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin

smoke=0
[ "${1:-}" = "--smoke" ] && smoke=1
DOMAIN=${DOMAIN:-demo}
NATS_PORT=${NATS_PORT:-4222}
HTTP_ADDR=${HTTP_ADDR:-127.0.0.1:8080}
SPEED=${SPEED:-20}
DCS=${DCS:-dc-a,dc-b}
EXPECTED_BLOCKS=${EXPECTED_BLOCKS:-65536}
replay_args=()
if [ $smoke = 1 ]; then
  SPEED=0
  replay_args+=(--max-requests 2000 --query-every 10)
fi

mkdir -p bin
go build -o bin/ ./cmd/...
logs=$(mktemp -d -t ckfrelay-demo-XXXX)
pids=()
# The log folder goes away at exit unless the demo failed or KEEP_LOGS=1;
# Ctrl-C (exit 130) is the serving demo's normal end, not a failure.
cleanup() {
  local rc=$?
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [ "${KEEP_LOGS:-0}" = 1 ] || { [ "$rc" != 0 ] && [ "$rc" != 130 ]; }; then
    echo "demo: logs kept in $logs" >&2
  else
    rm -rf "$logs"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

wait_http() { # url, what
  for _ in $(seq 1 100); do
    if curl -sf -o /dev/null "$1"; then return 0; fi
    sleep 0.1
  done
  echo "demo: $2 did not come up; see $logs" >&2
  exit 1
}

bin/global-indexer --domain "$DOMAIN" --nats-port "$NATS_PORT" --http-addr "$HTTP_ADDR" \
  --log-format json >"$logs/indexer.log" 2>&1 &
pids+=($!)
wait_http "http://$HTTP_ADDR/healthz" "global-indexer"

port=${RELAY_PORT:-9091}
IFS=, read -ra dcs <<<"$DCS"
for dc in "${dcs[@]}"; do
  bin/relay-producer --nats-url "nats://127.0.0.1:$NATS_PORT" --domain "$DOMAIN" --dc "$dc" \
    --expected-blocks "$EXPECTED_BLOCKS" --http-addr "127.0.0.1:$port" --log-format json >"$logs/relay-$dc.log" 2>&1 &
  pids+=($!)
  wait_http "http://127.0.0.1:$port/healthz" "relay-producer $dc"
  echo "relay $dc: http://127.0.0.1:$port/v1/status  (metrics: /metrics)"
  port=$((port + 1))
done

cat <<MSG
global indexer:  http://$HTTP_ADDR  (POST /v1/match, GET /v1/lanes, /readyz, /metrics)
NATS:            nats://127.0.0.1:$NATS_PORT  (query subject ckfq.$DOMAIN.match)
logs:            $logs  (removed at exit unless the demo fails or KEEP_LOGS=1)
MSG

bin/trace-replayer --nats-url "nats://127.0.0.1:$NATS_PORT" --domain "$DOMAIN" --dcs "$DCS" \
  --indexer-url "http://$HTTP_ADDR" --speed "$SPEED" "${replay_args[@]}"
if [ $smoke = 1 ]; then
  exit 0
fi
echo "replay finished; the pipeline keeps serving queries. Ctrl-C to stop."
wait
