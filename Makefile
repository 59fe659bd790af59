# Two commands do everything on a fresh machine (Python 3.11, Node 20, npm):
#   make run    start the server on its embedded store, build a demo prompt
#               through the TypeScript client, print the summary, stop
#   make test   every check and test, Python and TypeScript
# Both install what they need into .venv/ and ts-client/node_modules/: `make run`
# the runtime packages only, `make test` the development tools as well.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check
PY_RUN_STAMP := $(VENV)/.installed-runtime
PY_DEV_STAMP := $(VENV)/.installed
TS_RUN_STAMP := ts-client/node_modules/.installed-runtime
TS_DEV_STAMP := ts-client/node_modules/.installed
# `make run` transpiles with this TypeScript alone (type checks are `make test`'s)
TSC_TOOL := ts-client/.tools/node_modules/.bin/tsc
TS_SOURCES := $(shell find ts-client/src ts-client/test ts-client/bench -name '*.ts' 2>/dev/null) \
	ts-client/tsconfig.json
TS_BUILT := ts-client/dist/.built

# The real agent CLIs (Claude Code, Codex, Gemini CLI, OpenCode) the end-to-end tests drive,
# pinned by tests/agents/package-lock.json and installed there only, never globally; aider
# (a Python package that pins many packages of its own) in its own virtual environment
AGENTS_STAMP := tests/agents/node_modules/.installed
AIDER_VENV := tests/agents/.venv-aider
AIDER_STAMP := $(AIDER_VENV)/.installed

.PHONY: install install-agents install-runtime browser run serve test lint generate check-generated test-py test-ts bench-smoke dist

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)

$(PY_RUN_STAMP): pyproject.toml | $(VENV)/bin/python
	@echo "installing the server's runtime packages into $(VENV)/"
	$(PIP) install --progress-bar off -e .
	@touch $@

$(PY_DEV_STAMP): pyproject.toml | $(VENV)/bin/python
	@echo "installing the server and its development tools into $(VENV)/"
	$(PIP) install --progress-bar off -e '.[dev,quality,package]'
	@touch $@ $(PY_RUN_STAMP)

# npm prunes devDependencies under --omit=dev: after a full install there is nothing to do
$(TS_RUN_STAMP): ts-client/package.json ts-client/package-lock.json
	@if [ -f $(TS_DEV_STAMP) ] && [ $(TS_DEV_STAMP) -nt ts-client/package-lock.json ]; then \
		echo "ts-client/node_modules/: development install present"; \
	else \
		cd ts-client && npm install --omit=dev --no-audit --no-fund --loglevel=error; \
	fi
	@mkdir -p $(@D) && touch $@

$(TSC_TOOL): ts-client/package.json
	npm install --prefix ts-client/.tools --no-audit --no-fund --loglevel=error --no-save \
		typescript@$$(node -p 'require("./ts-client/package.json").devDependencies.typescript')
	@touch $@

$(TS_DEV_STAMP): ts-client/package.json ts-client/package-lock.json
	cd ts-client && npm install --no-audit --no-fund --loglevel=error
	@touch $@

$(TS_BUILT): $(TS_SOURCES) $(TS_RUN_STAMP) $(TSC_TOOL)
	cd ts-client && .tools/node_modules/.bin/tsc -p tsconfig.json --noCheck
	@touch $@

install-runtime: $(PY_RUN_STAMP) $(TS_RUN_STAMP)

install: $(PY_DEV_STAMP) $(TS_DEV_STAMP)

$(AGENTS_STAMP): tests/agents/package.json tests/agents/package-lock.json
	cd tests/agents && npm ci --no-audit --no-fund --loglevel=error
	@touch $@


$(AIDER_STAMP): tests/agents/aider-requirements.txt
	$(PYTHON) -m venv $(AIDER_VENV)
	$(AIDER_VENV)/bin/python -m pip install --disable-pip-version-check --progress-bar off \
		-r tests/agents/aider-requirements.txt
	@touch $@

install-agents: $(AGENTS_STAMP) $(AIDER_STAMP)

# The dashboard's test drives Debian's chromium through Playwright (no browser download);
# installed once, as the test machines (root, Debian) allow
browser:
	@command -v chromium >/dev/null 2>&1 || { \
		echo "installing Debian's chromium for the dashboard test"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	}

generate: install
	scripts/generate.sh

check-generated: install
	scripts/generate.sh --check

lint: install
	@! git grep -nE '^(<{7}|>{7})( |$$)' || { echo "merge conflict markers left in the files above"; exit 1; }
	ts-client/node_modules/.bin/buf lint
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	cd ts-client && npm run --silent format:check

test-py: install install-agents browser
	$(VENV)/bin/pytest

test-ts: install
	cd ts-client && npm test

bench-smoke: install
	scripts/bench_smoke.sh

test: check-generated lint test-py test-ts bench-smoke

serve: install-runtime
	$(VENV)/bin/ctxopt serve

run: install-runtime $(TS_BUILT)
	scripts/demo.sh

# The Python wheel and sdist and the npm tarball, into dist/
dist: install
	rm -rf dist && $(PY) -m build --no-isolation --outdir dist .
	$(VENV)/bin/twine check --strict dist/*
	cd ts-client && npm pack --pack-destination ../dist
