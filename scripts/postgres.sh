#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for dsh's tests and benchmarks (Debian's `postgresql` package,
# installed when missing; run as a non-root user, as the server requires).
#
#   scripts/postgres.sh start DIR [--watch PID]   start a cluster in DIR (created), print its URL
#   scripts/postgres.sh stop DIR                  stop it (the files stay in DIR)
#   scripts/postgres.sh crash DIR                 stop it as a crash does (`-m immediate`: no
#                                                 checkpoint, WAL not yet written is lost)
#   scripts/postgres.sh url DIR                   print the URL of a running cluster
#
# `start` prints one line, the connection URL (postgres://dsh@127.0.0.1:PORT/dsh), and also
# writes it to DIR/url. With `--watch PID` the cluster stops by itself once process PID exits:
# the tests use it so a cluster they start never outlives them. `.ci/run` starts one cluster for
# the whole run and exports DSH_TEST_POSTGRES_URL; tests started without it start their own.
set -euo pipefail

die() { echo "postgres.sh: $*" >&2; exit 1; }

bin_dir() {
  local d
  d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
  if [ -z "$d" ] || [ ! -x "$d/initdb" ]; then
    [ "$(id -u)" = 0 ] || die "PostgreSQL is not installed and installing it needs root (apt-get install postgresql)"
    echo "postgres.sh: installing Debian's postgresql package" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q postgresql >/dev/null 2>&1 \
      || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q postgresql >/dev/null; } \
      || die "apt-get install postgresql failed"
    d=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
  fi
  echo "$d"
}

# Runs a command as the cluster's owner: ourselves, or `postgres` when we are root.
as_owner() {
  if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

cmd=${1:-}; dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || die "usage: $0 start|stop|crash|url DIR [--watch PID]"

case "$cmd" in
  start)
    watch=""
    if [ "${3:-}" = "--watch" ]; then watch=${4:-}; [ -n "$watch" ] || die "--watch needs a PID"; fi
    bin=$(bin_dir)
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    [ "$(id -u)" = 0 ] && { id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres; chown postgres "$dir"; chmod 700 "$dir"; }
    if [ ! -f "$dir/data/PG_VERSION" ]; then
      as_owner "$bin/initdb" -D "$dir/data" -A trust -U dsh --no-instructions >"$dir/initdb.log" 2>&1 \
        || { cat "$dir/initdb.log" >&2; die "initdb failed"; }
    fi
    # A cluster started again (a test restarting the server under a session) keeps its port,
    # so the URL its clients hold stays good.
    port=""
    [ -f "$dir/port" ] && port=$(cat "$dir/port")
    [ -n "$port" ] || port=$(free_port)
    echo "$port" > "$dir/port"
    [ "$(id -u)" = 0 ] && chown postgres "$dir/port"
    as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
      -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c max_connections=200 -c shared_buffers=64MB" start >/dev/null \
      || { cat "$dir/server.log" >&2; die "the server did not start"; }
    as_owner "$bin/psql" -h 127.0.0.1 -p "$port" -U dsh -d postgres -qAtc "select 1 from pg_database where datname='dsh'" | grep -q 1 \
      || as_owner "$bin/createdb" -h 127.0.0.1 -p "$port" -U dsh dsh
    url="postgres://dsh@127.0.0.1:$port/dsh"
    echo "$url" > "$dir/url"
    if [ -n "$watch" ]; then
      # Stops the cluster once the watched process is gone, so a test's cluster dies with it.
      nohup bash -c "while kill -0 $watch 2>/dev/null; do sleep 1; done; \"$0\" stop \"$dir\"" >/dev/null 2>&1 &
    fi
    echo "$url"
    ;;
  stop)
    bin=$(bin_dir)
    [ -f "$dir/data/postmaster.pid" ] || exit 0
    as_owner "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
    ;;
  crash)
    bin=$(bin_dir)
    [ -f "$dir/data/postmaster.pid" ] || exit 0
    as_owner "$bin/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
    ;;
  url)
    cat "$dir/url"
    ;;
  *) die "unknown command $cmd" ;;
esac
