#!/usr/bin/env bash
# Start a throwaway PostgreSQL on 127.0.0.1 for Dagster instance storage in tests.
# Installs Debian's postgresql package if no server binaries are present.
# Env: PG_LOCAL_PORT (default 55432), PG_LOCAL_DIR (default <this dir>/.state).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
port="${PG_LOCAL_PORT:-55432}"
state="${PG_LOCAL_DIR:-$here/.state}"
data="$state/data"

find_bin() {
  local d
  for d in /usr/lib/postgresql/*/bin; do
    [ -x "$d/pg_ctl" ] && { echo "$d"; return 0; }
  done
  command -v pg_ctl >/dev/null 2>&1 && { dirname "$(command -v pg_ctl)"; return 0; }
  return 1
}

bin="$(find_bin || true)"
if [ -z "$bin" ]; then
  echo "postgres-local: installing the postgresql server package" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq postgresql >/dev/null
  bin="$(find_bin)"
fi

# PostgreSQL refuses to run as root: run it as the 'postgres' system user when we are root.
as_pg() {
  if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

mkdir -p "$state"
if [ "$(id -u)" = 0 ]; then chown postgres "$state"; chmod 700 "$state"; fi

if [ ! -f "$data/PG_VERSION" ]; then
  as_pg "$bin/initdb" -D "$data" -U postgres --auth=trust -E UTF8 --no-locale >"$state/initdb.log" 2>&1 \
    || { cat "$state/initdb.log" >&2; exit 1; }
fi

if as_pg "$bin/pg_ctl" -D "$data" status >/dev/null 2>&1; then
  echo "postgres-local: already running on 127.0.0.1:$port"
else
  as_pg "$bin/pg_ctl" -D "$data" -l "$state/server.log" -w -t 60 \
    -o "-h 127.0.0.1 -p $port -k $data -c fsync=off -c synchronous_commit=off -c full_page_writes=off" start >/dev/null \
    || { tail -n 30 "$state/server.log" >&2; exit 1; }
fi

for db in dagster rag_ledger; do
  if ! as_pg "$bin/psql" -h 127.0.0.1 -p "$port" -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname='$db'" postgres | grep -q 1; then
    as_pg "$bin/createdb" -h 127.0.0.1 -p "$port" -U postgres "$db"
  fi
done
echo "postgresql+psycopg2://postgres@127.0.0.1:$port/dagster"
