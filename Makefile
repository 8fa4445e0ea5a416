# Two commands: `make demo` and `make test` (`make test-fast`: without the marked slow tests;
# `make lint`: ruff and mypy).
# Each bootstraps .venv when missing.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast lint bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q 'torch==2.13.0+cpu'
	$(PY) -m pip install -q -e '.[test,ray,lint]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/aoizora demo

bench: $(STAMP)
	$(VENV)/bin/aoizora bench --quick --out bench-out

# ruff (style, imports, likely bugs) and mypy (types of src/aoizora), both configured in pyproject.toml
LINT_DIRS := src tests benchmarks tools experiments
lint: $(STAMP)
	$(VENV)/bin/ruff check $(LINT_DIRS)
	$(VENV)/bin/mypy

# Test files run in TEST_WORKERS processes, each file's tests in one of them (module fixtures once).
TEST_WORKERS ?= 2
test: $(STAMP)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile

# The suite without the tests marked (pyproject.toml) as compiling full models, running diffusers'
# reference, starting Ray, or running the CLI in a subprocess.
FAST_TESTS := not slow and not tpu_compile and not parity and not ray
test-fast: $(STAMP)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m "$(FAST_TESTS)"

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache
