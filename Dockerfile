# Online build (docker compose up --build): compile every binary with the
# public golang image, then two FROM scratch images:
#   --target ckfrelay  relay-producer, global-indexer, trace-replayer, ckf-health, ckf-wanproxy, ckf-wanprobe, ckf-nats-exporter
#   --target nats      nats-server (from the nats-server/v2 module in go.mod), ckf-health
# scripts/build-images.sh builds the same two images with no registry
# (scripts/up.sh: build, then start the stack). .dockerignore keeps the
# context to the module files and the Go packages the binaries import.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/ ./cmd/relay-producer ./cmd/global-indexer ./cmd/engine-bridge ./cmd/trace-replayer ./cmd/ckf-health ./cmd/ckf-wanproxy ./cmd/ckf-wanprobe ./cmd/ckf-nats-exporter ./cmd/nats-server

FROM scratch AS nats
COPY --from=build /out/nats-server /out/ckf-health /
EXPOSE 4222 7422 8222
ENTRYPOINT ["/nats-server"]

FROM scratch AS ckfrelay
COPY --from=build /out/relay-producer /out/global-indexer /out/engine-bridge /out/trace-replayer /out/ckf-health /out/ckf-wanproxy /out/ckf-wanprobe /out/ckf-nats-exporter /
EXPOSE 8080 9090
ENTRYPOINT ["/global-indexer"]
