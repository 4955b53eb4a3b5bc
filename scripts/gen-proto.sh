#!/usr/bin/env bash
# Regenerates the Go code of dynamo/kvrelay/v1/relay.proto.
#
# Idempotent: running it twice leaves the tree unchanged. The plugin versions
# are pinned so that the committed .pb.go files are reproducible; the script
# installs exactly those versions into bin/protoc-plugins (git-ignored via
# /bin/) instead of trusting whatever happens to be on PATH.
set -euo pipefail
cd "$(dirname "$0")/.."

PROTOC_GEN_GO_VERSION=v1.36.12
PROTOC_GEN_GO_GRPC_VERSION=v1.5.1

if ! command -v protoc >/dev/null 2>&1; then
	echo "gen-proto: protoc not found on PATH; install it (Debian: apt-get install -y protobuf-compiler)" >&2
	exit 1
fi

plugins="$PWD/bin/protoc-plugins"
mkdir -p "$plugins"

# install_plugin BINARY MODULE_PATH VERSION VERSION_OUTPUT
# Reinstalls only when the binary is missing or reports another version.
install_plugin() {
	local bin=$1 pkg=$2 version=$3 want=$4
	if [[ -x "$plugins/$bin" ]] && [[ "$("$plugins/$bin" --version 2>/dev/null)" == "$want" ]]; then
		return
	fi
	echo "gen-proto: installing $pkg@$version" >&2
	GOBIN="$plugins" GOFLAGS=-mod=mod go install "$pkg@$version"
}

install_plugin protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go \
	"$PROTOC_GEN_GO_VERSION" "protoc-gen-go $PROTOC_GEN_GO_VERSION"
install_plugin protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc \
	"$PROTOC_GEN_GO_GRPC_VERSION" "protoc-gen-go-grpc ${PROTOC_GEN_GO_GRPC_VERSION#v}"

protoc \
	--plugin=protoc-gen-go="$plugins/protoc-gen-go" \
	--plugin=protoc-gen-go-grpc="$plugins/protoc-gen-go-grpc" \
	--proto_path=. \
	--go_out=. --go_opt=paths=source_relative \
	--go-grpc_out=. --go-grpc_opt=paths=source_relative \
	dynamo/kvrelay/v1/relay.proto

echo "gen-proto: generated dynamo/kvrelay/v1/relay.pb.go and relay_grpc.pb.go (protoc $(protoc --version | cut -d' ' -f2))" >&2
