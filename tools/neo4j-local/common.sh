# Shared by start.sh and stop.sh: state paths; the process checks come from ../lib/service.sh.
# Source it; do not run it.
SERVICE=neo4j-local
SERVICE_MATCH='local\.neo4j\.Launcher'
STATE_DIR="${NEO4J_LOCAL_DIR:-$HERE/.state}"
if [[ -d "$STATE_DIR" ]]; then STATE_DIR="$(cd "$STATE_DIR" && pwd)"; fi
PID_FILE="$STATE_DIR/neo4j.pid"
READY_FILE="$STATE_DIR/READY"
LOG_FILE="$STATE_DIR/neo4j-local.log"
# shellcheck source=../lib/service.sh
source "$HERE/../lib/service.sh"
