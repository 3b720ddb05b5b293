#!/usr/bin/env bash
# Stop the neo4j-local launcher started by start.sh (SIGTERM, then SIGKILL after 60 s).
# Env: NEO4J_LOCAL_DIR (<script dir>/.state), NEO4J_LOCAL_STOP_TIMEOUT (60 s).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TIMEOUT="${NEO4J_LOCAL_STOP_TIMEOUT:-60}"
# shellcheck source=common.sh
source "$HERE/common.sh"

pid=""
[[ -f "$PID_FILE" ]] && pid="$(cat "$PID_FILE")"

if ! is_ours "$pid"; then
  rm -f "$PID_FILE" "$READY_FILE"
  echo "neo4j-local not running"
  exit 0
fi

kill -TERM "$pid" 2>/dev/null || true
start=$SECONDS
while alive "$pid"; do
  if (( SECONDS - start >= TIMEOUT )); then
    echo "neo4j-local: pid $pid still alive after ${TIMEOUT}s, sending SIGKILL" >&2
    kill -KILL "$pid" 2>/dev/null || true
    for _ in $(seq 1 20); do alive "$pid" || break; sleep 0.5; done
    break
  fi
  sleep 0.2
done

rm -f "$PID_FILE" "$READY_FILE"
echo "neo4j-local stopped (pid $pid)"
