#!/usr/bin/env bash
# Session replay (benchmarks/replay): every SWE-agent trajectory call by call,
# per method, with prompt caching. Options: --swe FILE, --limit N, --out PATH,
# --cache-price-ratio R, --smoke, --long K; `--help` lists them.
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python -m benchmarks.replay "$@"
