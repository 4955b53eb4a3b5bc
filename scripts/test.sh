#!/usr/bin/env bash
# The README's test command: hygiene (gofmt, go mod tidy, vet, staticcheck,
# the docs' links), then every test with the race detector.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin

# staticcheck is pinned here rather than in go.mod, so the module's
# dependency graph stays what the binaries need.
STATICCHECK=honnef.co/go/tools/cmd/staticcheck@v0.8.2

unformatted=$(gofmt -l $(find . -name '*.go' -not -path './.git/*'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change:"; echo "$unformatted"; exit 1
fi
if ! go mod tidy -diff >/dev/null; then
  echo "go mod tidy would change go.mod/go.sum:"; go mod tidy -diff || true; exit 1
fi
go vet ./...
go vet -tags ckftest ./pkg/consumer ./internal/indexer
go run "$STATICCHECK" ./...
# The documentation's links and cited paths, first, so a broken one fails
# in seconds (docs/testing.md); go test ./... runs it again.
go test -count=1 -run TestRepositoryDocs ./internal/doclinks
go test -race -count=1 -timeout 40m ./...
go test -race -count=1 -tags ckftest -run WorkerFailure ./internal/indexer/
