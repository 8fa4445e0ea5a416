# Two commands: `make demo` and `make test` (`make test-fast`: without the marked slow tests;
# `make lint`: ruff and mypy).
# Each bootstraps .venv when missing.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
# One stamp per set of extras: the demo needs the package alone, the tests add torch, diffusers and
# Ray (the `test` and `ray` extras), the linters their own. Every version is pinned in pyproject.toml
# and served by PyPI; where the host's pip offers a local CPU build of the pinned torch, pip takes it.
BASE := $(VENV)/.installed-base
TESTS := $(VENV)/.installed-test
LINT := $(VENV)/.installed-lint

.PHONY: demo test test-fast test-seed lint bench clean

$(BASE): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e .
	touch $(BASE)

$(TESTS): $(BASE)
	$(PY) -m pip install -q -e '.[test,ray]'
	touch $(TESTS)

$(LINT): $(BASE)
	$(PY) -m pip install -q -e '.[lint]'
	touch $(LINT)

demo: $(BASE)
	$(VENV)/bin/aoizora demo

bench: $(BASE)
	$(VENV)/bin/aoizora bench --quick --out bench-out

# ruff (style, imports, likely bugs) and mypy (types of src/aoizora), both configured in pyproject.toml
LINT_DIRS := src tests benchmarks tools experiments
lint: $(LINT)
	$(VENV)/bin/ruff check $(LINT_DIRS)
	$(VENV)/bin/mypy

# Test files run in TEST_WORKERS processes, each file's tests in one of them (module fixtures once),
# handed out in the order tests/conftest.py sets (files with more long tests first) rather than
# pytest-xdist's own (files with more tests first).
TEST_WORKERS ?= 2
test: $(TESTS)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

# The suite without the tests marked (pyproject.toml) as compiling full models, running diffusers'
# reference, starting Ray, or running the CLI in a subprocess.
FAST_TESTS := not slow and not tpu_compile and not parity and not ray
test-fast: $(TESTS)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder -m "$(FAST_TESTS)"

# The suite from an empty compile cache, keeping what it compiled as the seed later sessions start
# from (tests/compile_seed.py): run after a change to what the tests compile, commit the seed.
test-seed: $(TESTS)
	AOIZORA_TEST_RECORD_SEED=1 $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache
