#!/usr/bin/env bash
# The README's test command: vet, then every test with the race detector.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin
go vet ./...
go vet -tags ckftest ./pkg/consumer ./internal/indexer
go test -race -count=1 -timeout 40m ./...
go test -race -count=1 -tags ckftest -run WorkerFailure ./internal/indexer/
