#!/usr/bin/env bash
# Time from a webhook to the start of its run with many failing Kustomizations (issue 18,
# item 2), against the fake API server: a healthy Kustomization's new revision, and a failing
# one waiting on its backoff. The default 2 workers.
#
#   hack/queue-fairness.sh [FAILING] [SERVE_BINARY]
#       FAILING       Kustomizations whose artifact URL is a closed local port (default 1000)
#       SERVE_BINARY  the flux-converger to measure (default: this tree's debug build), so an
#                     older build gives the "before" figure with the same script
#   env SETTLE (seconds the failing ones run before the webhooks, default 20),
#       TIMEOUT (seconds a run may take to start before it counts as not started, default 120),
#       NO_BUILD=1 (use the binaries already built under $CARGO_TARGET_DIR or target/)
#
# Prints key=value lines (examples/queue-fairness.rs says what each is) and the service's log
# line count by message, to check that a resync and a retry each log one line.
set -euo pipefail
shopt -s inherit_errexit
FAILING="${1:-1000}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
WORK="$(mktemp -d)"
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

if [ -z "${NO_BUILD:-}" ]; then
  cargo build --quiet --manifest-path "$ROOT/Cargo.toml" --bin flux-converger \
    --example fake-apiserver --example queue-fairness
fi
SERVE="${2:-$TARGET/debug/flux-converger}"

"$TARGET/debug/examples/fake-apiserver" --listen 127.0.0.1:0 \
  --kubeconfig-out "$WORK/kubeconfig" --controllers 2>/dev/null &
PIDS+=($!)
for _ in $(seq 100); do [ -s "$WORK/kubeconfig" ] && break; sleep 0.1; done

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
LISTEN="127.0.0.1:$(port)"
"$SERVE" --kubeconfig "$WORK/kubeconfig" serve --listen "$LISTEN" \
  --metrics-addr "127.0.0.1:$(port)" --allow-unauthenticated-hooks --hook-min-interval 0s \
  --default-gate reconcile --handoff-timeout 2s --resync 30s --workers 2 \
  >"$WORK/serve.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 300); do curl -fsS "http://$LISTEN/readyz" >/dev/null 2>&1 && break; sleep 0.1; done

"$TARGET/debug/examples/queue-fairness" --kubeconfig "$WORK/kubeconfig" \
  --service "http://$LISTEN" --failing "$FAILING" \
  --settle "${SETTLE:-20}" --timeout "${TIMEOUT:-120}"

echo "serve log lines: $(wc -l <"$WORK/serve.log")"
# How many lines of each message (text format: `TIME LEVEL target: message field=value ...`).
sed -E 's/\x1b\[[0-9;]*m//g; s/^[^ ]+ +[A-Z]+ [^ ]+: //; s/ [a-z_.]+=.*$//' "$WORK/serve.log" \
  | sort | uniq -c | sort -rn | head -12
