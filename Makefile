# Two commands for a fresh machine (see README): `make demo` and `make test`. Both set up what is missing first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.replayforge-installed
OUT ?= out

.PHONY: setup demo test lint clean-out

setup: $(STAMP) node_modules/pokemon-showdown/package.json

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch first, pinned, so pip takes the local CPU wheel instead of resolving a CUDA build
	$(PY) -m pip install --quiet "torch==2.13.0"
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

node_modules/pokemon-showdown/package.json: package.json package-lock.json
	npm ci --omit=optional --no-audit --no-fund --loglevel=error
	touch $@

demo: setup
	$(PY) pipelines/parse_replays.py --source generated --out $(OUT)

test: setup
	$(PY) -m ruff check .
	$(PY) -m pytest -q tests

lint: setup
	$(PY) -m ruff check .
