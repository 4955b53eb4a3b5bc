#!/usr/bin/env bash
# Runs docs/kubernetes.md against whatever cluster kubectl reaches: NATS
# from the official chart (a 3-node JetStream hub, a leaf node per DC with
# its own JetStream domain), the DC sites dc-a and dc-b and the router site
# from deploy/helm/ckfrelay, then the replayer's verified queries (every
# answer against the exact ground truth), a rolling upgrade of dc-a's
# relays, and verified queries again. Removes what it installed at the end
# unless CKF_K8S_KEEP=1. Skips (one line, exit 0) when no cluster answers.
#
#   CKF_IMAGE=registry.example.com/ckfrelay:0.1.0 scripts/k8s-smoke.sh
#
# Environment: CKF_IMAGE (the ckfrelay image the cluster pulls, built by
# scripts/build-images.sh; required when a cluster answers), CKF_NATS_CHART
# (default nats/nats, from https://nats-io.github.io/k8s/helm/charts/, or
# a local chart directory), CKF_NATS_CHART_VERSION (2.14.2),
# CKF_K8S_PREFIX (namespace prefix, default ckf), CKF_K8S_TIMEOUT (per
# wait, default 600s), CKF_K8S_KEEP.
set -euo pipefail
cd "$(dirname "$0")/.."

case ${1:-} in
  -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  "") ;;
  *) echo "k8s-smoke: unknown argument $1" >&2; exit 2 ;;
esac

if ! command -v kubectl >/dev/null || ! kubectl version --request-timeout=5s >/dev/null 2>&1; then
  echo "k8s-smoke: skipped: no Kubernetes cluster answers (kubectl $(command -v kubectl >/dev/null && echo 'version failed' || echo 'not installed'))"
  exit 0
fi
command -v helm >/dev/null || { echo "k8s-smoke: a cluster answers but helm is not installed" >&2; exit 1; }
[ -n "${CKF_IMAGE:-}" ] || { echo "k8s-smoke: set CKF_IMAGE to the ckfrelay image the cluster pulls (scripts/build-images.sh)" >&2; exit 1; }
repo=${CKF_IMAGE%:*}
tag=${CKF_IMAGE##*:}
[ "$repo" != "$CKF_IMAGE" ] && [ "$tag" != latest ] || { echo "k8s-smoke: CKF_IMAGE needs a tag other than latest" >&2; exit 1; }

P=${CKF_K8S_PREFIX:-ckf}
NATS_NS=$P-nats
TIMEOUT=${CKF_K8S_TIMEOUT:-600s}
CHART=${CKF_NATS_CHART:-nats/nats}
VERSION=${CKF_NATS_CHART_VERSION:-2.14.2}
START=$(date +%s)
log() { echo "k8s-smoke: [$(( $(date +%s) - START ))s] $*"; }

cleanup() {
  local code=$?
  if [ "$code" != 0 ]; then
    log "failed; pods:"
    kubectl get pods -A -l 'app.kubernetes.io/name in (ckfrelay,nats)' -o wide || true
  fi
  if [ "${CKF_K8S_KEEP:-0}" = 1 ]; then
    log "kept (CKF_K8S_KEEP=1): helm uninstall and kubectl delete namespace $NATS_NS $P-dc-a $P-dc-b $P-router"
    return
  fi
  for ns in "$P-router" "$P-dc-a" "$P-dc-b" "$NATS_NS"; do
    kubectl delete namespace "$ns" --wait=false >/dev/null 2>&1 || true
  done
}
trap cleanup EXIT

if [ "$CHART" = nats/nats ]; then
  helm repo add nats https://nats-io.github.io/k8s/helm/charts/ >/dev/null
  helm repo update nats >/dev/null
fi
for ns in "$NATS_NS" "$P-dc-a" "$P-dc-b" "$P-router"; do
  kubectl create namespace "$ns" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
done

# 1. NATS: the hub, then a leaf per DC dialling it.
hub_leaf="nats-leaf://nats-hub.$NATS_NS.svc:7422"
helm upgrade --install nats-hub "$CHART" --version "$VERSION" -n "$NATS_NS" \
  -f deploy/helm/nats/hub-values.yaml --wait --timeout "$TIMEOUT" >/dev/null
for dc in dc-a dc-b; do
  helm upgrade --install "nats-$dc" "$CHART" --version "$VERSION" -n "$NATS_NS" \
    -f "deploy/helm/nats/$dc-values.yaml" \
    --set-json "config.merge.leafnodes.remotes=[{\"urls\":[\"$hub_leaf\"],\"deny_imports\":[\"kvevents.>\"],\"deny_exports\":[\"kvevents.>\"]}]" \
    --wait --timeout "$TIMEOUT" >/dev/null
done
log "NATS up: hub (3 nodes, domain hub), leaves dc-a and dc-b"

common=(--set "image.repository=$repo" --set "image.tag=$tag"
  --set "nats.namespaceSelector.matchLabels.kubernetes\.io/metadata\.name=$NATS_NS")

# 2. The DC sites: two relays each, both models.
for dc in dc-a dc-b; do
  helm upgrade --install "$dc" deploy/helm/ckfrelay -n "$P-$dc" "${common[@]}" \
    --set "nats.url=nats://nats-$dc.$NATS_NS.svc:4222" --set "dc.name=$dc" --set "dc.inputJsDomain=$dc" \
    --set 'relay.pools.pools[0].domain=demo' --set 'relay.pools.pools[1].domain=demo-2' \
    --wait --timeout "$TIMEOUT" >/dev/null
done
log "DC sites up: dc-a, dc-b (relay-producer ×2 each)"

# 3. The router site.
helm upgrade --install router deploy/helm/ckfrelay -n "$P-router" "${common[@]}" \
  --set site=router --set "nats.url=nats://nats-hub.$NATS_NS.svc:4222" \
  --set 'indexer.domains={demo,demo-2}' \
  --set indexer.route.dcRTT.dc-a=5ms --set indexer.route.dcRTT.dc-b=40ms >/dev/null
log "router site installed; indexers become ready once a lane is active"

# 4. Verified queries: the replayer publishes both DCs' worker events at
# their leaves and checks every indexer answer (exit 0: no false negative).
replay() { # NAME HASH_SPACE
  kubectl -n "$P-router" delete pod "$1" --ignore-not-found >/dev/null
  kubectl -n "$P-router" run "$1" --restart=Never --image="$CKF_IMAGE" \
    --command -- /trace-replayer --repeat=false --speed 0 --max-requests 1000 --hash-space "$2" \
    --nats-url "nats://nats-hub.$NATS_NS.svc:4222" --query-via http \
    --indexer-url "http://router-ckfrelay-indexer:8080" --domain demo,demo-2 --dcs dc-a,dc-b \
    --dc-nats-urls "dc-a=nats://nats-dc-a.$NATS_NS.svc:4222,dc-b=nats://nats-dc-b.$NATS_NS.svc:4222" >/dev/null
  if ! kubectl -n "$P-router" wait pod "$1" --for=jsonpath='{.status.phase}'=Succeeded --timeout "$TIMEOUT" >/dev/null; then
    kubectl -n "$P-router" logs "$1" | tail -20 >&2 || true
    echo "k8s-smoke: $1: the replayer did not verify its queries" >&2
    return 1
  fi
  kubectl -n "$P-router" logs "$1" | tail -3
}
replay replay-baseline 0
kubectl -n "$P-router" rollout status deployment/router-ckfrelay-indexer --timeout "$TIMEOUT" >/dev/null
log "baseline verified"

# 5. Upgrade dc-a's relays without losing a lane: a rolling restart (what a
# new image tag does), then verified queries again.
helm upgrade dc-a deploy/helm/ckfrelay -n "$P-dc-a" --reuse-values \
  --set-string "podAnnotations.ckfrelay\.io/restarted=$(date +%s)" --wait --timeout "$TIMEOUT" >/dev/null
kubectl -n "$P-dc-a" rollout status statefulset/dc-a-ckfrelay-relay --timeout "$TIMEOUT" >/dev/null
log "dc-a relays rolled"
replay replay-after-rollout 1
log "OK: both DC sites and the router site from the chart, queries verified before and after a relay rollout"
