#!/usr/bin/env bash
# The agent frameworks whose MCP integrations the framework suites drive against dsh serve
# (crates/cli/tests/frameworks.rs), each in its own Python virtual environment (their pinned
# dependencies conflict with one another), installed into a cache folder:
#
#   scripts/frameworks.sh [DIR]    (default: target/frameworks)
#
# Prints one line per framework, `NAME=PATH` (the venv's interpreter): fastmcp, langchain,
# openai-agents, pydantic-ai. Pinned versions; a second run with all in place does nothing.
# Exits non-zero, naming what failed, when one cannot be installed: the suites then fail,
# they never skip.
set -euo pipefail

declare -A PINS=(
  [fastmcp]="fastmcp==4.1.6 mcp==2.3.0"
  [langchain]="langchain==1.5.0 langchain-core==1.8.3 langgraph==1.2.24 langchain-mcp-adapters==0.3.2 mcp==1.30.0"
  [openai-agents]="openai-agents==0.24.0 openai==3.60.0 mcp==2.3.0"
  [pydantic-ai]="pydantic-ai-slim[mcp]==2.68.0 fastmcp-slim==4.2.3 mcp==2.3.0"
)

die() { echo "frameworks.sh: $*" >&2; exit 1; }

apt_install() {
  [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null || return 1
  echo "frameworks.sh: installing Debian's $*" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q "$@" >/dev/null 2>&1 \
    || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q "$@" >/dev/null; }
}

root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$root/target/frameworks}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

# One installer at a time (test binaries run in parallel).
exec 9>"$dir/.lock"
flock 9

command -v python3 >/dev/null || apt_install python3 python3-venv || die "python3 is not installed"
for name in fastmcp langchain openai-agents pydantic-ai; do
  pins=${PINS[$name]}
  stamp="$dir/$name/.installed-$(echo "$pins" | md5sum | cut -c1-12)"
  if [ ! -f "$stamp" ]; then
    rm -rf "${dir:?}/$name"
    python3 -m venv "$dir/$name" >&2 \
      || { rm -rf "${dir:?}/$name" && apt_install python3-venv && python3 -m venv "$dir/$name" >&2; } \
      || die "python3 -m venv failed"
    # shellcheck disable=SC2086
    "$dir/$name/bin/python" -m pip install -q --disable-pip-version-check $pins >&2 \
      || die "pip install $pins failed"
    touch "$stamp"
  fi
  echo "$name=$dir/$name/bin/python"
done
