#!/bin/sh
# Installs Debian's chromium when it is missing, for tests/it/dashboard_browser.rs (which fails
# under CI=true without a browser). Idempotent: does nothing when chromium is already there.
set -eu

if command -v chromium >/dev/null 2>&1; then
    chromium --version 2>/dev/null || true
    exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
    SUDO=
elif command -v sudo >/dev/null 2>&1; then
    SUDO=sudo
else
    echo "ci-chromium: chromium is missing and this user cannot install packages" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
chromium --version
