# Shared by the local service launchers (neo4j-local, embed-local, serve-local, llm-local): process
# checks, an HTTP health probe, the start lock, the readiness wait and the stop. Source it; do not run it. The sourcing script sets
# SERVICE (a name for messages), SERVICE_MATCH (a pattern of the process's command line),
# STATE_DIR, PID_FILE, READY_FILE and LOG_FILE first.

http_ok() { # http_ok URL FALLBACK...: GET URL answers 2xx within 2 s, by curl or else by FALLBACK URL
  local url="$1"
  shift
  if command -v curl >/dev/null; then
    curl -fsS -m 2 -o /dev/null "$url" 2>/dev/null
  else
    "$@" "$url" 2>/dev/null
  fi
}

PY_GET='import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)'
# the fallback probe for a launcher with a Python at hand: http_ok URL PYTHON -c "$PY_GET"

alive() { # pid exists and is not a zombie
  local pid="$1"
  [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null || return 1
  [[ "$(ps -o stat= -p "$pid" 2>/dev/null)" != Z* ]]
}

is_ours() { # alive and is our service (guards against pid reuse)
  local pid="$1"
  alive "$pid" || return 1
  if [[ -r "/proc/$pid/cmdline" ]]; then
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "$SERVICE_MATCH"
  else
    ps -p "$pid" -o args= 2>/dev/null | grep -q "$SERVICE_MATCH"
  fi
}

fail() { # print the reason and the log's tail, exit 1
  echo "$SERVICE: $*" >&2
  if [[ -f "$LOG_FILE" ]]; then
    echo "--- last lines of $LOG_FILE ---" >&2
    tail -n 40 "$LOG_FILE" >&2
  fi
  exit 1
}

lock_state_dir() { # serialize concurrent start.sh runs on the same state dir (fd 9)
  if command -v flock >/dev/null; then
    exec 9>"$STATE_DIR/.start.lock"
    flock 9
  fi
}

current_pid() { # the pid file's content, or nothing
  [[ -f "$PID_FILE" ]] && cat "$PID_FILE" || true
}

wait_ready() { # wait_ready PID CHECK TIMEOUT INTERVAL STOP_SCRIPT: poll CHECK until it succeeds
  local pid="$1" check="$2" timeout="$3" interval="$4" stop_script="$5" start=$SECONDS
  until "$check"; do
    if ! alive "$pid"; then
      rm -f "$PID_FILE"
      fail "process $pid exited before becoming ready"
    fi
    if (( SECONDS - start >= timeout )); then
      "$stop_script" >/dev/null 2>&1 || true
      fail "not ready after ${timeout}s (stopped it)"
    fi
    sleep "$interval"
  done
  WAITED=$(( SECONDS - start ))
}

stop_service() { # stop_service TIMEOUT: SIGTERM, then SIGKILL after TIMEOUT seconds
  local timeout="$1" pid start
  pid="$(current_pid)"
  if ! is_ours "$pid"; then
    rm -f "$PID_FILE" "$READY_FILE"
    echo "$SERVICE not running"
    return 0
  fi
  kill -TERM "$pid" 2>/dev/null || true
  start=$SECONDS
  while alive "$pid"; do
    if (( SECONDS - start >= timeout )); then
      echo "$SERVICE: pid $pid still alive after ${timeout}s, sending SIGKILL" >&2
      kill -KILL "$pid" 2>/dev/null || true
      for _ in $(seq 1 20); do alive "$pid" || break; sleep 0.5; done
      break
    fi
    sleep 0.2
  done
  rm -f "$PID_FILE" "$READY_FILE"
  echo "$SERVICE stopped (pid $pid)"
}
