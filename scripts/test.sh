#!/usr/bin/env bash
# The README's test command: hygiene (gofmt, go mod tidy, vet, staticcheck,
# the docs' links), then every test with the race detector.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin

# staticcheck is pinned here rather than in go.mod, so the module's
# dependency graph stays what the binaries need. It is built once per
# version and Go release into the tool directory (CKF_TOOLS_DIR, default
# ~/.cache/ckfrelay-tools), not rebuilt by `go run` on every call.
STATICCHECK_VERSION=v0.8.2
# The module's dependencies download (network-bound) while staticcheck
# builds (CPU-bound): on a fresh machine the two overlap instead of
# queueing. Its failure fails the script at the wait below.
go mod download &
download=$!
tools=${CKF_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ckfrelay-tools}
staticcheck=$tools/staticcheck-$STATICCHECK_VERSION-$(go env GOVERSION)
if [ ! -x "$staticcheck" ]; then
  mkdir -p "$tools"
  gobin=$(mktemp -d "$tools/install-XXXX")
  # From outside the module, so go.mod and go.sum stay untouched.
  (cd / && GOBIN=$gobin go install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION")
  mv "$gobin/staticcheck" "$staticcheck"
  rmdir "$gobin"
fi

wait "$download"

unformatted=$(gofmt -l $(find . -name '*.go' -not -path './.git/*'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change:"; echo "$unformatted"; exit 1
fi
if ! go mod tidy -diff >/dev/null; then
  echo "go mod tidy would change go.mod/go.sum:"; go mod tidy -diff || true; exit 1
fi
go vet ./...
go vet -tags ckftest ./pkg/consumer ./pkg/client ./pkg/follow ./internal/indexer ./e2e
"$staticcheck" ./...
# The documentation's links and cited paths, first, so a broken one fails
# in seconds (docs/testing.md); go test ./... runs it again.
go test -count=1 -run TestRepositoryDocs ./internal/doclinks
# go vet ./... above already ran every analyzer over the test files too,
# so go test's own vet subset (-vet) would only repeat it.
go test -race -count=1 -vet=off -timeout 40m ./...
# The Helm chart's offline check (docs/kubernetes.md#the-charts-check), a
# module of its own: its first build compiles Helm and the Kubernetes API
# (about 11 minutes on the 2-core machine), more than this command's time,
# so only with CKF_TEST_FULL=1 (CI sets it).
if [ "${CKF_TEST_FULL:-0}" = 1 ]; then
  (cd deploy/helm/check && go mod tidy -diff >/dev/null && go vet ./... && "$staticcheck" ./... &&
    go test -count=1 -timeout 30m ./...)
else
  echo "helm chart check: not run (CKF_TEST_FULL=1 runs it; docs/kubernetes.md)"
fi
# The tests that need the ckftest hooks (fault injection, paused workers, test
# clocks): every test of every *_ckftest_test.go file, found here so that a new
# one cannot be left out.
for dir in $(find . -name '*_ckftest_test.go' -not -path './.git/*' -exec dirname {} \; | sort -u); do
  names=$(sed -n 's/^func \(Test[A-Za-z0-9_]*\)(t \*testing\.T).*/\1/p' "$dir"/*_ckftest_test.go | paste -sd'|')
  go test -race -count=1 -vet=off -tags ckftest -run "^($names)\$" "$dir"
done
