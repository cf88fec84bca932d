#!/usr/bin/env bash
# serve's memory with a fleet (issue 36, item 2): N Kustomizations, each with its own
# GitRepository and the results ConfigMap a leader wrote for its converged revision (so nothing
# is due), on the fake API server (examples/fleet.rs says how the objects are shaped); a release
# `flux-converger serve` starts against it under the shipped RBAC, lists, becomes ready and
# idles. Prints the time to ready, serve's RSS and peak RSS (VmHWM) when ready and after IDLE
# seconds, and the requests of its start.
#
#   hack/fleet-memory.sh [N ...]          default: 1000 10000
#   env IDLE (seconds idle before the last reading, default 30),
#       SERVE (the serve binary to measure, default this tree's release build: give an older
#       build for the "before" figure), NO_BUILD=1 (use the binaries already built),
#       FLEET_ARGS (more flags for examples/fleet.rs, e.g. --as-admin for an older build)
set -euo pipefail
shopt -s inherit_errexit
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
if [ -z "${NO_BUILD:-}" ]; then
  cargo build --quiet --locked --release --manifest-path "$ROOT/Cargo.toml" \
    --bin flux-converger --example fleet
fi
SERVE="${SERVE:-$TARGET/release/flux-converger}"
SIZES=("$@")
[ "${#SIZES[@]}" -gt 0 ] || SIZES=(1000 10000)
for n in "${SIZES[@]}"; do
  "$TARGET/release/examples/fleet" memory --serve "$SERVE" ${FLEET_ARGS:-} --kustomizations "$n" \
    --idle "${IDLE:-30}"
done
