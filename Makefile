# Two commands for a fresh machine (see README): `make demo` and `make test`. Both set up what is missing first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.replayforge-installed
OUT ?= out

.PHONY: setup setup-gpu demo test test-fast lint notebook

setup: $(STAMP) node_modules/pokemon-showdown/package.json

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch first, pinned, so pip takes the local CPU wheel instead of resolving a CUDA build
	$(PY) -m pip install --quiet "torch==2.13.0"
	# peppi-py-vladfi installs the module peppi_py that peppi-py (an older pin) also owns: never both in one venv
	$(PY) -m pip uninstall --quiet -y peppi-py
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

# A CUDA machine: torch's CUDA build from PyPI (not the pinned CPU wheel), then mamba-ssm compiled against it
# (pyproject.toml's gpu extra says why --no-build-isolation). `make -n setup-gpu` prints the commands.
setup-gpu:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install "torch>=2.9,<2.16" packaging ninja wheel setuptools
	$(PY) -m pip install -e ".[dev]"
	MAX_JOBS=$${MAX_JOBS:-4} $(PY) -m pip install --no-build-isolation -e ".[gpu]"
	$(PY) -c "from models.mamba2 import fused_unavailable_reason as r; import sys; print(r() or 'fused Mamba-2 scan: ok'); sys.exit(bool(r()))"

node_modules/pokemon-showdown/package.json: package.json package-lock.json
	npm ci --omit=optional --no-audit --no-fund --loglevel=error
	touch $@

demo: setup
	$(PY) pipelines/parse_replays.py --source generated --out $(OUT)

# The notebooks in a Jupyter server on 127.0.0.1 only, behind its token (open the printed URL; over SSH, forward the
# port). They open REPLAYFORGE_VERSION, else the newest version under out/. As root (containers, RunPod pods, where
# root is the only user) Jupyter refuses to start without --allow-root.
NOTEBOOK_PORT ?= 8888
notebook: $(VENV)/.notebook-installed
	$(VENV)/bin/jupyter notebook --ip=127.0.0.1 --port=$(NOTEBOOK_PORT) --no-browser \
		$(if $(filter 0,$(shell id -u)),--allow-root) notebooks/

$(VENV)/.notebook-installed: $(STAMP)
	$(PY) -m pip install --quiet -e ".[notebook]"
	touch $@

test: setup
	$(PY) -m ruff check .
	$(PY) -m pytest -q --durations=60 tests

# The loop while editing: the pure tests, without the four tiers tests/conftest.py marks (no Ray, no simulator, no
# Ray nodes of their own, none over ~20 s). `make test` (CI) runs everything.
FAST_TESTS := not ray and not simulator and not cluster and not slow
test-fast: $(STAMP)
	$(PY) -m pytest -q -m "$(FAST_TESTS)" tests

lint: setup
	$(PY) -m ruff check .
