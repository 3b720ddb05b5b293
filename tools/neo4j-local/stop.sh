#!/usr/bin/env bash
# Stop the neo4j-local launcher started by start.sh (SIGTERM, then SIGKILL after 60 s).
# Env: NEO4J_LOCAL_DIR (<script dir>/.state), NEO4J_LOCAL_STOP_TIMEOUT (60 s).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
STATE_DIR="${NEO4J_LOCAL_DIR:-$HERE/.state}"
TIMEOUT="${NEO4J_LOCAL_STOP_TIMEOUT:-60}"
PID_FILE="$STATE_DIR/neo4j.pid"
READY_FILE="$STATE_DIR/READY"

alive() { # pid exists and is not a zombie
  local pid="$1"
  [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null || return 1
  [[ "$(ps -o stat= -p "$pid" 2>/dev/null)" != Z* ]]
}

is_ours() { # alive and is our launcher (guards against pid reuse)
  local pid="$1"
  alive "$pid" || return 1
  if [[ -r "/proc/$pid/cmdline" ]]; then
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q 'local\.neo4j\.Launcher'
  else
    ps -p "$pid" -o args= 2>/dev/null | grep -q 'local\.neo4j\.Launcher'
  fi
}

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
