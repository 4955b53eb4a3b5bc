#!/usr/bin/env bash
# The whole pipeline on one machine: the global indexer with an embedded
# nats-server (JetStream on, 127.0.0.1 only), one relay-producer per DC, and
# the trace replayer feeding both DCs with the Mooncake trace and checking
# every answer against the exact ground truth.
#
#   ./scripts/demo.sh            # replay at 20x, keep serving until Ctrl-C
#   ./scripts/demo.sh --smoke    # fast replay of 2000 requests, verify, exit
#
# Environment: MODELS (comma-separated domains, one per model; default demo,demo-2: one indexer and
# one relay per DC serve them all, each request goes to one of them), NATS_PORT, HTTP_ADDR, SPEED, DCS, EXPECTED_BLOCKS, RELAY_PORT (first relay status port),
# KEEP_LOGS=1 (keep the log folder; it is kept anyway when the demo fails).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin

smoke=0
[ "${1:-}" = "--smoke" ] && smoke=1
MODELS=${MODELS:-${DOMAIN:-demo,demo-2}}
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

# Progress: one line per phase with its elapsed seconds; on a terminal the
# line counts up in place while the phase runs, elsewhere (CI logs) a plain
# line every 15 s instead.
tty=0
[ -t 1 ] && tty=1
phase_start() { # message
  phase_msg=$1 phase_t0=$SECONDS phase_said=$SECONDS
  if [ $tty = 1 ]; then printf 'demo: %s… 0s' "$phase_msg"; else echo "demo: $phase_msg…"; fi
}
phase_tick() {
  local dt=$((SECONDS - phase_t0))
  if [ $tty = 1 ]; then
    printf '\r\033[Kdemo: %s… %ds' "$phase_msg" "$dt"
  elif ((SECONDS - phase_said >= 15)); then
    echo "demo: $phase_msg… ${dt}s"
    phase_said=$SECONDS
  fi
}
phase_end() { # outcome
  local line="demo: $phase_msg: $1 after $((SECONDS - phase_t0))s"
  if [ $tty = 1 ]; then printf '\r\033[K%s\n' "$line"; else echo "$line"; fi
}

# Only the three binaries the demo runs, in one go invocation so their
# shared dependencies compile once.
demo_bins=(global-indexer relay-producer trace-replayer)
names=$(printf '%s, ' "${demo_bins[@]}")
phase_start "building ${names%, } (first build downloads modules: ~1 min)"
mkdir -p bin
go build -o bin/ "${demo_bins[@]/#/./cmd/}" >"$logs/build.log" 2>&1 &
build=$!
while kill -0 "$build" 2>/dev/null; do
  phase_tick
  sleep 1
done
if ! wait "$build"; then
  phase_end "failed"
  cat "$logs/build.log" >&2
  exit 1
fi
phase_end "built"

wait_http() { # url, what
  local addr=${1#http://}
  phase_start "waiting for $2 on ${addr%%/*}"
  for i in $(seq 1 100); do
    if curl -sf -o /dev/null "$1"; then
      phase_end "up"
      return 0
    fi
    ((i % 10)) || phase_tick
    sleep 0.1
  done
  phase_end "not up"
  echo "demo: $2 did not come up; see $logs" >&2
  exit 1
}

bin/global-indexer --domain "$MODELS" --nats-port "$NATS_PORT" --http-addr "$HTTP_ADDR" \
  --log-format json >"$logs/indexer.log" 2>&1 &
pids+=($!)
wait_http "http://$HTTP_ADDR/healthz" "the indexer"

port=${RELAY_PORT:-9091}
relay_metrics=""
IFS=, read -ra dcs <<<"$DCS"
IFS=, read -ra models <<<"$MODELS"
{ echo "pools:"; for m in "${models[@]}"; do echo "  - domain: $m"; done; } >"$logs/pools.yaml"
for dc in "${dcs[@]}"; do
  # --kv-capacity-blocks: the replayer's 4 workers of 4,096 blocks per DC, so the
  # load windows carry KV occupancy for POST /v1/route.
  bin/relay-producer --nats-url "nats://127.0.0.1:$NATS_PORT" --pools-file "$logs/pools.yaml" --dc "$dc" \
    --kv-capacity-blocks 16384 --expected-blocks "$EXPECTED_BLOCKS" --http-addr "127.0.0.1:$port" --log-format json >"$logs/relay-$dc.log" 2>&1 &
  pids+=($!)
  wait_http "http://127.0.0.1:$port/healthz" "relay $dc"
  echo "relay $dc: http://127.0.0.1:$port/v1/status  (metrics: /metrics)"
  relay_metrics+="${relay_metrics:+,}http://127.0.0.1:$port/metrics"
  port=$((port + 1))
done

cat <<MSG
global indexer:  http://$HTTP_ADDR  (POST /v1/match, POST /v1/route, GET /v1/lanes, /readyz, /metrics)
models:          $MODELS  (name one with "model" in the body; none: ${models[0]})
NATS:            nats://127.0.0.1:$NATS_PORT  (query subjects ckfq.<model>.match)
logs:            $logs  (removed at exit unless the demo fails or KEEP_LOGS=1)
MSG

bin/trace-replayer --nats-url "nats://127.0.0.1:$NATS_PORT" --domain "$MODELS" --dcs "$DCS" \
  --indexer-url "http://$HTTP_ADDR" --speed "$SPEED" --relay-metrics "$relay_metrics" "${replay_args[@]}"
if [ $smoke = 1 ]; then
  echo "demo: smoke run verified, ${SECONDS}s after the start"
  exit 0
fi
echo "replay finished; the pipeline keeps serving queries. Ctrl-C to stop."
wait
