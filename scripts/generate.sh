#!/usr/bin/env bash
# Generates Python and TypeScript code from proto/ (the one source of truth).
#   scripts/generate.sh          write into pyserver/ctxopt/v1 and ts-client/src/generated
#   scripts/generate.sh --check  fail when the committed generated code is stale
set -euo pipefail
cd "$(dirname "$0")/.."

PY=.venv/bin/python
TS_PLUGIN=ts-client/node_modules/.bin/protoc-gen-ts_proto

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mkdir -p "$out/py" "$out/ts"

"$PY" -m grpc_tools.protoc -I proto \
  --python_out="$out/py" --pyi_out="$out/py" --grpc_python_out="$out/py" \
  proto/ctxopt/v1/*.proto
touch "$out/py/ctxopt/v1/__init__.py"

"$PY" -m grpc_tools.protoc -I proto \
  --plugin=protoc-gen-ts_proto="$TS_PLUGIN" \
  --ts_proto_out="$out/ts" \
  --ts_proto_opt=outputServices=grpc-js,env=node,esModuleInterop=true,importSuffix=.js,forceLong=number,useOptionals=messages,useExactTypes=false \
  proto/ctxopt/v1/*.proto proto/grpc/health/v1/health.proto

py_dest=pyserver/ctxopt/v1
ts_dest=ts-client/src/generated
if [[ "${1:-}" == "--check" ]]; then
  # bytecode a local run leaves beside the modules is not generated code
  if ! diff -r -x __pycache__ "$out/py/ctxopt/v1" "$py_dest" || ! diff -r "$out/ts" "$ts_dest"; then
    echo "generated code is stale: run 'make generate' and commit the result" >&2
    exit 1
  fi
  echo "generated code is up to date"
else
  rm -rf "$py_dest" "$ts_dest"
  mkdir -p "$py_dest" "$ts_dest"
  cp -r "$out/py/ctxopt/v1/." "$py_dest/"
  cp -r "$out/ts/." "$ts_dest/"
  echo "generated $py_dest and $ts_dest"
fi
