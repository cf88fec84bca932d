#!/usr/bin/env bash
# The artifact an attacker with write access to one tenant's repository could publish: one
# 2 GiB YAML file of zeros (a few MB compressed). Builds it (a sparse file: no 2 GiB on disk)
# and measures `render --artifact` on it, peak RSS by GNU time, under the default caps and
# under caps loosened one at a time; then the worst a file can do within the defaults (files
# of ASCII '0's just under the per-file cap, the unpacked cap filled).
#
#   hack/artifact-bomb.sh            (release build; PROFILE=dev for the debug one)
#
# Also the header bombs (issue 27.4): a GNU long name ('L') record declaring 3 GiB and a PAX
# ('x') record of 1 GiB, a few MB of gzip each, and a billion-laughs YAML file (issue 30.2).
#
# Needs GNU tar, gzip, python3, /usr/bin/time. Prints one line per case: exit code, peak RSS,
# the error. Each run is under `ulimit -v` (LIMIT_KB, default 4 GiB) so a regression fails
# instead of taking the machine's memory.
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

# The header bombs: a tar header written by hand, then its record streamed through gzip.
header_bomb() { # kind(L|x) declared-bytes out.tar.gz
  python3 - "$1" "$2" <<'PY' | gzip -9 > "$3"
import sys
kind, size = sys.argv[1], int(sys.argv[2])
out = sys.stdout.buffer
def header(name, typ, size):
    h = bytearray(512)
    h[0:len(name)] = name
    h[100:108] = b"0000600\0"; h[108:116] = b"0000000\0"; h[116:124] = b"0000000\0"
    h[124:136] = b"%011o\0" % size; h[136:148] = b"00000000000\0"
    h[156:157] = typ; h[257:265] = b"ustar  \0"
    h[148:156] = b"        "
    h[148:156] = b"%06o\0 " % sum(h)
    return bytes(h)
cm = b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ok}\n"
out.write(header(b".", b"5", 0)); out.write(header(b"apps", b"5", 0))
if kind == "L":
    out.write(header(b"././@LongLink", b"L", size)); fill, head = b"\0", b""
else:
    out.write(header(b"./PaxHeaders/x", b"x", size)); head = b"%d comment=" % size; fill = b"0"
out.write(head)
left = size - len(head) - (0 if kind == "L" else 1)
chunk = fill * (1 << 20)
while left > 0:
    n = min(left, len(chunk)); out.write(chunk[:n]); left -= n
if kind != "L": out.write(b"\n")
out.write(b"\0" * ((512 - size % 512) % 512))
out.write(header(b"apps/ok.yaml", b"0", len(cm))); out.write(cm); out.write(b"\0" * ((512 - len(cm) % 512) % 512))
out.write(b"\0" * 1024)
PY
}
header_bomb L $((3 << 30)) "$WORK/longname.tar.gz"
header_bomb x $((1 << 30)) "$WORK/pax.tar.gz"

# Billion laughs: nine levels of nine aliases in one file of a small artifact.
mkdir -p "$WORK/lol/apps"
{
  printf 'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: lol\ndata:\n'
  printf '  a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
  prev=a
  for l in b c d e f g h i; do printf '  %s: &%s [*%s,*%s,*%s,*%s,*%s,*%s,*%s,*%s,*%s]\n' $l $l $prev $prev $prev $prev $prev $prev $prev $prev $prev; prev=$l; done
} > "$WORK/lol/apps/lol.yaml"
tar -C "$WORK/lol" -czf "$WORK/lol.tar.gz" .

echo "longname.tar.gz: $(stat -c %s "$WORK/longname.tar.gz") bytes compressed, a 3 GiB GNU long name"
echo "pax.tar.gz: $(stat -c %s "$WORK/pax.tar.gz") bytes compressed, a 1 GiB PAX record"
echo "bomb.tar.gz: $(stat -c %s "$WORK/bomb.tar.gz") bytes compressed, 2 GiB file inside"
echo "near.tar.gz: $(stat -c %s "$WORK/near.tar.gz") bytes compressed, 3 x 32 MiB files inside"

measure() {
  local name="$1" archive="$2"; shift 2
  local code=0
  ( ulimit -v "${LIMIT_KB:-4194304}"; exec /usr/bin/time -f '%M' -o "$WORK/rss" \
    "$BIN" --log-level warn render --artifact "$archive" --kustomization-file "$WORK/ks.yaml" "$@" \
    > /dev/null 2> "$WORK/err" ) || code=$?
  local rss_kb
  rss_kb="$(tail -n 1 "$WORK/rss")"
  printf '%-34s exit %s  peak RSS %6.1f MB  %s\n' "$name" "$code" "$(echo "$rss_kb / 1024" | bc -l)" \
    "$(grep -m1 '^error' "$WORK/err" | cut -c1-160)"
}

measure "3 GiB GNU long name" "$WORK/longname.tar.gz"
measure "1 GiB PAX record" "$WORK/pax.tar.gz"
measure "billion laughs" "$WORK/lol.tar.gz"
measure "bomb, default caps" "$WORK/bomb.tar.gz"
measure "bomb, --max-unpacked-size 4Gi" "$WORK/bomb.tar.gz" --max-unpacked-size 4Gi
measure "near-cap files, default caps" "$WORK/near.tar.gz"
if [ "${UNCAPPED:-0}" = 1 ]; then
  # The behaviour before the per-file cap (needs > 2 GB of free memory and disk).
  measure "bomb, 4Gi unpacked and per-file" "$WORK/bomb.tar.gz" --max-unpacked-size 4Gi --max-file-size 4Gi
fi
