#!/usr/bin/env bash
# The official MCP SDKs that dsh serve's real-client tests drive, installed into a cache folder:
#
#   scripts/mcp-sdks.sh [DIR]    (default: target/mcp-sdks)
#
# DIR/py: a Python virtual environment with `mcp` (PyPI); DIR/node: `@modelcontextprotocol/sdk`
# (npm). Pinned versions; a second run with both in place does nothing. Prints two lines,
# `python=PATH` (the venv's interpreter) and `node_path=PATH` (for NODE_PATH). Exits non-zero,
# naming what failed, when either cannot be installed: the tests then fail, they never skip.
set -euo pipefail

PY_MCP_VERSION=2.3.0
TS_SDK_VERSION=1.32.2

die() { echo "mcp-sdks.sh: $*" >&2; exit 1; }

# Debian packages, installed when missing and we are root (CI runs as root on a fresh image).
apt_install() {
  [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null || return 1
  echo "mcp-sdks.sh: installing Debian's $*" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q "$@" >/dev/null 2>&1 \
    || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q "$@" >/dev/null; }
}

root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$root/target/mcp-sdks}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

# One installer at a time (tests run in parallel).
exec 9>"$dir/.lock"
flock 9

py="$dir/py/bin/python"
if [ ! -f "$dir/py/.installed-$PY_MCP_VERSION" ]; then
  command -v python3 >/dev/null || apt_install python3 python3-venv || die "python3 is not installed"
  rm -rf "$dir/py"
  python3 -m venv "$dir/py" >&2 \
    || { rm -rf "$dir/py" && apt_install python3-venv && python3 -m venv "$dir/py" >&2; } \
    || die "python3 -m venv failed"
  "$py" -m pip install -q --disable-pip-version-check "mcp==$PY_MCP_VERSION" >&2 \
    || die "pip install mcp==$PY_MCP_VERSION failed"
  touch "$dir/py/.installed-$PY_MCP_VERSION"
fi

if [ ! -f "$dir/node/.installed-$TS_SDK_VERSION" ]; then
  command -v node >/dev/null || apt_install nodejs || die "node is not installed"
  command -v npm >/dev/null || apt_install npm || die "npm is not installed"
  rm -rf "$dir/node"
  mkdir -p "$dir/node"
  (cd "$dir/node" && echo '{"private": true}' > package.json \
    && npm install --silent --no-audit --no-fund "@modelcontextprotocol/sdk@$TS_SDK_VERSION" >&2) \
    || die "npm install @modelcontextprotocol/sdk@$TS_SDK_VERSION failed"
  touch "$dir/node/.installed-$TS_SDK_VERSION"
fi

echo "python=$py"
echo "node_path=$dir/node/node_modules"
