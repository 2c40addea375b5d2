# Two entry points: `make demo` and `make test`. Each sets itself up on a fresh machine.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck unit protocol-check protocol bench node-test clean

$(BIN)/python:
	$(PY) -m venv $(VENV)

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/compactd demo

lint: $(STAMP)
	$(BIN)/ruff check compactd tests clients/python
	$(BIN)/ruff format --check compactd

typecheck: $(STAMP)
	$(BIN)/mypy --strict compactd clients/python/compactd_client

protocol-check: $(STAMP)
	$(BIN)/python -m compactd.protocol_gen --check

protocol: $(STAMP)
	$(BIN)/python -m compactd.protocol_gen

unit: $(STAMP)
	$(BIN)/python -m pytest -q

node-test: $(STAMP)
	@if [ -d clients/vscode ]; then $(MAKE) -C clients/vscode test PYTHON=$(abspath $(BIN)/python); fi

test: lint typecheck protocol-check unit node-test

bench: $(STAMP)
	@for b in tests/bench/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV)
