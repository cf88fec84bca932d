#!/usr/bin/env bash
# Smoke test of the whole product (CI): the demo's walk with --no-wait, on loopback only.
# Walks both the suspend gate (apps) and the artifact gate (cache), then an Argo CD Application
# on Argo CD's stand-ins (argocd/db). Exits 0 only when every step
# was observed (see docs/demo.md). Prints the walk's wall time.
# DEMO_PROFILE=dev reuses the debug build `cargo test` already made (what .ci/run does: a
# release build of the whole dependency tree would double CI's time); the default is release,
# as the README runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
profile="${DEMO_PROFILE:-release}"
case "$profile" in
  release) dir=release; cargo build --locked --release --example demo ;;
  dev) dir=debug; cargo build --locked --example demo ;;
  *) echo "demo-smoke: DEMO_PROFILE is release or dev, not $profile" >&2; exit 2 ;;
esac
start=$(date +%s.%N)
status=0
"${CARGO_TARGET_DIR:-./target}/$dir/examples/demo" --no-wait "$@" || status=$?
end=$(date +%s.%N)
awk -v s="$start" -v e="$end" -v c="$status" 'BEGIN { printf "demo walk: %.1f s (exit %d)\n", e - s, c }' >&2
exit "$status"
