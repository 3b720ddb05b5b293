#!/usr/bin/env bash
# Start the query service (`rag serve`) on 127.0.0.1 in the background, and wait until
# GET /v1/health answers. The service reads its config (SERVE_LOCAL_CONFIG) and the environment
# this script runs in: NEO4J_URI, RAG_LEDGER_URL, RAG_EMBED_ENDPOINT and the variables the
# config's principals name for their key digests (key_sha256_env).
# Env: SERVE_LOCAL_PORT (8780), SERVE_LOCAL_DIR (<script dir>/.state),
#      SERVE_LOCAL_CONFIG (config/engine.yaml), SERVE_LOCAL_RAG (<repo>/.venv/bin/rag),
#      SERVE_LOCAL_START_TIMEOUT (90 s).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
PORT="${SERVE_LOCAL_PORT:-8780}"
CONFIG="${SERVE_LOCAL_CONFIG:-config/engine.yaml}"
RAG="${SERVE_LOCAL_RAG:-$REPO/.venv/bin/rag}"
TIMEOUT="${SERVE_LOCAL_START_TIMEOUT:-90}"
URL="http://127.0.0.1:$PORT"

mkdir -p "${SERVE_LOCAL_DIR:-$HERE/.state}"
# shellcheck source=common.sh
source "$HERE/common.sh"

healthy() { # GET /v1/health answers 200 within 2 s
  http_ok "$URL/v1/health" "$(dirname "$RAG")/python" -c "$PY_GET"
}

lock_state_dir
pid="$(current_pid)"

if is_ours "$pid"; then
  if [[ -f "$READY_FILE" ]] && [[ "$(cat "$READY_FILE")" != "$URL" ]]; then
    fail "already running on $(cat "$READY_FILE") (pid $pid), not $URL: stop it first (stop.sh)"
  fi
  if [[ -f "$READY_FILE" ]] && healthy; then
    echo "serve-local already running (pid $pid): $(cat "$READY_FILE")"
    exit 0
  fi
  echo "serve-local is starting (pid $pid), waiting for it"
else
  rm -f "$PID_FILE" "$READY_FILE"
  [[ -x "$RAG" ]] || fail "$RAG not found (run \`make setup\`, or set SERVE_LOCAL_RAG)"
  if healthy; then
    fail "port $PORT already answers /v1/health but the service is not ours (state dir $STATE_DIR): pick another SERVE_LOCAL_PORT"
  fi
  (cd "$REPO" && exec nohup "$RAG" --config "$CONFIG" serve --host 127.0.0.1 --port "$PORT" \
    >"$LOG_FILE" 2>&1 </dev/null 9>&-) &
  pid=$!
  echo "$pid" >"$PID_FILE"
fi

wait_ready "$pid" healthy "$TIMEOUT" 0.3 "$HERE/stop.sh"
echo "$URL" >"$READY_FILE"

echo "serve-local ready after ${WAITED}s (pid $pid): $URL"
