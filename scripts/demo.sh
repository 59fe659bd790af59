#!/usr/bin/env bash
# The README's run command (`make run`, after the installs and the TypeScript
# build): start the server on a fresh embedded store, build one prompt from a
# recorded ~40-turn Gemini CLI agent session through the TypeScript client,
# print the summary line, stop.
set -euo pipefail
cd "$(dirname "$0")/.."

HISTORY=ts-client/examples/agent-session.json
# The session holds ~70k tokens; a 80k window puts it past the 80% threshold.
CONTEXT_LIMIT=${CTXOPT_DEMO_CONTEXT_LIMIT:-80000}

data_dir=$(mktemp -d)
server_out=$(mktemp)
server_pid=""
cleanup() {
  if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid"
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$data_dir" "$server_out"
}
trap cleanup EXIT

# no load balancer watches this server: stop without the drain notice
CTXOPT_DRAIN_NOTICE_SECONDS=0 .venv/bin/ctxopt serve --addr 127.0.0.1:0 --data-dir "$data_dir" \
  >"$server_out" 2>&1 &
server_pid=$!

addr=""
for _ in $(seq 1 200); do
  addr=$(sed -n 's/^ctxopt listening on \([^ ]*\).*/\1/p' "$server_out" | head -n 1)
  [[ -n "$addr" ]] && break
  if ! kill -0 "$server_pid" 2>/dev/null; then
    echo "demo: the server exited before listening:" >&2
    cat "$server_out" >&2
    exit 1
  fi
  sleep 0.05
done
if [[ -z "$addr" ]]; then
  echo "demo: the server did not print 'ctxopt listening on HOST:PORT' within 10 s" >&2
  exit 1
fi
echo "server: ctxopt listening on $addr"
echo "history: $HISTORY ($(grep -c '"role"' "$HISTORY") turns), window $CONTEXT_LIMIT tokens"

GEMINI_CONTEXT_OPTIMIZATION=true node ts-client/dist/src/cli.js \
  --history "$HISTORY" --addr "$addr" --model gemini-2.5-pro --context-limit "$CONTEXT_LIMIT"
