#!/usr/bin/env bash
# The multi-DC stack of docker-compose.yml in one command, with no registry:
# builds the FROM scratch images from this checkout (scripts/build-images.sh),
# starts the stack detached with Compose v2 (`docker compose`) or v1
# (`docker-compose`), whichever this machine has, and waits until the
# indexer answers with ready lanes. The stack runs two models, demo and
# demo-2 (deploy/pools.yaml); a query names one with "model".
#
#   scripts/up.sh                   # the stack of docker-compose.yml
#   scripts/up.sh --observability   # and the observability profile (Jaeger, Prometheus,
#                                   # ckf-nats-exporter), traces sent to Jaeger
#   COMPOSE_FILE=docker-compose.yml:docker-compose.cluster.yml scripts/up.sh
#                                   # other compose files (Compose's own variable)
#
# Stop it with `docker compose down -v` (or `docker-compose down -v`).
# Environment: CKF_HTTP_PORT (the indexer's host port, 8080), UP_TIMEOUT
# (seconds to wait for ready lanes, 180), and build-images.sh's.
set -euo pipefail
cd "$(dirname "$0")/.."
observability=0
for arg in "$@"; do
  case $arg in
    --observability) observability=1 ;;
    *) echo "up: unknown argument $arg (want --observability)" >&2; exit 2 ;;
  esac
done
if ! docker info >/dev/null 2>&1; then
  echo "up: no Docker engine answers (is dockerd running, may this user use it?)" >&2
  exit 1
fi
if docker compose version >/dev/null 2>&1; then
  compose=(docker compose)
elif command -v docker-compose >/dev/null; then
  compose=(docker-compose)
else
  echo "up: neither 'docker compose' (v2) nor 'docker-compose' (v1) is installed" >&2
  exit 1
fi

echo "up: building the images offline (scripts/build-images.sh)"
if [ $observability = 1 ]; then
  scripts/build-images.sh --observability
  export CKF_OTLP_ENDPOINT=${CKF_OTLP_ENDPOINT:-jaeger:4318}
  compose+=(--profile observability)
else
  scripts/build-images.sh
fi
echo "up: starting the stack (${compose[*]} up -d --no-build)"
"${compose[@]}" up -d --no-build

url=http://127.0.0.1:${CKF_HTTP_PORT:-8080}
deadline=$((SECONDS + ${UP_TIMEOUT:-180}))
until curl -sf -o /dev/null "$url/readyz"; do
  if [ $SECONDS -ge $deadline ]; then
    echo "up: the indexer at $url has no ready lane after ${UP_TIMEOUT:-180}s; see '${compose[*]} logs'" >&2
    exit 1
  fi
  sleep 1
done
echo "up: ready after $SECONDS s; lanes:"
curl -s "$url/v1/lanes"
echo
cat <<MSG
query it:  curl -s -X POST $url/v1/match -d '{"local_hashes":[11,12]}'    # model demo (the first)
           curl -s -X POST $url/v1/match -d '{"model":"demo-2","local_hashes":[11,12]}'
status:    $url/
stop:      ${compose[*]} down -v
MSG
