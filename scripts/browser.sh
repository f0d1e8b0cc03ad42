#!/usr/bin/env bash
# Headless Chromium and its WebDriver for the page tests of `dsh view` (Debian's `chromium` and
# `chromium-driver` packages, installed when missing, like scripts/postgres.sh installs
# PostgreSQL).
#
#   scripts/browser.sh     install when missing, then print what the tests need, one a line:
#                            chromium=/usr/bin/chromium
#                            chromedriver=/usr/bin/chromedriver
#                            no_sandbox=1        (when running as root: Chromium then needs
#                                                 --no-sandbox)
#
# The tests run it themselves (crates/view/tests/common), start chromedriver on a loopback port
# and drive the page through WebDriver. They fail, never skip, when no browser can be had.
set -euo pipefail

die() { echo "browser.sh: $*" >&2; exit 1; }

find_bin() {
  local name
  for name in "$@"; do
    if command -v "$name" >/dev/null 2>&1; then command -v "$name"; return 0; fi
  done
  return 1
}

chromium=$(find_bin chromium chromium-browser || true)
driver=$(find_bin chromedriver chromium-driver || true)
if [ -z "$chromium" ] || [ -z "$driver" ]; then
  [ "$(id -u)" = 0 ] || die "Chromium is not installed and installing it needs root (apt-get install chromium chromium-driver)"
  echo "browser.sh: installing Debian's chromium and chromium-driver packages" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q chromium chromium-driver >/dev/null 2>&1 \
    || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium chromium-driver >/dev/null; } \
    || die "apt-get install chromium chromium-driver failed"
  chromium=$(find_bin chromium chromium-browser) || die "no chromium after installing it"
  driver=$(find_bin chromedriver chromium-driver) || die "no chromedriver after installing it"
fi
echo "chromium=$chromium"
echo "chromedriver=$driver"
if [ "$(id -u)" = 0 ]; then echo "no_sandbox=1"; fi
