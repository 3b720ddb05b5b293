#!/usr/bin/env bash
# Start the local LLM server (server.mjs: an OpenAI-compatible chat server over node-llama-cpp,
# with SmolLM2-135M-Instruct) on 127.0.0.1 in the background, and wait until /health answers.
# Run install.sh first (`make llm-install`).
# Env: LLM_LOCAL_PORT (8767), LLM_LOCAL_DIR (<script dir>/.state), LLM_LOCAL_RUNTIME (<script dir>/.runtime),
#      LLM_LOCAL_MODEL (the GGUF of the installed wheel), LLM_LOCAL_THREADS (1), LLM_LOCAL_CTX_SIZE (4096),
#      LLM_LOCAL_START_TIMEOUT (60 s).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PORT="${LLM_LOCAL_PORT:-8767}"
# One thread: on 2 shared cores a second thread made generation 10-20x slower (it waits on the
# core other work holds); set LLM_LOCAL_THREADS on a machine with cores to spare.
THREADS="${LLM_LOCAL_THREADS:-1}"
CTX_SIZE="${LLM_LOCAL_CTX_SIZE:-4096}"
TIMEOUT="${LLM_LOCAL_START_TIMEOUT:-60}"
URL="http://127.0.0.1:$PORT"

mkdir -p "${LLM_LOCAL_DIR:-$HERE/.state}"
# shellcheck source=common.sh
source "$HERE/common.sh"
MODEL="${LLM_LOCAL_MODEL:-$MODEL_FILE}"

healthy() { # GET /health answers 200 within 2 s
  http_ok "$URL/health" node -e \
    'fetch(process.argv[1], {signal: AbortSignal.timeout(2000)}).then(r => process.exit(r.ok ? 0 : 1), () => process.exit(1))'
}

lock_state_dir
pid="$(current_pid)"

if is_ours "$pid"; then
  if [[ -f "$READY_FILE" ]] && healthy; then
    echo "llm-local already running (pid $pid): $(cat "$READY_FILE")"
    exit 0
  fi
  echo "llm-local is starting (pid $pid), waiting for it"
else
  rm -f "$PID_FILE" "$READY_FILE"
  [[ -f "$INSTALLED_FILE" ]] || fail "no runtime in $RUNTIME_DIR (run \`make llm-install\` or tools/llm-local/install.sh)"
  [[ -f "$MODEL" ]] || fail "model $MODEL not found (run tools/llm-local/install.sh, or set LLM_LOCAL_MODEL)"
  if healthy; then
    fail "port $PORT already answers /health but the server is not ours (state dir $STATE_DIR): pick another LLM_LOCAL_PORT"
  fi
  # the server runs from the runtime dir so that it finds node_modules there
  cp "$HERE/server.mjs" "$RUNTIME_DIR/llm-local-server.mjs"
  nohup node "$RUNTIME_DIR/llm-local-server.mjs" --model "$MODEL" --host 127.0.0.1 --port "$PORT" \
    --threads "$THREADS" --ctx-size "$CTX_SIZE" >"$LOG_FILE" 2>&1 </dev/null 9>&- &
  pid=$!
  echo "$pid" >"$PID_FILE"
fi

wait_ready "$pid" healthy "$TIMEOUT" 0.3 "$HERE/stop.sh"
echo "$URL/v1" >"$READY_FILE"

echo "llm-local ready after ${WAITED}s (pid $pid, $THREADS thread(s)): $(cat "$READY_FILE")"
