# Two commands do all the set-up on a fresh machine:
#   make demo   creates .venv, installs sentinel, runs the main example
#   make test   creates .venv, installs the dev and spark extras, runs lint, types
#               and the whole suite (in parallel: pytest-xdist, one worker per core)
# `make dev` installs what `make test` installs without running anything: after it,
# `.venv/bin/pytest tests/detector` runs one directory.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# pytest-xdist workers; each has its own databases, schemas and SparkSession.
# One per core: one more on 2 cores was measured slower (suite 16 min 17 s
# against 15 min 10 s, 2026-11-29).
WORKERS ?= auto

.PHONY: demo dev test lint typecheck pytest explore bench clean

$(BIN)/python:
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "sentinel needs Python 3.11 or newer"'
	@# a venv half made (ensurepip missing: Debian's python3-venv) must not
	@# stand for a made one at the next run
	$(PYTHON) -m venv $(VENV) || { rm -rf $(VENV); exit 1; }
	$(BIN)/python -m pip install -q --upgrade pip || { rm -rf $(VENV); exit 1; }

$(VENV)/.installed-demo: pyproject.toml | $(BIN)/python
	@echo "Installing sqlalchemy-sentinel with PySpark into $(VENV): a minute or two the first time ..."
	$(BIN)/python -m pip install -q -e '.[spark]'
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	@echo "Installing sqlalchemy-sentinel with its test tools and PySpark into $(VENV) ..."
	$(BIN)/python -m pip install -q -e '.[dev,spark]'
	touch $@ $(VENV)/.installed-demo

demo: $(VENV)/.installed-demo
	$(BIN)/python -m examples.demo

dev: $(VENV)/.installed-dev

test: $(VENV)/.installed-dev lint typecheck pytest

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache --no-logo  # the layers as contracts: pyproject's [tool.importlinter]

typecheck: $(VENV)/.installed-dev
	$(BIN)/mypy

# The tests' files (SQLite databases above all) go to a RAM disk when the machine
# has one with room to spare: on a virtual disk SQLite's fsyncs were a third of
# an SQLite test's time. TEST_TMPDIR=/some/dir chooses another place.
TEST_TMPDIR ?= $(shell d=/dev/shm; [ -d $$d ] && [ -w $$d ] && \
	[ "$$(df -Pk $$d 2>/dev/null | awk 'NR==2 {print $$4}')" -ge 4000000 ] 2>/dev/null && echo $$d)

pytest: $(VENV)/.installed-dev
	$(if $(TEST_TMPDIR),TMPDIR=$(TEST_TMPDIR) )$(BIN)/pytest -n $(WORKERS) --dist worksteal

# New random examples for every property test, the long runs included (see
# DEVELOPERS.md): run it after changing the detector, Ode or the algebra.
explore: $(VENV)/.installed-dev
	SENTINEL_LONG_PROPERTIES=1 $(BIN)/pytest --hypothesis-profile=explore -m hypothesis -p no:cacheprovider

bench: $(VENV)/.installed-dev
	for b in detector wrapper orm logwrite temporal bitemporal ode replay bicepl global; do \
		$(BIN)/python bench/$$b.py --quick || exit 1; \
	done

clean:
	rm -rf $(VENV) build dist .pytest_cache .mypy_cache .ruff_cache .hypothesis .nox
