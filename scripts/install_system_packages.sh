#!/usr/bin/env bash
# System packages the course needs beyond Python: bubblewrap, for the local sandbox of
# notebook 08 (it refuses to run commands unisolated without it). Installs with apt-get
# when run as root; otherwise, or when that fails (no network: `make install WHEELS=folder` in a
# room without Wi-Fi), says what to install and carries on.
set -euo pipefail
if command -v bwrap >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
    && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null; then
    exit 0
fi
echo "note: install bubblewrap (e.g. 'sudo apt-get install bubblewrap') for notebook 08's local sandbox" >&2
