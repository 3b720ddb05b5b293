#!/usr/bin/env bash
# Start embedded Neo4j Community (Bolt on 127.0.0.1, no auth) in the background.
# Env: NEO4J_LOCAL_PORT (7687), NEO4J_LOCAL_DIR (<script dir>/.state),
#      NEO4J_LOCAL_HEAP (1g), NEO4J_LOCAL_START_TIMEOUT (120 s), NEO4J_LOCAL_JAVA_OPTS (extra).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PORT="${NEO4J_LOCAL_PORT:-7687}"
HEAP="${NEO4J_LOCAL_HEAP:-1g}"
TIMEOUT="${NEO4J_LOCAL_START_TIMEOUT:-120}"
JAVA="${JAVA_HOME:+$JAVA_HOME/bin/}java"

mkdir -p "${NEO4J_LOCAL_DIR:-$HERE/.state}"
# shellcheck source=common.sh
source "$HERE/common.sh"

lock_state_dir
pid="$(current_pid)"

if is_ours "$pid"; then
  if [[ -f "$READY_FILE" ]]; then
    echo "neo4j-local already running (pid $pid): $(cat "$READY_FILE")"
    exit 0
  fi
  echo "neo4j-local is starting (pid $pid), waiting for it"
else
  rm -f "$PID_FILE" "$READY_FILE"

  # Build when the classes or copied jars are missing, or the sources changed.
  CLASS="$HERE/target/classes/local/neo4j/Launcher.class"
  if [[ ! -f "$CLASS" || ! -d "$HERE/target/lib" \
        || "$HERE/pom.xml" -nt "$CLASS" \
        || "$HERE/src/main/java/local/neo4j/Launcher.java" -nt "$CLASS" ]]; then
    command -v mvn >/dev/null || fail "mvn not found (needed for the first build)"
    echo "neo4j-local: building (mvn package)"
    if ! mvn -q -B -f "$HERE/pom.xml" package >"$STATE_DIR/build.log" 2>&1; then
      LOG_FILE="$STATE_DIR/build.log" fail "build failed"
    fi
  fi

  # --add-opens: lets the page cache and native IO use direct buffers / file
  # descriptors instead of slower fallbacks (same flags as the Neo4j distribution).
  # shellcheck disable=SC2086
  nohup "$JAVA" -Xms"$HEAP" -Xmx"$HEAP" \
    --add-opens=java.base/java.nio=ALL-UNNAMED \
    --add-opens=java.base/java.io=ALL-UNNAMED \
    --add-opens=java.base/sun.nio.ch=ALL-UNNAMED \
    -Dio.netty.tryReflectionSetAccessible=true \
    -Dlog4j2.disable.jmx=true \
    ${NEO4J_LOCAL_JAVA_OPTS:-} \
    -cp "$HERE/target/classes:$HERE/target/lib/*" local.neo4j.Launcher \
    --dir "$STATE_DIR" --host 127.0.0.1 --port "$PORT" --ready "$READY_FILE" \
    >"$LOG_FILE" 2>&1 </dev/null 9>&- &
  pid=$!
  echo "$pid" >"$PID_FILE"
fi

ready_file_written() { [[ -f "$READY_FILE" ]]; }
wait_ready "$pid" ready_file_written "$TIMEOUT" 0.5 "$HERE/stop.sh"

echo "neo4j-local ready after ${WAITED}s (pid $pid): $(cat "$READY_FILE")"
