#!/usr/bin/env bash
# Stop the embed-local server started by start.sh (SIGTERM, then SIGKILL after 20 s).
# Env: EMBED_LOCAL_DIR (<script dir>/.state), EMBED_LOCAL_STOP_TIMEOUT (20 s).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TIMEOUT="${EMBED_LOCAL_STOP_TIMEOUT:-20}"
# shellcheck source=common.sh
source "$HERE/common.sh"

pid=""
[[ -f "$PID_FILE" ]] && pid="$(cat "$PID_FILE")"

if ! is_ours "$pid"; then
  rm -f "$PID_FILE" "$READY_FILE"
  echo "embed-local not running"
  exit 0
fi

kill -TERM "$pid" 2>/dev/null || true
start=$SECONDS
while alive "$pid"; do
  if (( SECONDS - start >= TIMEOUT )); then
    echo "embed-local: pid $pid still alive after ${TIMEOUT}s, sending SIGKILL" >&2
    kill -KILL "$pid" 2>/dev/null || true
    for _ in $(seq 1 20); do alive "$pid" || break; sleep 0.5; done
    break
  fi
  sleep 0.2
done

rm -f "$PID_FILE" "$READY_FILE"
echo "embed-local stopped (pid $pid)"
