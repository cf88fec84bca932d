#!/usr/bin/env bash
# Replays the calls a real kube-apiserver v1.32.6 answered (tests/fixtures/conformance/
# real-v1.32.6.json) against the in-repo fake API server and prints the step-by-step table
# (same / CODE / BODY) with every difference, then the counts.
#
#   hack/conformance.sh                # debug build of the fake
#   PROFILE=release hack/conformance.sh
#   hack/conformance.sh --full         # extra arguments go to replay.py
#
# Needs python3 with `requests` and `PyYAML`. Writes target/conformance/{real,fake}.json.
set -euo pipefail
cd "$(dirname "$0")/.."

profile="${PROFILE:-debug}"
flags=()
[ "$profile" = release ] && flags+=(--release)
cargo build --quiet "${flags[@]}" --example fake-apiserver

out=target/conformance
mkdir -p "$out"
kubeconfig="$out/fake.kubeconfig"
rm -f "$kubeconfig"
"target/$profile/examples/fake-apiserver" --listen 127.0.0.1:0 --kubeconfig-out "$kubeconfig" \
    --controllers --minor 32 2>"$out/fake.log" &
fake_pid=$!
trap 'kill "$fake_pid" 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do
    [ -s "$kubeconfig" ] && break
    kill -0 "$fake_pid" 2>/dev/null || { cat "$out/fake.log" >&2; exit 1; }
    sleep 0.1
done
[ -s "$kubeconfig" ] || { echo "the fake API server did not start" >&2; exit 1; }

python3 tests/fixtures/conformance/replay.py \
    --recorded tests/fixtures/conformance/real-v1.32.6.json \
    --fake "$kubeconfig" --out "$out" "$@" | tee "$out/report.txt"

echo
echo "summary (of $(grep -cE '  (same|CODE|BODY|MISSING)$' "$out/report.txt") steps):"
grep -oE '  (same|CODE|BODY|MISSING)$' "$out/report.txt" | sort | uniq -c
