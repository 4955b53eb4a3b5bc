# Offline image (scripts/build-images.sh): Debian's prometheus package
# binary (dynamically linked against glibc only) with the loader and libc
# it names, FROM scratch. GODEBUG=netdns=go keeps name resolution in Go, so
# no NSS module or nsswitch.conf is needed.
FROM scratch
COPY rootfs/ /
ENV GODEBUG=netdns=go
EXPOSE 9090
ENTRYPOINT ["/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus", "--storage.tsdb.retention.time=1d"]
