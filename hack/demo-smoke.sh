#!/usr/bin/env bash
# Smoke test of the whole product (CI): the demo's walk with --no-wait, on loopback only.
# Exits 0 only when every step was observed (see docs/demo.md). Prints the walk's wall time.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --locked --release --example demo
start=$(date +%s.%N)
status=0
./target/release/examples/demo --no-wait "$@" || status=$?
end=$(date +%s.%N)
awk -v s="$start" -v e="$end" -v c="$status" 'BEGIN { printf "demo walk: %.1f s (exit %d)\n", e - s, c }' >&2
exit "$status"
