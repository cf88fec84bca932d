#!/usr/bin/env bash
# The API load of serve while sources fail (issue 36, item 3): N Kustomizations (`interval:
# 10m`, `retryInterval` RETRY_INTERVAL or, by default, none: Flux then retries at the interval)
# whose GitRepositories publish an artifact on a closed local port, so every run fails; a
# release `flux-converger serve` (2 workers, under the shipped RBAC) against the fake API
# server, whose request log counts what serve sent over WINDOW seconds from its readiness.
# Prints the requests per second, by verb and resource, the failed Kustomizations, their
# attempts and serve's WARN lines.
#
#   hack/failing-load.sh [N]              default: 1000
#   env WINDOW (seconds, default 300), RETRY_INTERVAL (e.g. 2m), SERVE (the serve binary,
#       default this tree's release build), NO_BUILD=1 (use the binaries already built),
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
"$TARGET/release/examples/fleet" failing-load --serve "$SERVE" ${FLEET_ARGS:-} \
  --kustomizations "${1:-1000}" --window "${WINDOW:-300}" \
  ${RETRY_INTERVAL:+--retry-interval "$RETRY_INTERVAL"}
