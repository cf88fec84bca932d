#!/usr/bin/env bash
# The HTTP edge under abuse (issue 27, item 7), on loopback against the fake API server:
# `flux-converger serve` as a process, 200 slowloris sockets (a request head never finished,
# one byte every 500 ms) and 100 concurrent 3 MiB posts to /hook with a wrong signature, while
# /healthz is asked every 100 ms on a new connection. Bounded: those counts, a 5 s header-read
# timeout, every wait given up after 90 s.
#
#   hack/http-abuse.sh [SERVE_BINARY]
#       SERVE_BINARY  the flux-converger to measure (default: this tree's build), so an older
#                     build gives the "before" figures with the same load
#   env PROFILE (cargo profile of the load generator and default binary, default dev)
#
# Prints the serve process's RSS at start, its peak (VmHWM) and after, and the slowest
# /healthz answer under load (tests/it/http_edge.rs, the flood test, does the work).
set -euo pipefail
shopt -s inherit_errexit
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PROFILE="${PROFILE:-dev}"
if [ -n "${1:-}" ]; then
  export HTTP_EDGE_SERVE_BINARY="$(realpath "$1")"
fi
cargo test --quiet --profile "$PROFILE" --manifest-path "$ROOT/Cargo.toml" --test it \
  http_edge::a_hook_flood_and_slowloris_sockets_keep_the_process_small_and_healthy -- --nocapture 2>&1 \
  | grep -E "serve RSS|panicked|peak RSS|slowloris|test result" || true
