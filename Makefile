# The two commands of the README. Each sets up its own virtualenv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench bench-e2e

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

## The main job: a real workflow end to end.
demo: $(STAMP)
	$(BIN)/python -m examples.main_job

## The whole test suite (unit, integration, end to end).
test: $(STAMP)
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy --strict flowforge

bench: $(STAMP)
	$(BIN)/python -m bench.claim_finish

## End to end with real processes: throughput, ready->claimed latency, a 20-task chain.
bench-e2e: $(STAMP)
	$(BIN)/python -m bench.end_to_end
