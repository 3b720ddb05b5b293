#!/usr/bin/env bash
# Stop the neo4j-local launcher started by start.sh (SIGTERM, then SIGKILL after 60 s).
# Env: NEO4J_LOCAL_DIR (<script dir>/.state), NEO4J_LOCAL_STOP_TIMEOUT (60 s).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=common.sh
source "$HERE/common.sh"
stop_service "${NEO4J_LOCAL_STOP_TIMEOUT:-60}"
