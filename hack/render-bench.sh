#!/usr/bin/env bash
# Resolve+render of a 2,000-object revision (200 files x 10 objects, ${VAR} sizes) against the
# bare kustomize build of the same tree, with peak memory (GNU time's max RSS).
#
#   hack/render-bench.sh [RUNS]      (default 5; needs kubectl and /usr/bin/time)
#
# The converger's own overhead (untar, generator, overlay, substitution, labels, YAML out) is
# (render - kustomize) / kustomize. Both run from a release build on the same tree.
set -euo pipefail
shopt -s inherit_errexit
RUNS="${1:-5}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

cargo build --release --quiet --manifest-path "$ROOT/Cargo.toml" --bin flux-converger
BIN="$ROOT/target/release/flux-converger"

mkdir -p "$WORK/tree/apps"
for f in $(seq -w 1 200); do
  out="$WORK/tree/apps/app-$f.yaml"
  : > "$out"
  for o in $(seq 1 10); do
    if [ "$o" -eq 1 ]; then
      cat >> "$out" <<YAML
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: db-$f
  labels: {app: db-$f}
spec:
  serviceName: db-$f
  replicas: 1
  selector: {matchLabels: {app: db-$f}}
  template:
    metadata: {labels: {app: db-$f}}
    spec:
      containers:
        - name: db
          image: postgres:16
  volumeClaimTemplates:
    - metadata: {name: data}
      spec:
        accessModes: [ReadWriteOnce]
        resources:
          requests:
            storage: \${DB_SIZE}
YAML
    else
      cat >> "$out" <<YAML
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: cfg-$f-$o
data:
  size: "\${DB_SIZE}"
  owner: team-$f
  note: "object $o of file $f"
YAML
    fi
  done
done
cat > "$WORK/ks.yaml" <<'YAML'
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: bench, namespace: flux-system}
spec:
  sourceRef: {kind: GitRepository, name: repo}
  path: ./apps
  targetNamespace: bench
  postBuild:
    substitute: {DB_SIZE: 10Gi}
YAML
# Flux's archive layout: root ".", uid/gid 0, zero times.
tar --owner=0 --group=0 --numeric-owner --mtime=@0 -czf "$WORK/artifact.tar.gz" -C "$WORK/tree" .

# The bare build gets the kustomization file the converger writes: every file listed, plus the
# spec overlay (targetNamespace), so both sides ask kustomize for the same work.
cp -r "$WORK/tree" "$WORK/bare"
{ echo "namespace: bench"; echo "resources:"; (cd "$WORK/bare/apps" && ls *.yaml | sed 's/^/- .\//'); } > "$WORK/kustomization.yaml"
mv "$WORK/kustomization.yaml" "$WORK/bare/apps/kustomization.yaml"

measure() { # label, command...
  local label="$1"; shift
  local total=0 peak=0
  for _ in $(seq 1 "$RUNS"); do
    /usr/bin/time -v -o "$WORK/time.txt" "$@" > "$WORK/out.yaml"
    local wall rss
    wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$WORK/time.txt" | awk -F: '{ if (NF==3) print ($1*3600)+($2*60)+$3; else print ($1*60)+$2 }')
    rss=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$WORK/time.txt")
    total=$(echo "$total + $wall" | bc -l)
    [ "$rss" -gt "$peak" ] && peak=$rss
  done
  local mean
  mean=$(echo "scale=3; $total / $RUNS" | bc -l)
  echo "$label: mean ${mean}s over $RUNS runs, peak RSS ${peak} KiB, $(grep -c '^kind:' "$WORK/out.yaml") objects" >&2
  echo "$mean"
}

bare=$(measure "kubectl kustomize (bare build)" kubectl kustomize --load-restrictor=LoadRestrictionsNone "$WORK/bare/apps")
full=$(measure "flux-converger render --artifact (untar+generate+build+substitute+labels)" \
  "$BIN" --log-level warn render --artifact "$WORK/artifact.tar.gz" --kustomization-file "$WORK/ks.yaml")
echo "overhead: $(echo "scale=1; ($full - $bare) * 100 / $bare" | bc -l)% (target < 10%)" >&2
# The converger alone (its own time and peak RSS; GNU time reports the largest of the process
# tree, which above is kubectl): the same render with a "kustomize" that prints the bare output.
kubectl kustomize --load-restrictor=LoadRestrictionsNone "$WORK/bare/apps" > "$WORK/built.yaml"
printf '#!/bin/sh\ncat "%s"\n' "$WORK/built.yaml" > "$WORK/cat-kustomize.sh"
chmod +x "$WORK/cat-kustomize.sh"
measure "flux-converger render alone (kustomize replaced by cat)" \
  "$BIN" --log-level warn render --artifact "$WORK/artifact.tar.gz" --kustomization-file "$WORK/ks.yaml" \
  --kustomize "$WORK/cat-kustomize.sh" > /dev/null
