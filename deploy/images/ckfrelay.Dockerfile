# Offline image (scripts/build-images.sh): the build context holds only the
# static binaries; FROM scratch needs no pull.
FROM scratch
COPY relay-producer global-indexer engine-bridge trace-replayer ckf-health ckf-wanproxy ckf-wanprobe ckf-nats-exporter /
EXPOSE 8080 9090 7422 8474
ENTRYPOINT ["/global-indexer"]
