# Shared by start.sh and stop.sh: state paths; the process checks come from ../lib/service.sh.
# Source it; do not run it.
SERVICE=serve-local
SERVICE_MATCH=' serve --host 127.0.0.1 --port '
STATE_DIR="${SERVE_LOCAL_DIR:-$HERE/.state}"
if [[ -d "$STATE_DIR" ]]; then STATE_DIR="$(cd "$STATE_DIR" && pwd)"; fi
PID_FILE="$STATE_DIR/serve.pid"
READY_FILE="$STATE_DIR/READY"
LOG_FILE="$STATE_DIR/serve-local.log"
# shellcheck source=../lib/service.sh
source "$HERE/../lib/service.sh"
