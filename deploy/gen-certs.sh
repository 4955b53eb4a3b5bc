#!/usr/bin/env bash
# Generates the TLS material of the secured deployment (README "Security"):
# a CA, the hub's leaf-node server certificate (nats-hub) and one client
# certificate per DC leaf link (leaf-dc-a, leaf-dc-b). Private keys are
# written to the output directory only; never commit them.
#
#   deploy/gen-certs.sh [out-dir (default deploy/certs)] [extra DC names...]
set -euo pipefail
out=${1:-"$(dirname "$0")/certs"}
shift || true
dcs=("dc-a" "dc-b" "$@")
mkdir -p "$out"
cd "$out"
days=825

openssl ecparam -name prime256v1 -genkey -noout -out ca-key.pem
openssl req -x509 -new -key ca-key.pem -sha256 -days "$days" -subj "/CN=ckfrelay CA" -out ca.pem

issue() { # name, extended key usage
  local name=$1 eku=$2
  openssl ecparam -name prime256v1 -genkey -noout -out "$name-key.pem"
  openssl req -new -key "$name-key.pem" -subj "/CN=$name" -out "$name.csr"
  printf 'subjectAltName=DNS:%s,DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=%s\nkeyUsage=digitalSignature\n' "$name" "$eku" > "$name.ext"
  openssl x509 -req -in "$name.csr" -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days "$days" -sha256 \
    -extfile "$name.ext" -out "$name.pem" 2>/dev/null
  rm -f "$name.csr" "$name.ext"
}

issue nats-hub serverAuth,clientAuth
for dc in "${dcs[@]}"; do
  issue "leaf-$dc" clientAuth,serverAuth
done
rm -f ca.srl
chmod 600 ./*-key.pem
echo "certificates written to $out"
