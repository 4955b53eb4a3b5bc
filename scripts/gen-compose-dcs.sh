#!/usr/bin/env bash
# Writes a standalone compose file with N DCs around the clustered hub:
# three R3 hub nodes, two indexers and, per DC dc-<x> (x = a, b, … p): a
# leaf nats-dc-<x> reachable only through its WAN link wan-dc-<x>
# (ckf-wanproxy), an active relay relay-<x>1 and, for the first STANDBYS
# DCs, a standby relay-<x>2; plus a replayer whose workers span all N DCs. N = 16 fills every lane
# of the index's table. Every relay runs a pool per model of
# deploy/pools.yaml (demo and demo-2), the indexers and the replayer serve
# them all, as in docker-compose.yml.
#
#   scripts/gen-compose-dcs.sh N [--standbys K] [--out FILE]
#
#   scripts/gen-compose-dcs.sh 4 --out /tmp/ckf-4dc.yml
#   scripts/chaos.sh --file /tmp/ckf-4dc.yml          # the fault table at 4 DCs
#   docker-compose -p ckf16 -f /tmp/ckf-16dc.yml up -d --no-build
#
# K defaults to 2 (dc-a and dc-b have a standby; scripts/chaos.sh needs
# dc-a's). The file points at this checkout's deploy/ by absolute path, so
# it may live anywhere. Host ports (loopback): 4222 and 8222-8224 (hub),
# 8080 (indexer-1), 8474 + i (dc-<x>'s proxy control API, i = x's index),
# 9090 + 2i + n (relay-<x><n>). The environment knobs of
# docker-compose.cluster.yml (CKF_JS_REPLICAS, CKF_EXPECTED_BLOCKS,
# CKF_LEASE_TTL, CKF_LEAF_PING_INTERVAL, CKF_LEAF_PING_MAX,
# CKF_LEAF_WRITE_DEADLINE, CKF_LEAF_COMPRESSION) apply.
set -euo pipefail
cd "$(dirname "$0")/.."

N=
STANDBYS=2
OUT=
while [ $# -gt 0 ]; do
  case $1 in
    --standbys) STANDBYS=${2:?--standbys needs a number}; shift ;;
    --out) OUT=${2:?--out needs a path}; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    [0-9]*) N=$1 ;;
    *) echo "gen-compose-dcs: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
if ! [[ "$N" =~ ^[0-9]+$ ]] || [ "$N" -lt 1 ] || [ "$N" -gt 16 ]; then
  echo "gen-compose-dcs: want N in 1..16 (one lane per DC), got '${N}'" >&2
  exit 2
fi
if ! [[ "$STANDBYS" =~ ^[0-9]+$ ]] || [ "$STANDBYS" -gt "$N" ]; then
  echo "gen-compose-dcs: --standbys must be 0..N" >&2
  exit 2
fi
ROOT=$(pwd)
LETTERS=(a b c d e f g h i j k l m n o p)
# The models: the pools every relay runs (deploy/pools.yaml, mounted).
MODELS=$(sed -n 's/^ *- domain: *\([^ #]*\).*/\1/p' deploy/pools.yaml | paste -sd, -)
[ -n "$MODELS" ] || { echo "gen-compose-dcs: deploy/pools.yaml declares no pool" >&2; exit 2; }

emit() {
  local i x dcs="" urls="" nets=""
  cat <<EOF
# Written by scripts/gen-compose-dcs.sh $N --standbys $STANDBYS: $N DCs around
# a 3-node R3 hub. Regenerate rather than edit.
x-hub: &hub
  image: \${CKF_NATS_IMAGE:-ckfrelay-nats:local}
  restart: unless-stopped
  command: ["-c", "/etc/nats/hub-cluster.conf"]
  volumes: ["$ROOT/deploy/nats-hub-cluster.conf:/etc/nats/hub-cluster.conf:ro"]
  networks: [wan]
  healthcheck: &nats-health
    test: ["CMD", "/ckf-health", "http://127.0.0.1:8222/healthz"]
    interval: 2s
    timeout: 3s
    retries: 15
x-leaf: &leaf
  image: \${CKF_NATS_IMAGE:-ckfrelay-nats:local}
  restart: unless-stopped
  command: ["-c", "/etc/nats/dc-cluster.conf"]
  volumes: ["$ROOT/deploy/nats-dc-cluster.conf:/etc/nats/dc-cluster.conf:ro"]
  healthcheck: *nats-health
x-ckf: &ckf
  image: \${CKF_IMAGE:-ckfrelay:local}
  restart: unless-stopped
x-wanproxy: &wanproxy
  <<: *ckf
  entrypoint: ["/ckf-wanproxy"]
  healthcheck:
    test: ["CMD", "/ckf-health", "http://127.0.0.1:8474/healthz"]
    interval: 2s
    timeout: 3s
    retries: 15
x-relay: &relay
  <<: *ckf
  entrypoint: ["/relay-producer"]
  volumes: ["$ROOT/deploy/pools.yaml:/etc/ckfrelay/pools.yaml:ro"]
  healthcheck:
    test: ["CMD", "/ckf-health", "http://127.0.0.1:9090/healthz"]
    interval: 2s
    timeout: 3s
    retries: 15
x-relay-env: &relay-env
  CKFRELAY_JS_DOMAIN: hub
  CKFRELAY_JS_REPLICAS: \${CKF_JS_REPLICAS:-3}
  CKFRELAY_INPUT_JS_REPLICAS: 1
  CKFRELAY_POOLS_FILE: /etc/ckfrelay/pools.yaml
  CKFRELAY_EXPECTED_BLOCKS: \${CKF_EXPECTED_BLOCKS:-65536}
  CKFRELAY_LEASE_TTL: \${CKF_LEASE_TTL:-3s}
  CKFRELAY_CHECKPOINT_INTERVAL: 15s
  CKFRELAY_HTTP_ADDR: 0.0.0.0:9090
  CKFRELAY_LOG_FORMAT: json
x-indexer: &indexer
  <<: *ckf
  entrypoint: ["/global-indexer"]
  networks: [wan]
  environment:
    CKFRELAY_NATS_URL: nats://nats-hub-1:4222,nats://nats-hub-2:4222,nats://nats-hub-3:4222
    CKFRELAY_JS_REPLICAS: \${CKF_JS_REPLICAS:-3}
    CKFRELAY_DOMAIN: $MODELS
    CKFRELAY_HTTP_ADDR: 0.0.0.0:8080
    CKFRELAY_LOG_FORMAT: json
  healthcheck:
    test: ["CMD", "/ckf-health", "http://127.0.0.1:8080/healthz"]
    interval: 2s
    timeout: 3s
    retries: 15

networks:
  wan: {}
EOF
  for ((i = 0; i < N; i++)); do
    echo "  dc-${LETTERS[i]}: {}"
  done
  cat <<EOF

services:
  nats-hub-1:
    <<: *hub
    environment: { HUB_SERVER_NAME: nats-hub-1 }
    ports: ["127.0.0.1:\${CKF_NATS_PORT:-4222}:4222", "127.0.0.1:8222:8222"]
  nats-hub-2:
    <<: *hub
    environment: { HUB_SERVER_NAME: nats-hub-2 }
    ports: ["127.0.0.1:8223:8222"]
  nats-hub-3:
    <<: *hub
    environment: { HUB_SERVER_NAME: nats-hub-3 }
    ports: ["127.0.0.1:8224:8222"]
  indexer-1:
    <<: *indexer
    ports: ["127.0.0.1:\${CKF_HTTP_PORT:-8080}:8080"]
  indexer-2:
    <<: *indexer
EOF
  for ((i = 0; i < N; i++)); do
    x=${LETTERS[i]}
    cat <<EOF

  # --- dc-$x -------------------------------------------------------------
  wan-dc-$x:
    <<: *wanproxy
    command: ["--name", "dc-$x", "--http-addr", "0.0.0.0:8474", "--log-format", "json",
              "--routes", "0.0.0.0:7422=nats-hub-1:7422,0.0.0.0:7423=nats-hub-2:7422,0.0.0.0:7424=nats-hub-3:7422"]
    networks: [wan, dc-$x]
    ports: ["127.0.0.1:$((8474 + i)):8474"]
  nats-dc-$x:
    <<: *leaf
    environment:
      DC_NAME: dc-$x
      LEAF_PING_INTERVAL: \${CKF_LEAF_PING_INTERVAL:-2s}
      LEAF_PING_MAX: \${CKF_LEAF_PING_MAX:-3}
      LEAF_WRITE_DEADLINE: \${CKF_LEAF_WRITE_DEADLINE:-10s}
      LEAF_COMPRESSION: \${CKF_LEAF_COMPRESSION:-s2_auto}
      HUB_LEAF_URL_1: nats-leaf://wan-dc-$x:7422
      HUB_LEAF_URL_2: nats-leaf://wan-dc-$x:7423
      HUB_LEAF_URL_3: nats-leaf://wan-dc-$x:7424
    networks:
      dc-$x: { aliases: [nats.dc-$x.local] }
EOF
    for n in 1 2; do
      if [ $n = 2 ] && [ "$i" -ge "$STANDBYS" ]; then
        continue
      fi
      cat <<EOF
  relay-$x$n:
    <<: *relay
    environment:
      <<: *relay-env
      CKFRELAY_NATS_URL: nats://nats.dc-$x.local:4222
      CKFRELAY_INPUT_JS_DOMAIN: dc-$x
      CKFRELAY_DC: dc-$x
      CKFRELAY_INSTANCE: relay-$x$n
    networks: [dc-$x]
    ports: ["127.0.0.1:$((9090 + 2 * i + n)):9090"]
EOF
    done
    dcs+="${dcs:+,}dc-$x"
    urls+="${urls:+,}dc-$x=nats://nats.dc-$x.local:4222"
    nets+=", dc-$x"
  done
  cat <<EOF

  # The workers of all $N DCs, each DC publishing to its own leaf; queries
  # over the hub's NATS, checked against the exact ground truth.
  replayer:
    <<: *ckf
    restart: "no"
    entrypoint: ["/trace-replayer"]
    environment:
      CKFRELAY_NATS_URL: nats://nats-hub-1:4222,nats://nats-hub-2:4222,nats://nats-hub-3:4222
      CKFRELAY_DC_NATS_URLS: $urls
      CKFRELAY_QUERY_VIA: nats
      CKFRELAY_DOMAIN: $MODELS
      CKFRELAY_DCS: $dcs
      CKFRELAY_INDEXER_URL: http://indexer-1:8080
    networks: [wan$nets]
EOF
}

if [ -n "$OUT" ]; then
  emit >"$OUT"
  echo "gen-compose-dcs: wrote $OUT ($N DCs, $STANDBYS with a standby)" >&2
else
  emit
fi
