# Two commands do everything on a fresh machine (Python 3.11, Node 20, npm):
#   make run    start the server on its embedded store, build a demo prompt
#               through the TypeScript client, print the summary, stop
#   make test   every check and test, Python and TypeScript
# Both install what they need into .venv/ and ts-client/node_modules/.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PY_STAMP := $(VENV)/.installed
TS_STAMP := ts-client/node_modules/.installed
# The real agent CLIs (Claude Code, Codex, Gemini CLI) the end-to-end tests drive, pinned by
# tests/agents/package-lock.json and installed there only, never globally
AGENTS_STAMP := tests/agents/node_modules/.installed

.PHONY: install install-agents run serve test lint generate check-generated test-py test-ts bench-smoke

$(PY_STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev,quality]'
	@touch $@

$(TS_STAMP): ts-client/package.json ts-client/package-lock.json
	cd ts-client && npm install --no-audit --no-fund --loglevel=error
	@touch $@

$(AGENTS_STAMP): tests/agents/package.json tests/agents/package-lock.json
	cd tests/agents && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

install: $(PY_STAMP) $(TS_STAMP)

install-agents: $(AGENTS_STAMP)

generate: install
	scripts/generate.sh

check-generated: install
	scripts/generate.sh --check

lint: install
	ts-client/node_modules/.bin/buf lint
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

test-py: install install-agents
	$(VENV)/bin/pytest

test-ts: install
	cd ts-client && npm test

bench-smoke: install
	scripts/bench_smoke.sh

test: check-generated lint test-py test-ts bench-smoke

serve: install
	$(VENV)/bin/ctxopt serve

run: install
	scripts/demo.sh
