#!/usr/bin/env bash
# Replays the calls a real kube-apiserver answered (tests/fixtures/conformance/real-v1.32.6.json,
# or real-v1.36.2.json with MINOR=36) against the in-repo fake API server, started as that
# version (`--minor`), and prints the step-by-step table (same / CODE / BODY) with every
# difference, then the counts.
#
#   hack/conformance.sh                # debug build of the fake, as v1.32.6
#   MINOR=36 hack/conformance.sh       # as v1.36.2, against its recording
#   PROFILE=release hack/conformance.sh
#   hack/conformance.sh --full         # extra arguments go to replay.py
#   hack/conformance.sh --check        # CI: fail unless the steps that differ are exactly the
#                                      # ones tests/fixtures/conformance/known-differences.txt
#                                      # lists for this version (docs/fake-apiserver.md says why)
#
# Needs python3 with `requests` and `PyYAML`. Writes target/conformance/{real,fake}.json.
set -euo pipefail
cd "$(dirname "$0")/.."

profile="${PROFILE:-debug}"
minor="${MINOR:-32}"
check=false
args=()
for a in "$@"; do
    if [ "$a" = --check ]; then check=true; else args+=("$a"); fi
done
case "$minor" in
32) recorded=tests/fixtures/conformance/real-v1.32.6.json ;;
36) recorded=tests/fixtures/conformance/real-v1.36.2.json ;;
*) echo "MINOR=$minor: recordings exist for 32 and 36" >&2; exit 2 ;;
esac
flags=()
[ "$profile" = release ] && flags+=(--release)
cargo build --quiet "${flags[@]}" --example fake-apiserver

out=target/conformance/v1.$minor
mkdir -p "$out"
kubeconfig="$out/fake.kubeconfig"
rm -f "$kubeconfig"
"${CARGO_TARGET_DIR:-target}/$profile/examples/fake-apiserver" --listen 127.0.0.1:0 --kubeconfig-out "$kubeconfig" \
    --controllers --minor "$minor" 2>"$out/fake.log" &
fake_pid=$!
trap 'kill "$fake_pid" 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do
    [ -s "$kubeconfig" ] && break
    kill -0 "$fake_pid" 2>/dev/null || { cat "$out/fake.log" >&2; exit 1; }
    sleep 0.1
done
[ -s "$kubeconfig" ] || { echo "the fake API server did not start" >&2; exit 1; }

python3 tests/fixtures/conformance/replay.py \
    --recorded "$recorded" \
    --fake "$kubeconfig" --out "$out" ${args[@]+"${args[@]}"} >"$out/report.txt"
$check || cat "$out/report.txt"

echo
echo "v1.$minor summary (of $(grep -cE '  (same|CODE|BODY|MISSING)$' "$out/report.txt") steps):"
grep -oE '  (same|CODE|BODY|MISSING)$' "$out/report.txt" | sort | uniq -c

if $check; then
    known=tests/fixtures/conformance/known-differences.txt
    grep -E '  (CODE|BODY|MISSING)$' "$out/report.txt" | awk -v v="v1.$minor" '{print v, $1, $NF}' \
        | sort >"$out/differences.txt"
    grep -E "^v1\.$minor " "$known" | awk '{print $1, $2, $3}' | sort >"$out/known.txt"
    if ! diff -u "$out/known.txt" "$out/differences.txt" >"$out/check.diff"; then
        echo
        echo "the fake answers v1.$minor's recorded calls otherwise than $known says" >&2
        echo "(- a known difference that is gone: delete its line; + a new one: make the fake agree):" >&2
        cat "$out/check.diff" >&2
        exit 1
    fi
    echo "v1.$minor: every difference is a known one ($(wc -l <"$out/known.txt") steps)"
fi
