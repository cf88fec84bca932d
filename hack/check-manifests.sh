#!/usr/bin/env bash
# What ships to clusters, rendered and checked (what .ci/run calls):
#   1. `kubectl kustomize` of the install (manifests/) alone and with each opt-in component
#      (helm-release-reader, argocd; argocd also placed in Argo CD's namespace), the Flux wiring examples
#      (manifests/examples/), the sidecar component and the ExternalArtifact feature-gate component
#      (manifests/examples/external-artifact/) over a minimal bootstrap flux-system
#      (tests/data/flux-system/), and the sharding and multi-tenant components over the install; each must render, and the results are left in
#      target/manifests/ to read or to attach to a release;
#   2. the checks on them, in Rust, where they are tested themselves: tests/it/manifests.rs
#      (hardening, wiring, Flux CRD schemas, the Dockerfile) and tests/it/rbac.rs (the RBAC against
#      every request the code sends to the fake API server).
# Needs kubectl (its built-in kustomize) and cargo; no cluster, no network.
set -euo pipefail
shopt -s inherit_errexit
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="$ROOT/target/manifests"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$OUT"

render() { # NAME DIR
  kubectl kustomize "$2" > "$OUT/$1.yaml"
  local n
  n="$(grep -c '^kind: ' "$OUT/$1.yaml" || true)"
  if [ "$n" -eq 0 ]; then
    echo "check-manifests: $2 renders no objects" >&2
    exit 1
  fi
  echo "check-manifests: $2 -> target/manifests/$1.yaml ($n objects)"
}

render install "$ROOT/manifests"
render examples "$ROOT/manifests/examples"

# The install with the opt-in component for HelmReleases (docs/helmrelease.md).
mkdir -p "$WORK/helm"
REL="$(realpath --relative-to="$WORK/helm" "$ROOT/manifests")"
printf 'resources:\n  - %s\ncomponents:\n  - %s/helm-release-reader\n' "$REL" "$REL" > "$WORK/helm/kustomization.yaml"
render install-with-helm-release-reader "$WORK/helm"

# The install with the opt-in component for Argo CD Applications (docs/argocd.md).
mkdir -p "$WORK/argocd"
REL="$(realpath --relative-to="$WORK/argocd" "$ROOT/manifests")"
printf 'resources:\n  - %s\ncomponents:\n  - %s/argocd\n' "$REL" "$REL" > "$WORK/argocd/kustomization.yaml"
render install-with-argocd "$WORK/argocd"

# The same, placed in Argo CD's namespace (manifests/examples/argocd-namespace).
printf 'resources:\n  - %s\ncomponents:\n  - %s/argocd\n  - %s/examples/argocd-namespace\n' "$REL" "$REL" "$REL" > "$WORK/argocd/kustomization.yaml"
render install-with-argocd-in-argocd "$WORK/argocd"

mkdir -p "$WORK/flux-system"
cp "$ROOT/tests/data/flux-system/gotk-components.yaml" "$WORK/flux-system/"
cp -r "$ROOT/manifests/sidecar" "$WORK/flux-system/flux-converger"
cat > "$WORK/flux-system/kustomization.yaml" <<'YAML'
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - gotk-components.yaml
components:
  - flux-converger
YAML
render sidecar-over-flux-system "$WORK/flux-system"

cat > "$WORK/flux-system/kustomization.yaml" <<'YAML'
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - gotk-components.yaml
components:
  - external-artifact
YAML
cp -r "$ROOT/manifests/examples/external-artifact" "$WORK/flux-system/external-artifact"
render external-artifact-over-flux-system "$WORK/flux-system"

# The sharding component over the install, as a fleet repository uses it (kustomize refuses a
# component inside the base it patches, so the install is copied next to it).
mkdir -p "$WORK/sharded"
cp -r "$ROOT/manifests" "$WORK/sharded/flux-converger"
cat > "$WORK/sharded/kustomization.yaml" <<'YAML'
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - flux-converger
components:
  - flux-converger/examples/sharding
YAML
render sharded-install "$WORK/sharded"

# The multi-tenant lockdown component over the install, the same way.
mkdir -p "$WORK/multi-tenant"
cp -r "$ROOT/manifests" "$WORK/multi-tenant/flux-converger"
cat > "$WORK/multi-tenant/kustomization.yaml" <<'YAML'
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - flux-converger
components:
  - flux-converger/examples/multi-tenant
YAML
render multi-tenant-install "$WORK/multi-tenant"

cd "$ROOT"
cargo test --locked --test it -- manifests:: rbac::
