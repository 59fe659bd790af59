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

.PHONY: install run serve test lint generate check-generated test-py test-ts bench-smoke

$(PY_STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev,quality]'
	@touch $@

$(TS_STAMP): ts-client/package.json ts-client/package-lock.json
	cd ts-client && npm install --no-audit --no-fund --loglevel=error
	@touch $@

install: $(PY_STAMP) $(TS_STAMP)

generate: install
	scripts/generate.sh

check-generated: install
	scripts/generate.sh --check

lint: install
	ts-client/node_modules/.bin/buf lint
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	cd ts-client && npm run --silent format:check

test-py: install
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
