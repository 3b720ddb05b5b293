#!/usr/bin/env bash
# Stop the llm-local server started by start.sh (SIGTERM, then SIGKILL after 20 s).
# Env: LLM_LOCAL_DIR (<script dir>/.state), LLM_LOCAL_STOP_TIMEOUT (20 s).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=common.sh
source "$HERE/common.sh"
stop_service "${LLM_LOCAL_STOP_TIMEOUT:-20}"
