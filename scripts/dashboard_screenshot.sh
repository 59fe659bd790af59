#!/usr/bin/env bash
# Writes docs/dashboard.png: the dashboard test's page (a real gateway, an agent session
# through it, Debian's chromium), after a stash search and a restore.
set -euo pipefail
cd "$(dirname "$0")/.."
make --no-print-directory browser
CTXOPT_DASHBOARD_SCREENSHOT="$PWD/docs/dashboard.png" \
  .venv/bin/pytest -q tests/gateway/test_dashboard.py -k real_browser
echo "wrote docs/dashboard.png"
