#!/usr/bin/env bash
# Builds the images docker-compose.yml runs with no registry at all: static
# binaries (CGO_ENABLED=0) from this checkout, each image FROM scratch with a
# build context holding only its files.
#
#   scripts/build-images.sh                  # ckfrelay:local and ckfrelay-nats:local
#   scripts/build-images.sh --observability  # and ckfrelay-jaeger:local, ckfrelay-prometheus:local
#   CKF_IMAGE=x:1 CKF_NATS_IMAGE=y:1 scripts/build-images.sh
#
# --observability adds the images of the compose profile "observability":
#   - Jaeger v2 built static from github.com/jaegertracing/jaeger $JAEGER_VERSION
#     (cmd/jaeger, from the Go module proxy, outside this module's go.mod; its
#     go.mod has replace directives, so it is built as the main module from
#     the downloaded module source). The first build takes minutes; the
#     binary is cached in $CKF_TOOLS_DIR.
#   - Prometheus: Debian's prometheus package binary (apt-get download,
#     dpkg-deb -x), with the glibc loader and libraries ldd names, cached
#     in $CKF_TOOLS_DIR per package version.
# The NATS metrics exporter (ckf-nats-exporter) is in ckfrelay:local.
#
# Environment: CKF_IMAGE, CKF_NATS_IMAGE, CKF_JAEGER_IMAGE, CKF_PROMETHEUS_IMAGE
# (tags), CKF_TOOLS_DIR (default $XDG_CACHE_HOME/ckfrelay-tools or
# ~/.cache/ckfrelay-tools).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin
OBSERVABILITY=0
for arg in "$@"; do
  case $arg in
    --observability) OBSERVABILITY=1 ;;
    *) echo "build-images: unknown argument $arg (want --observability)" >&2; exit 2 ;;
  esac
done
readonly JAEGER_VERSION=v1.76.0
CKF_IMAGE=${CKF_IMAGE:-ckfrelay:local}
CKF_NATS_IMAGE=${CKF_NATS_IMAGE:-ckfrelay-nats:local}
CKF_JAEGER_IMAGE=${CKF_JAEGER_IMAGE:-ckfrelay-jaeger:local}
CKF_PROMETHEUS_IMAGE=${CKF_PROMETHEUS_IMAGE:-ckfrelay-prometheus:local}
tools=${CKF_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ckfrelay-tools}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mkdir -p "$out/ckfrelay" "$out/nats"
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/ckfrelay/" \
  ./cmd/relay-producer ./cmd/global-indexer ./cmd/engine-bridge ./cmd/trace-replayer ./cmd/ckf-health ./cmd/ckf-wanproxy ./cmd/ckf-wanprobe ./cmd/ckf-nats-exporter
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
[ "$OBSERVABILITY" = 1 ] || exit 0

# Jaeger: built once per version into the tool directory.
jaeger=$tools/jaeger-$JAEGER_VERSION/jaeger
if [ ! -x "$jaeger" ]; then
  mkdir -p "$(dirname "$jaeger")"
  t0=$SECONDS
  echo "building jaeger $JAEGER_VERSION (cmd/jaeger, static; several minutes the first time)"
  src=$(cd / && GOFLAGS= go mod download -json "github.com/jaegertracing/jaeger@$JAEGER_VERSION" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -d "$src/cmd/jaeger" ] || { echo "build-images: no jaeger module source at '$src'" >&2; exit 1; }
  (cd "$src" && CGO_ENABLED=0 GOFLAGS= GOWORK=off go build -trimpath \
    -ldflags "-s -w -X github.com/jaegertracing/jaeger/internal/version.latestVersion=$JAEGER_VERSION" \
    -o "$jaeger.tmp" ./cmd/jaeger)
  mv "$jaeger.tmp" "$jaeger"
  echo "built jaeger in $((SECONDS - t0))s ($jaeger)"
fi
mkdir -p "$out/jaeger"
cp "$jaeger" deploy/jaeger.yaml "$out/ckfrelay/ckf-health" "$out/jaeger/"

# Prometheus: Debian's binary with the libraries it links, per version.
if ! command -v apt-get >/dev/null; then
  echo "build-images: --observability needs apt-get (Debian's prometheus package)" >&2
  exit 1
fi
candidate() { apt-cache policy prometheus 2>/dev/null | sed -n 's/^ *Candidate: //p'; }
ver=$(candidate)
if [ -z "$ver" ] || [ "$ver" = "(none)" ]; then
  apt-get update -qq >/dev/null
  ver=$(candidate)
fi
[ -n "$ver" ] && [ "$ver" != "(none)" ] || { echo "build-images: apt has no prometheus package" >&2; exit 1; }
prom=$tools/prometheus-${ver//[:+~]/_}
if [ ! -x "$prom/rootfs/bin/prometheus" ]; then
  rm -rf "$prom" && mkdir -p "$prom/deb" "$prom/rootfs/bin" "$prom/rootfs/prometheus" "$prom/rootfs/etc/prometheus" "$prom/rootfs/tmp"
  # apt's sandbox user cannot write into root's cache directory.
  (cd "$prom/deb" && apt-get download -q "prometheus=$ver" 2>&1 | grep -v '^W: Download is performed unsandboxed' || true)
  deb=$(ls "$prom"/deb/prometheus_*.deb 2>/dev/null | head -1)
  [ -n "$deb" ] || { echo "build-images: apt-get download prometheus=$ver failed" >&2; exit 1; }
  dpkg-deb -x "$deb" "$prom/deb/x"
  cp "$prom/deb/x/usr/bin/prometheus" "$prom/rootfs/bin/"
  # Not static: copy the loader and every library ldd resolves.
  ldd "$prom/rootfs/bin/prometheus" | grep -o '/[^ ]*' | while read -r lib; do
    mkdir -p "$prom/rootfs$(dirname "$lib")"
    cp -L "$lib" "$prom/rootfs$lib"
  done
  rm -rf "$prom/deb"
fi
mkdir -p "$out/prometheus"
cp -a "$prom/rootfs" "$out/prometheus/"
cp "$out/ckfrelay/ckf-health" "$out/prometheus/rootfs/"
build "$CKF_JAEGER_IMAGE" deploy/images/jaeger.Dockerfile "$out/jaeger"
build "$CKF_PROMETHEUS_IMAGE" deploy/images/prometheus.Dockerfile "$out/prometheus"
echo "built $CKF_JAEGER_IMAGE (jaeger $JAEGER_VERSION) and $CKF_PROMETHEUS_IMAGE (Debian prometheus $ver) (FROM scratch)"
