#!/usr/bin/env bash
# The 4 MiB query burst: a global-indexer (embedded nats-server) and one
# relay-producer so a lane is ready, then N concurrent POST /v1/match bodies
# of exactly 4 MiB ({"block_size":64,"tokens":[1,1,...]}, 32,767 blocks),
# sent at once with curl. Prints the indexer's VmRSS before and after, its
# VmHWM (peak), the growth, the HTTP statuses, and the top of a heap profile
# taken during the burst.
#
#   ./scripts/query-burst.sh                 # builds bin/, 30 bodies
#   BIN=/some/dir N=30 ./scripts/query-burst.sh
#
# Environment: BIN (directory holding global-indexer and relay-producer;
# built into bin/ when unset), N (concurrent bodies, 30), NATS_PORT (14322),
# HTTP_PORT (18480), PPROF_PORT (18481), RELAY_PORT (18482).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin

N=${N:-30}
NATS_PORT=${NATS_PORT:-14322}
HTTP_PORT=${HTTP_PORT:-18480}
PPROF_PORT=${PPROF_PORT:-18481}
RELAY_PORT=${RELAY_PORT:-18482}
if [ -z "${BIN:-}" ]; then
  mkdir -p bin
  go build -o bin/ ./cmd/global-indexer ./cmd/relay-producer
  BIN=bin
fi
work=$(mktemp -d -t ckfrelay-burst-XXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM

python3 - "$work/body.json" <<'EOF'
import sys
head, tail = b'{"block_size":64,"tokens":[', b']}'
n = (4 * 1024 * 1024 - len(head) - len(tail) + 1) // 2
body = head + b','.join([b'1'] * n) + tail
assert len(body) == 4 * 1024 * 1024
open(sys.argv[1], 'wb').write(body)
EOF

"$BIN/global-indexer" --domain burst --nats-port "$NATS_PORT" --http-addr "127.0.0.1:$HTTP_PORT" \
  --pprof-addr "127.0.0.1:$PPROF_PORT" --log-format json >"$work/indexer.log" 2>&1 &
ipid=$!
pids+=("$ipid")
"$BIN/relay-producer" --nats-url "nats://127.0.0.1:$NATS_PORT" --domain burst --dc dc-a \
  --http-addr "127.0.0.1:$RELAY_PORT" --log-format json >"$work/relay.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 300); do
  if curl -sf -o /dev/null "http://127.0.0.1:$HTTP_PORT/readyz"; then break; fi
  sleep 0.1
done
curl -sf -o /dev/null "http://127.0.0.1:$HTTP_PORT/readyz" || { echo "burst: no lane ready; see $work" >&2; exit 1; }

rss() { awk -v k="$1:" '$1 == k {print $2}' "/proc/$ipid/status"; }
before=$(rss VmRSS)
echo "indexer pid $ipid: VmRSS before ${before} kB, VmHWM before $(rss VmHWM) kB"

start=$(date +%s.%N)
for i in $(seq 1 "$N"); do
  curl -s -o /dev/null -w '%{http_code}\n' -H 'Content-Type: application/json' \
    --data-binary "@$work/body.json" "http://127.0.0.1:$HTTP_PORT/v1/match" >"$work/status.$i" &
done
sleep 1
curl -s -o "$work/heap.prof" "http://127.0.0.1:$PPROF_PORT/debug/pprof/heap" || true
wait_n=0
while [ "$(cat "$work"/status.* 2>/dev/null | wc -l)" -lt "$N" ] && [ $wait_n -lt 600 ]; do
  sleep 0.1
  wait_n=$((wait_n + 1))
done
end=$(date +%s.%N)
after=$(rss VmRSS)
hwm=$(rss VmHWM)
echo "indexer: VmRSS after ${after} kB, VmHWM ${hwm} kB"
echo "growth: RSS $(((after - before) / 1024)) MiB, peak $(((hwm - before) / 1024)) MiB over the RSS before"
echo "statuses: $(cat "$work"/status.* | sort | uniq -c | tr -s ' \n' ' ')in $(echo "$end - $start" | bc) s"
if [ -s "$work/heap.prof" ]; then
  go tool pprof -top -sample_index=alloc_space "$work/heap.prof" 2>/dev/null | head -15
fi
