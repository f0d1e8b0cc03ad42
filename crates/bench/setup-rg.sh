#!/bin/sh
# Installs ripgrep (Debian's package) for the fs/grep_vs_rg benchmark, when `rg` is missing.
set -e
if command -v rg >/dev/null 2>&1; then
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq ripgrep
