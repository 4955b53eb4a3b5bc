# Offline image (scripts/build-images.sh): Jaeger v2 built static from
# github.com/jaegertracing/jaeger v1.76.0 (cmd/jaeger), FROM scratch. The
# context holds the binary, ckf-health and deploy/jaeger.yaml.
FROM scratch
COPY jaeger ckf-health /
COPY jaeger.yaml /etc/jaeger/config.yaml
EXPOSE 4318 16686 13133
# Jaeger traces itself only when asked; no exporter is wired for it here.
ENV OTEL_TRACES_EXPORTER=none
ENTRYPOINT ["/jaeger"]
CMD ["--config", "/etc/jaeger/config.yaml"]
