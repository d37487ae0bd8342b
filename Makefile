# Two commands do all the set-up on a fresh machine:
#   make demo   creates .venv, installs sentinel, runs the main example
#   make test   creates .venv, installs the dev and spark extras, runs lint, types and tests,
#               on the compiled build, then the tests again on the pure-Python build
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# The pure-Python build's environment, installed (editable, SENTINEL_PURE=1) from a
# copy of the sources without the compiled modules that .venv's install built in
# place beside them (Python would load those before the .py files).
VENV_PURE := .venv-pure
PURE_TREE := build/pure
# The compiled build: hatch_build.py compiles sentinel/_build.py's HOT_PATH with
# mypyc. Installing again after changing one of those modules is what recompiles.
HOT_PATH := ${shell sed -n '/^HOT_PATH/,/)/p' sentinel/_build.py | grep -o '"sentinel[a-z_.]*"' | tr -d '"' | tr . / | sed 's/$$/.py/'}
BUILD_INPUTS := pyproject.toml hatch_build.py sentinel/_build.py $(HOT_PATH)
# make test's install fails rather than give a pure build it would take for a
# compiled one; `make test SENTINEL_PURE=1` tests the pure build in .venv too.
SENTINEL_COMPILE_REQUIRED ?= 1
EXPECT_BUILD := $(if $(filter-out 0 false no,$(SENTINEL_PURE)),pure,compiled)

.PHONY: demo test lint typecheck pytest pytest-pure pure-tree explore bench clean

$(BIN)/python:
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "sentinel needs Python 3.11 or newer"'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.installed-demo: $(BUILD_INPUTS) | $(BIN)/python
	@echo "Installing sqlalchemy-sentinel with PySpark into $(VENV): a minute or two the first time ..."
	$(BIN)/python -m pip install -q -e '.[spark]'
	touch $@

$(VENV)/.installed-dev: $(BUILD_INPUTS) | $(BIN)/python
	@echo "Installing sqlalchemy-sentinel with its test tools and PySpark into $(VENV), compiling its hot path: a few minutes ..."
	SENTINEL_COMPILE_REQUIRED=$(SENTINEL_COMPILE_REQUIRED) $(BIN)/python -m pip install -q -e '.[dev,spark]'
	$(BIN)/python -m sentinel._build
	touch $@ $(VENV)/.installed-demo

$(VENV_PURE)/bin/python:
	$(PYTHON) -m venv $(VENV_PURE)
	$(VENV_PURE)/bin/python -m pip install -q --upgrade pip

$(VENV_PURE)/.installed-dev: pyproject.toml | $(VENV_PURE)/bin/python
	@echo "Installing the pure-Python build with its test tools and PySpark into $(VENV_PURE) ..."
	$(MAKE) pure-tree
	SENTINEL_PURE=1 $(VENV_PURE)/bin/python -m pip install -q -e '$(PURE_TREE)[dev,spark]'
	touch $@

# The sources as git sees them (tracked and new files, not ignored ones: no
# compiled modules), copied afresh, then installed again (quick: nothing to compile).
pure-tree:
	rm -rf $(PURE_TREE) && mkdir -p $(PURE_TREE)
	git ls-files -z -co --exclude-standard | tar --null -T - --ignore-failed-read -cf - | tar -xf - -C $(PURE_TREE)

demo: $(VENV)/.installed-demo
	$(BIN)/python -m examples.demo

test: $(VENV)/.installed-dev lint typecheck pytest pytest-pure

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(VENV)/.installed-dev
	$(BIN)/mypy

pytest: $(VENV)/.installed-dev
	SENTINEL_EXPECT_BUILD=$(EXPECT_BUILD) $(BIN)/pytest --hypothesis-profile=fixed

# The whole suite again on the pure-Python build (what installs where no C
# compiler is), run in its copy of the sources.
pytest-pure: $(VENV_PURE)/.installed-dev
	$(MAKE) pure-tree
	SENTINEL_PURE=1 $(VENV_PURE)/bin/python -m pip install -q --no-deps -e $(PURE_TREE)
	cd $(PURE_TREE) && SENTINEL_PURE=1 SENTINEL_EXPECT_BUILD=pure $(CURDIR)/$(VENV_PURE)/bin/python -m sentinel._build
	cd $(PURE_TREE) && SENTINEL_PURE=1 SENTINEL_EXPECT_BUILD=pure $(CURDIR)/$(VENV_PURE)/bin/pytest --hypothesis-profile=fixed

# New random examples for every property test, the long runs included (see
# DEVELOPERS.md): run it after changing the detector, Ode or the algebra.
explore: $(VENV)/.installed-dev
	SENTINEL_LONG_PROPERTIES=1 $(BIN)/pytest --hypothesis-profile=explore -m hypothesis -p no:cacheprovider

bench: $(VENV)/.installed-dev
	for b in detector wrapper orm logwrite temporal bitemporal ode replay bicepl global; do \
		$(BIN)/python bench/$$b.py --quick || exit 1; \
	done

clean:
	rm -rf $(VENV) $(VENV_PURE) build .pytest_cache .mypy_cache .ruff_cache .hypothesis
	rm -f sentinel/_build_record.json sentinel__mypyc*.so
	find sentinel -name '*.so' -delete
