#!/usr/bin/env bash
# A throwaway nginx (Debian's `nginx` package, installed when missing) in front of a fleet of
# `dsh serve --http --store` nodes, for dsh's tests and benchmarks; run as a non-root user, on
# loopback ports only.
#
#   scripts/nginx.sh start DIR CONF [--watch PID]   start nginx in DIR (created) with CONF: the
#                                                   body of an `http { }` block (upstreams and
#                                                   servers); print its master's pid
#   scripts/nginx.sh stop DIR                       stop it
#   scripts/nginx.sh install                        install nginx when missing (CI, before the
#                                                   tests start several at once)
#
# CONF's paths are its own business; logs and temporary files go to DIR. With `--watch PID`
# nginx stops by itself once process PID exits, so an nginx a test starts never outlives it.
# A missing nginx that cannot be installed fails (exit 1): the tests fail, they never skip.
set -euo pipefail

die() { echo "nginx.sh: $*" >&2; exit 1; }

nginx_bin() {
  local b
  b=$(command -v nginx 2>/dev/null || true)
  [ -n "$b" ] || { [ -x /usr/sbin/nginx ] && b=/usr/sbin/nginx; }
  if [ -z "$b" ]; then
    [ "$(id -u)" = 0 ] || die "nginx is not installed and installing it needs root (apt-get install nginx)"
    echo "nginx.sh: installing Debian's nginx package" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q nginx >/dev/null 2>&1 \
      || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q nginx >/dev/null; } \
      || die "apt-get install nginx failed"
    b=$(command -v nginx 2>/dev/null || echo /usr/sbin/nginx)
    [ -x "$b" ] || die "nginx was installed but is not found"
  fi
  echo "$b"
}

# Runs a command as nginx's user: ourselves, or `nobody` when we are root.
as_user() {
  if [ "$(id -u)" = 0 ]; then
    runuser -u nobody -- "$@"
  else
    "$@"
  fi
}

cmd=${1:-}; dir=${2:-}
if [ "$cmd" = install ]; then nginx_bin >/dev/null; exit 0; fi
[ -n "$cmd" ] && [ -n "$dir" ] || die "usage: $0 start DIR CONF [--watch PID] | stop DIR | install"

case "$cmd" in
  start)
    conf=${3:-}
    [ -n "$conf" ] && [ -f "$conf" ] || die "start needs CONF, a file with the body of an http block"
    watch=""
    if [ "${4:-}" = "--watch" ]; then watch=${5:-}; [ -n "$watch" ] || die "--watch needs a PID"; fi
    bin=$(nginx_bin)
    mkdir -p "$dir/tmp"
    dir=$(cd "$dir" && pwd)
    conf=$(cd "$(dirname "$conf")" && pwd)/$(basename "$conf")
    cat > "$dir/nginx.conf" <<EOF
daemon on;
worker_processes 2;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $dir/tmp/body;
    proxy_temp_path $dir/tmp/proxy;
    fastcgi_temp_path $dir/tmp/fastcgi;
    uwsgi_temp_path $dir/tmp/uwsgi;
    scgi_temp_path $dir/tmp/scgi;
    include $conf;
}
EOF
    if [ "$(id -u)" = 0 ]; then
      chown -R nobody "$dir"
      chmod 755 "$dir"
      # nobody must be able to reach the config file and the folders above it.
      chmod o+r "$conf"
    fi
    as_user "$bin" -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log" -t >"$dir/check.log" 2>&1 \
      || { cat "$dir/check.log" >&2; die "the configuration is refused"; }
    as_user "$bin" -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log" \
      || { cat "$dir/error.log" >&2 2>/dev/null || true; die "nginx did not start"; }
    for _ in $(seq 1 100); do [ -s "$dir/nginx.pid" ] && break; sleep 0.05; done
    [ -s "$dir/nginx.pid" ] || die "nginx wrote no pid file"
    if [ -n "$watch" ]; then
      nohup bash -c "while kill -0 $watch 2>/dev/null; do sleep 1; done; \"$0\" stop \"$dir\"" >/dev/null 2>&1 &
    fi
    cat "$dir/nginx.pid"
    ;;
  stop)
    [ -s "$dir/nginx.pid" ] || exit 0
    pid=$(cat "$dir/nginx.pid")
    kill -QUIT "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
    kill -KILL "$pid" 2>/dev/null || true
    ;;
  *) die "unknown command $cmd" ;;
esac
