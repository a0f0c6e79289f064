# Two commands on a fresh machine: `make demo` and `make test`. Both set everything up first.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck bench clean setup

$(BIN)/python:
	$(PY) -m venv $(VENV) || python3 -m venv $(VENV)

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

# The main job on the embedded simulator, its trace checked, then the exhaustive exploration.
demo: $(STAMP)
	$(BIN)/omni-run examples/pipeline.toml --trace out/demo.trace.jsonl
	$(BIN)/omni-fsm check out/demo.trace.jsonl
	$(BIN)/omni-fsm explore --requests 2 --families all --out out
	$(BIN)/omni-fsm explore --out out

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/python -m pytest

bench: $(STAMP)
	$(BIN)/python bench/fsm_step.py
	$(BIN)/python bench/explore.py
	$(BIN)/python bench/orchestrator.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
