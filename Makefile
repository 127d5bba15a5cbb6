# The two commands a data engineer needs: `make demo` and `make test`. Both set up what is missing first.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP_STAMP := $(VENV)/.installed

.PHONY: setup demo test unit bench stack-up stack-down clean

$(PIP_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

# Instant when the jars are already resolved for the checked-in poms.
setup: $(PIP_STAMP)
	$(PY) -m pipeline setup

demo: setup
	$(PY) -m pipeline stack up
	$(PY) -m pipeline demo

test: setup
	$(PY) -m pytest $(PYTEST_ARGS)

unit: $(PIP_STAMP)
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

bench: setup
	$(PY) bench/stack.py

stack-up: setup
	$(PY) -m pipeline stack up

stack-down:
	$(PY) -m pipeline stack down

clean: stack-down
	rm -rf .pipeline $(VENV)
