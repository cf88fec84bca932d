#!/usr/bin/env bash
# What a shard's start costs (issue 36, item 4): N Kustomizations and N GitRepositories in
# N/100 namespaces, the Kustomizations of SHARD namespaces labelled for one shard; a release
# `flux-converger serve --watch-label-selector sharding.fluxcd.io/key=one` under the shipped
# RBAC. Prints the requests of its start (until /readyz) by verb and resource (the source
# lists and watches, the access check's reviews), the time to ready and serve's memory.
#
#   hack/shard-start.sh [N]               default: 10000
#   env SHARD (namespaces of the shard, default 2), SERVE (the serve binary, default this
#       tree's release build), NO_BUILD=1 (use the binaries already built),
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
"$TARGET/release/examples/fleet" shard-start --serve "$SERVE" ${FLEET_ARGS:-} \
  --kustomizations "${1:-10000}" --shard "${SHARD:-2}"
