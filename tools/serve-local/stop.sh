#!/usr/bin/env bash
# Stop the serve-local service started by start.sh: SIGTERM (it stops accepting and finishes the
# requests in flight within serving.limits.shutdown_grace_seconds), then SIGKILL after 40 s.
# Env: SERVE_LOCAL_DIR (<script dir>/.state), SERVE_LOCAL_STOP_TIMEOUT (40 s).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=common.sh
source "$HERE/common.sh"
stop_service "${SERVE_LOCAL_STOP_TIMEOUT:-40}"
