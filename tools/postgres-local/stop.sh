#!/usr/bin/env bash
# Stop the local PostgreSQL started by start.sh (idempotent).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
data="${PG_LOCAL_DIR:-$here/.state}/data"
[ -f "$data/PG_VERSION" ] || exit 0
for d in /usr/lib/postgresql/*/bin; do [ -x "$d/pg_ctl" ] && bin="$d"; done
[ -n "${bin:-}" ] || bin="$(dirname "$(command -v pg_ctl)")"
if [ "$(id -u)" = 0 ]; then
  runuser -u postgres -- "$bin/pg_ctl" -D "$data" -m fast -w stop >/dev/null 2>&1 || true
else
  "$bin/pg_ctl" -D "$data" -m fast -w stop >/dev/null 2>&1 || true
fi
echo "postgres-local: stopped"
