#!/usr/bin/env bash
# The artifact an attacker with write access to one tenant's repository could publish: one
# 2 GiB YAML file of zeros (a few MB compressed). Builds it (a sparse file: no 2 GiB on disk)
# and measures `render --artifact` on it, peak RSS by GNU time, under the default caps and
# under caps loosened one at a time; then the worst a file can do within the defaults (files
# of ASCII '0's just under the per-file cap, the unpacked cap filled).
#
#   hack/artifact-bomb.sh            (release build; PROFILE=dev for the debug one)
#
# Needs GNU tar, gzip, /usr/bin/time. Prints one line per case: exit code, peak RSS, the error.
set -euo pipefail
shopt -s inherit_errexit
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PROFILE="${PROFILE:-release}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

cargo build --quiet --profile "$PROFILE" --manifest-path "$ROOT/Cargo.toml" --bin flux-converger
case "$PROFILE" in dev) DIR=debug ;; *) DIR="$PROFILE" ;; esac
BIN="$ROOT/target/$DIR/flux-converger"

cat > "$WORK/ks.yaml" <<'YAML'
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: tenant, namespace: flux-system}
spec:
  interval: 10m
  sourceRef: {kind: GitRepository, name: tenant}
  path: ./apps
  prune: true
  targetNamespace: tenant
YAML
CM='apiVersion: v1
kind: ConfigMap
metadata: {name: ok}'

# The bomb: Flux's archive layout (root "."), one 2 GiB file of NUL bytes.
mkdir -p "$WORK/bomb/apps"
printf '%s\n' "$CM" > "$WORK/bomb/apps/ok.yaml"
truncate -s 2G "$WORK/bomb/apps/zeros.yaml"
tar -C "$WORK/bomb" -cf - . | gzip -1 > "$WORK/bomb.tar.gz"
rm -rf "$WORK/bomb"

# Within the defaults: three files of ASCII '0' (one YAML scalar each) just under the per-file
# cap, 96 MiB in all, each read whole by the generator's parse check.
mkdir -p "$WORK/near/apps"
printf '%s\n' "$CM" > "$WORK/near/apps/ok.yaml"
for i in 1 2 3; do head -c $((32 * 1024 * 1024 - 1)) /dev/zero | tr '\0' '0' > "$WORK/near/apps/zeros-$i.yaml"; done
tar -C "$WORK/near" -cf - . | gzip -1 > "$WORK/near.tar.gz"
rm -rf "$WORK/near"

echo "bomb.tar.gz: $(stat -c %s "$WORK/bomb.tar.gz") bytes compressed, 2 GiB file inside"
echo "near.tar.gz: $(stat -c %s "$WORK/near.tar.gz") bytes compressed, 3 x 32 MiB files inside"

measure() {
  local name="$1" archive="$2"; shift 2
  local code=0
  /usr/bin/time -f '%M' -o "$WORK/rss" \
    "$BIN" --log-level warn render --artifact "$archive" --kustomization-file "$WORK/ks.yaml" "$@" \
    > /dev/null 2> "$WORK/err" || code=$?
  local rss_kb
  rss_kb="$(tail -n 1 "$WORK/rss")"
  printf '%-34s exit %s  peak RSS %6.1f MB  %s\n' "$name" "$code" "$(echo "$rss_kb / 1024" | bc -l)" \
    "$(grep -m1 '^error' "$WORK/err" | cut -c1-160)"
}

measure "bomb, default caps" "$WORK/bomb.tar.gz"
measure "bomb, --max-unpacked-size 4Gi" "$WORK/bomb.tar.gz" --max-unpacked-size 4Gi
measure "near-cap files, default caps" "$WORK/near.tar.gz"
if [ "${UNCAPPED:-0}" = 1 ]; then
  # The behaviour before the per-file cap (needs > 2 GB of free memory and disk).
  measure "bomb, 4Gi unpacked and per-file" "$WORK/bomb.tar.gz" --max-unpacked-size 4Gi --max-file-size 4Gi
fi
