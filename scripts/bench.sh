#!/usr/bin/env bash
# Builds cmd/ckf-bench and runs every comparative benchmark once: the prefix
# search, the producer's CKF projection, the ingestion pool and the whole
# JetStream pipeline, each against its baseline, printing one table of
# subject | baseline | ratio. Arguments are passed on, e.g.
#
#   ./scripts/bench.sh                          # defaults (~3 minutes on 2 cores)
#   ./scripts/bench.sh --only e2e --e2e-requests 8000
#   ./scripts/bench.sh --only search --buckets 1048576 --queries 16384 --json > bench.json
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin

mkdir -p bin
go build -o bin/ckf-bench ./cmd/ckf-bench
exec ./bin/ckf-bench "$@"
