# Offline image (scripts/build-images.sh): nats-server built from the
# nats-server/v2 module in go.mod, static, FROM scratch.
FROM scratch
COPY nats-server ckf-health /
EXPOSE 4222 7422 8222
ENTRYPOINT ["/nats-server"]
