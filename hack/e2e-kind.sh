#!/usr/bin/env bash
# End to end on a real cluster: kind + Flux + the converger image, one StatefulSet grown through
# git-ops, and the promise checked: Flux applied the grown revision, no pod restarted, the claims
# grew.
#
#   hack/e2e-kind.sh            (KEEP=1 to leave the cluster up; CLUSTER=name to choose it)
#
# Needs a container engine (docker), kind, kubectl, the flux CLI (>= 2.2, for `flux push
# artifact`), curl and jq, and network access to pull images. It does NOT run in CI, and it was
# not run where this repository is developed (no container engine there): CI proves the same
# flow against the in-repo fake API server and Flux stand-ins; this script is how a release is
# checked against the real thing. Every step says what it does and fails loudly.
#
# Deliberate choices, so what is asserted is what the converger controls:
# - The source is an OCIRepository in an in-cluster registry (pushed with `flux push artifact`):
#   the converger treats every Flux source kind alike (status.artifact), and this needs no git
#   server. A GitRepository differs only in how the revision is published.
# - kind's local-path provisioner has no resizer: the StorageClass below allows expansion, so the
#   API server accepts the grown request, but status.capacity stays as provisioned. The script
#   asserts spec.resources.requests (what the converger writes); use a CSI driver with a resizer
#   (e.g. csi-driver-host-path) to also see the capacity grow.
set -euo pipefail
shopt -s inherit_errexit

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CLUSTER="${CLUSTER:-flux-converger-e2e}"
IMAGE="flux-converger:e2e"
NS=db
WORK="$(mktemp -d)"
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
  if [ "${KEEP:-0}" != 1 ]; then kind delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT

step() { printf '\n==> %s\n' "$*"; }
fail() { printf 'e2e: FAILED: %s\n' "$*" >&2; exit 1; }
need() { command -v "$1" >/dev/null 2>&1 || fail "$1 is required"; }
for t in docker kind kubectl flux curl jq; do need "$t"; done

# Polls `$@` every 2 s until it succeeds, at most $WAIT seconds (default 300).
until_ok() {
  local deadline=$((SECONDS + ${WAIT:-300}))
  until "$@" >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$deadline" ] || fail "timed out waiting for: $*"
    sleep 2
  done
}

step "1. kind cluster $CLUSTER"
kind create cluster --name "$CLUSTER" --wait 120s
kubectl config use-context "kind-$CLUSTER"

step "2. Flux (controllers only; no bootstrap repository)"
flux install --components=source-controller,kustomize-controller,notification-controller
kubectl -n flux-system wait --for=condition=Available deployment --all --timeout=180s

step "3. the converger's image, built from this tree and loaded into the kind nodes"
docker build -t "$IMAGE" "$ROOT"
kind load docker-image "$IMAGE" --name "$CLUSTER"

step "4. Flux wiring (manifests/examples): Provider, Alert, and the HMAC Secret with a random key"
kubectl apply -f "$ROOT/manifests/examples/provider.yaml" -f "$ROOT/manifests/examples/alert.yaml"
kubectl -n flux-system create secret generic flux-converger-hook \
  --from-literal=token="$(head -c 32 /dev/urandom | base64)" --dry-run=client -o yaml | kubectl apply -f -

step "5. the converger (manifests/ with the local image)"
mkdir -p "$WORK/install"
cp -r "$ROOT/manifests" "$WORK/install/base"
cat > "$WORK/install/kustomization.yaml" <<YAML
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources: [base]
images:
  - name: ghcr.io/flux-converger/flux-converger
    newName: ${IMAGE%%:*}
    newTag: ${IMAGE##*:}
YAML
kubectl apply -k "$WORK/install"
kubectl -n flux-system rollout status deployment/flux-converger --timeout=180s

step "6. an in-cluster registry for the workload's revisions, reachable from here by port-forward"
kubectl create namespace registry
kubectl -n registry create deployment registry --image=registry:2 --port=5000
kubectl -n registry expose deployment registry --port=5000
kubectl -n registry rollout status deployment/registry --timeout=120s
kubectl -n registry port-forward svc/registry 5000:5000 >/dev/null 2>&1 &
PIDS+=($!)
until_ok curl -sf http://localhost:5000/v2/

# The workload: one StatefulSet, two replicas, a claim template of SIZE on an expandable class.
revision() { # SIZE
  mkdir -p "$WORK/tree"
  cat > "$WORK/tree/web.yaml" <<YAML
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: web
spec:
  serviceName: web
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
        - name: app
          image: busybox:1.36
          command: ["sh", "-c", "sleep 1000000"]
          volumeMounts: [{name: data, mountPath: /data}]
  volumeClaimTemplates:
    - metadata: {name: data}
      spec:
        accessModes: ["ReadWriteOnce"]
        storageClassName: expandable
        resources: {requests: {storage: $1}}
YAML
  flux push artifact "oci://localhost:5000/web:latest" --path="$WORK/tree" \
    --source="e2e" --revision="size-$1"
}

step "7. the workload: namespace, an expandable StorageClass, revision 1 (1Gi), gated by suspend"
kubectl create namespace "$NS"
kubectl apply -f - <<YAML
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: expandable}
provisioner: rancher.io/local-path
volumeBindingMode: WaitForFirstConsumer
allowVolumeExpansion: true
---
apiVersion: source.toolkit.fluxcd.io/v1
kind: OCIRepository
metadata: {name: web, namespace: flux-system}
spec:
  interval: 30s
  url: oci://registry.registry.svc.cluster.local:5000/web
  insecure: true
  ref: {tag: latest}
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata:
  name: web
  namespace: flux-system
  annotations: {flux-converger.io/gate: suspend}
spec:
  interval: 10m
  suspend: true
  prune: true
  path: ./
  targetNamespace: $NS
  sourceRef: {kind: OCIRepository, name: web}
YAML
# source-controller names an OCI revision <tag>@sha256:<digest>: read it back after each push.
source_revision() { kubectl -n flux-system get ocirepository web -o jsonpath='{.status.artifact.revision}' 2>/dev/null; }
source_moved_from() { local now; now="$(source_revision)"; [ -n "$now" ] && [ "$now" != "$1" ]; }
publish() { # SIZE: push, have source-controller fetch it, print the revision it stored
  local before
  before="$(source_revision || true)"
  revision "$1" >&2
  kubectl -n flux-system annotate ocirepository web reconcile.fluxcd.io/requestedAt="$(date +%s)" --overwrite >&2
  until_ok source_moved_from "$before"
  source_revision
}
applied() { # REVISION: Flux reports it applied
  [ "$(kubectl -n flux-system get kustomization web -o jsonpath='{.status.lastAppliedRevision}')" = "$1" ]
}
rev1="$(publish 1Gi)"
step "   the converger un-suspends for $rev1 (nothing to grow yet) and Flux applies it"
until_ok applied "$rev1"
until_ok kubectl -n "$NS" rollout status statefulset/web --timeout=5s
suspended() { [ "$(kubectl -n flux-system get kustomization web -o jsonpath='{.spec.suspend}')" = true ]; }
WAIT=60 until_ok suspended # the gate suspends it again once Flux has applied

uids() { kubectl -n "$NS" get pods,pvc -o json | jq -r '.items[] | "\(.kind)/\(.metadata.name) \(.metadata.uid)"' | sort; }
before="$(uids)"
sts_uid="$(kubectl -n "$NS" get statefulset web -o jsonpath='{.metadata.uid}')"
echo "$before"

step "8. grow: revision 2 declares 2Gi (Flux alone would fail: volumeClaimTemplates are immutable)"
rev2="$(publish 2Gi)"

step "9. the converger grows the claims, orphan-deletes and re-applies web; Flux applies $rev2"
until_ok applied "$rev2"
WAIT=60 until_ok suspended
ready="$(kubectl -n flux-system get kustomization web -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')"
[ "$ready" = True ] || fail "Kustomization web is not Ready after revision 2"

step "10. the promise: same pods (uids), same claims (uids) grown to 2Gi, a new StatefulSet object"
after="$(uids)"
echo "$after"
[ "$before" = "$after" ] || fail "pods or claims were replaced: before/after differ"
for i in 0 1; do
  size="$(kubectl -n "$NS" get pvc "data-web-$i" -o jsonpath='{.spec.resources.requests.storage}')"
  [ "$size" = 2Gi ] || fail "data-web-$i requests $size, not 2Gi"
done
[ "$(kubectl -n "$NS" get statefulset web -o jsonpath='{.spec.volumeClaimTemplates[0].spec.resources.requests.storage}')" = 2Gi ] \
  || fail "the StatefulSet's template is not 2Gi"
[ "$(kubectl -n "$NS" get statefulset web -o jsonpath='{.metadata.uid}')" != "$sts_uid" ] \
  || fail "the StatefulSet was not re-created"
restarts="$(kubectl -n "$NS" get pods -o json | jq '[.items[].status.containerStatuses[].restartCount] | add')"
[ "$restarts" = 0 ] || fail "containers restarted ($restarts)"

step "11. what the converger reports (/status) and the Events it wrote"
kubectl -n flux-system port-forward svc/flux-converger 9292:80 >/dev/null 2>&1 &
PIDS+=($!)
until_ok curl -sf http://localhost:9292/readyz
curl -sf http://localhost:9292/status/flux-system/web | jq .
state="$(curl -sf http://localhost:9292/status/flux-system/web | jq -r '.revisions[0].state')"
[ "$state" = converged ] || fail "/status says the last revision is $state"
# Metrics on the pod's http-prom port (8080) alone, as Flux lays its controllers out.
kubectl -n flux-system port-forward deploy/flux-converger 18080:8080 >/dev/null 2>&1 &
PIDS+=($!)
until_ok curl -sf http://localhost:18080/healthz
curl -sf http://localhost:18080/metrics | grep -q '^flux_converger_claims_grown_total' \
  || fail "/metrics on http-prom has no flux_converger_ series"
[ "$(curl -s -o /dev/null -w '%{http_code}' http://localhost:9292/metrics)" = 404 ] \
  || fail "/metrics is still served on the receiver port"
kubectl -n flux-system get events --field-selector involvedObject.name=web

printf '\ne2e: OK: revision 2 applied by Flux, claims grown in place, no pod restarted\n'
