#!/usr/bin/env bash
# A converge of 3 claims (1Gi -> 2Gi, orphan delete and re-apply) as the CLI process, side by
# side with the same requests sent by a minimal client (examples/wire-floor.rs: one keep-alive
# TLS connection plus one for the watch), both against the fake API server over TLS, each run on
# a fresh server. Prints each run, the medians and the ratio converge / floor.
#
#   hack/converge-wire.sh [RUNS] [ORPHAN_GC_MS]
#
# RUNS: pairs of runs (default 5). ORPHAN_GC_MS: how long the fake's garbage collector takes to
# finish the orphan delete (default: the fake's own, ~150 ms as measured on a real one; 0 leaves
# only the wire, the client and the server's handling). CONVERGER=path runs another build of the
# binary (e.g. one built without the connector fix, for a before/after). TRACE=1 prints the
# per-request trace (flux_converger::wire at debug) of one more converge.
# Times are process wall times (start to exit), release builds, this machine's.
# SERVICE=1 measures the service's converge instead: examples/service-converge.rs converges
# once to warm the caches a running `serve` keeps (StorageClasses, intents, StatefulSets, the
# server's "forbidden in place"), then times a second converge in-process, against the floor's
# `--service` sequence (the same N+7 requests on a warm connection, the deletion read from a
# watch opened beforehand), timed from its first request to its last answer.
set -euo pipefail
shopt -s inherit_errexit
RUNS="${1:-5}"
GC_MS="${2:-}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
WORK="$(mktemp -d)"
FAKE_PID=""
cleanup() {
  if [ -n "$FAKE_PID" ]; then kill "$FAKE_PID" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

cargo build --release --quiet --manifest-path "$ROOT/Cargo.toml" \
  --bin flux-converger --example fake-apiserver --example wire-floor --example service-converge
CONVERGER="${CONVERGER:-$TARGET/release/flux-converger}"
FAKE="$TARGET/release/examples/fake-apiserver"
FLOOR="$TARGET/release/examples/wire-floor"
SERVICE_CONVERGE="$TARGET/release/examples/service-converge"

cat > "$WORK/seed.yaml" <<'YAML'
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: expandable}
provisioner: example.com/fake
allowVolumeExpansion: true
---
apiVersion: v1
kind: Namespace
metadata: {name: default}
YAML
statefulset() {
  cat <<YAML
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: web
  namespace: default
  labels: {kustomize.toolkit.fluxcd.io/name: apps, kustomize.toolkit.fluxcd.io/namespace: flux-system}
spec:
  serviceName: web
  replicas: 3
  podManagementPolicy: Parallel
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: app, image: busybox}]
  volumeClaimTemplates:
  - metadata: {name: data}
    spec:
      accessModes: [ReadWriteOnce]
      storageClassName: expandable
      resources: {requests: {storage: $1}}
YAML
}
statefulset 1Gi > "$WORK/live.yaml"
statefulset 2Gi > "$WORK/desired.yaml"
statefulset 3Gi > "$WORK/desired-3gi.yaml"

# A fresh fake with web (3 replicas, 3 Bound 1Gi claims) created through it, over TLS.
start_fake() {
  rm -f "$WORK/kubeconfig"
  local gc=()
  if [ -n "$GC_MS" ]; then gc=(--orphan-gc-ms "$GC_MS"); fi
  "$FAKE" --tls --quiet --controllers --seed "$WORK/seed.yaml" --apply "$WORK/live.yaml" \
    --bind default/data-web-0 --bind default/data-web-1 --bind default/data-web-2 \
    "${gc[@]}" --kubeconfig-out "$WORK/kubeconfig" 2>"$WORK/fake.log" &
  FAKE_PID=$!
  for _ in $(seq 1 500); do
    [ -s "$WORK/kubeconfig" ] && return 0
    sleep 0.01
  done
  cat "$WORK/fake.log" >&2
  echo "the fake API server did not start" >&2
  exit 1
}
stop_fake() {
  kill "$FAKE_PID" 2>/dev/null || true
  wait "$FAKE_PID" 2>/dev/null || true
  FAKE_PID=""
}

# Wall time of one command in microseconds; the command's output goes to $WORK/out.
timed() {
  local t0 t1
  t0=$(date +%s%N)
  if ! "$@" >"$WORK/out" 2>&1; then
    cat "$WORK/out" >&2
    echo "failed: $*" >&2
    exit 1
  fi
  t1=$(date +%s%N)
  echo $(((t1 - t0) / 1000))
}

converge_run() {
  "$CONVERGER" --kubeconfig "$WORK/kubeconfig" converge --desired "$WORK/desired.yaml"
}

median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : int((a[NR/2]+a[NR/2+1])/2)}'; }

: > "$WORK/converge"
: > "$WORK/floor"
# What the service's side prints on stdout: the milliseconds it timed, as microseconds.
printed() {
  "$@" >"$WORK/out" 2>"$WORK/err" || { cat "$WORK/out" "$WORK/err" >&2; echo "failed: $*" >&2; exit 1; }
  awk '{printf "%d\n", $1 * 1000}' "$WORK/out"
}

if [ "${SERVICE:-0}" = 1 ]; then
  echo "run  service_ms  floor_ms  (in-process, warm caches; orphan GC: ${GC_MS:-fake default} ms)"
else
  echo "run  converge_ms  floor_ms  (orphan GC: ${GC_MS:-fake default} ms; $CONVERGER)"
fi
for i in $(seq 1 "$RUNS"); do
  start_fake
  if [ "${SERVICE:-0}" = 1 ]; then
    c=$(printed "$SERVICE_CONVERGE" --kubeconfig "$WORK/kubeconfig" \
      --warm "$WORK/desired.yaml" --desired "$WORK/desired-3gi.yaml")
  else
    c=$(timed converge_run)
    grep -q "converged" "$WORK/out" || { cat "$WORK/out" >&2; exit 1; }
  fi
  stop_fake
  start_fake
  if [ "${SERVICE:-0}" = 1 ]; then
    f=$(printed "$FLOOR" --service --kubeconfig "$WORK/kubeconfig" --desired "$WORK/desired.yaml")
  else
    f=$(timed "$FLOOR" --kubeconfig "$WORK/kubeconfig" --desired "$WORK/desired.yaml")
  fi
  stop_fake
  echo "$c" >> "$WORK/converge"
  echo "$f" >> "$WORK/floor"
  awk -v i="$i" -v c="$c" -v f="$f" 'BEGIN {printf "%3d  %11.1f  %8.1f\n", i, c / 1000, f / 1000}'
done
mc=$(median < "$WORK/converge")
mf=$(median < "$WORK/floor")
awk -v c="$mc" -v f="$mf" \
  'BEGIN {printf "median converge %.1f ms, floor %.1f ms, ratio %.2fx\n", c / 1000, f / 1000, c / f}'

if [ "${TRACE:-0}" = 1 ]; then
  start_fake
  "$CONVERGER" --kubeconfig "$WORK/kubeconfig" --log-level flux_converger::wire=debug \
    converge --desired "$WORK/desired.yaml" 2>&1 | grep -E 'wire|steps'
  stop_fake
fi
