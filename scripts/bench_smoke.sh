#!/usr/bin/env bash
# CI smoke of every benchmark: tiny sizes, results in a temporary directory,
# checks only that each runs and writes valid JSON (never wall times).
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
PY=.venv/bin/python

run() {  # run NAME COMMAND...: the command must write $out/NAME.json
  local name=$1; shift
  echo "== smoke: $name"
  "$@"
  "$PY" -c 'import json,sys; json.load(open(sys.argv[1]))' "$out/$name.json"
}

run bench_engine "$PY" -m benchmarks.bench_engine --smoke --out "$out/bench_engine.json"
run bench_index "$PY" -m benchmarks.bench_index --smoke --out "$out/bench_index.json"
run analyzer_ablation "$PY" -m benchmarks.analyzer_ablation --smoke --out "$out/analyzer_ablation.json"
run bench_stash "$PY" -m benchmarks.bench_stash --smoke --out "$out/bench_stash.json"
run bench_grpc "$PY" -m benchmarks.bench_grpc --smoke --out "$out/bench_grpc.json"
run latency "$PY" -m benchmarks.latency --smoke --out "$out/latency.json"
run bench_memory "$PY" -m benchmarks.bench_memory --smoke --out "$out/bench_memory.json"
run quality "$PY" -m benchmarks.quality --smoke --out "$out/quality.json"
run bench_excerpts "$PY" -m benchmarks.bench_excerpts --smoke --out "$out/bench_excerpts.json"
run bench_cold "$PY" -m benchmarks.bench_cold --smoke --out "$out/bench_cold.json"
run append_floor "$PY" -m benchmarks.append_floor --smoke --out "$out/append_floor.json"
run bench_warm "$PY" -m benchmarks.bench_warm --sizes 100 --repeats 3 --out "$out/bench_warm.json"
run plan_digests "$PY" -m benchmarks.plan_digests --sizes 60 --out "$out/plan_digests.json"
run headroom "$PY" -m benchmarks.quality.headroom --smoke --out "$out/headroom.json"
run replay scripts/replay.sh --smoke --out "$out/replay.json"
run gateway "$PY" -m benchmarks.gateway --smoke --out "$out/gateway.json"
run gateway_load "$PY" -m benchmarks.gateway.load --smoke --out "$out/gateway_load.json"
run gateway_prepare "$PY" -m benchmarks.gateway.prepare --smoke --out "$out/gateway_prepare.json"
run hosts "$PY" -m benchmarks.hosts --smoke --out "$out/hosts.json"
echo "== smoke: bench_ts"
(cd ts-client && npm run --silent bench -- --smoke)
"$PY" -c 'import json,sys; json.load(open(sys.argv[1]))' benchmarks/results/smoke/bench_ts.json
echo "== smoke: bench_gemini_cli"
(cd ts-client && npm run --silent bench:gemini-cli -- --smoke)
"$PY" -c 'import json,sys; json.load(open(sys.argv[1]))' ts-client/bench/results/gemini_cli_smoke.json
echo "all benchmark smokes wrote valid JSON"
