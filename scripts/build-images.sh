#!/usr/bin/env bash
# Builds the two images docker-compose.yml runs with no registry at all:
# static binaries (CGO_ENABLED=0) from this checkout, each image FROM scratch
# with a build context holding only its binaries.
#
#   scripts/build-images.sh            # tags ckfrelay:local and ckfrelay-nats:local
#   CKF_IMAGE=x:1 CKF_NATS_IMAGE=y:1 scripts/build-images.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin
CKF_IMAGE=${CKF_IMAGE:-ckfrelay:local}
CKF_NATS_IMAGE=${CKF_NATS_IMAGE:-ckfrelay-nats:local}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mkdir -p "$out/ckfrelay" "$out/nats"
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/ckfrelay/" \
  ./cmd/relay-producer ./cmd/global-indexer ./cmd/trace-replayer ./cmd/ckf-health ./cmd/ckf-wanproxy ./cmd/ckf-wanprobe
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/nats/" ./cmd/nats-server
cp "$out/ckfrelay/ckf-health" "$out/nats/"
build() { # tag dockerfile context; quiet unless it fails
  if ! docker build -q -t "$1" -f "$2" "$3" >"$out/build.log" 2>&1; then
    cat "$out/build.log" >&2
    return 1
  fi
}
build "$CKF_IMAGE" deploy/images/ckfrelay.Dockerfile "$out/ckfrelay"
build "$CKF_NATS_IMAGE" deploy/images/nats.Dockerfile "$out/nats"
echo "built $CKF_IMAGE and $CKF_NATS_IMAGE (FROM scratch, static)"
