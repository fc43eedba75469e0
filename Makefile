# The two commands of the README. Each sets up its own virtualenv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint lock docs bench bench-e2e mutate bytecode

# The versions CI tested: every package pinned, with its hashes, in requirements.lock;
# then FlowForge itself, editable, without resolving anything again (docs/testing.md,
# "The lock file").
LOCK := requirements.lock

$(STAMP): pyproject.toml $(LOCK)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet --require-hashes -r $(LOCK)
	$(BIN)/pip install --quiet --no-deps -e .
	touch $(STAMP)

## requirements.lock again from pyproject.toml (after a dependency changes there), then
## the venv from it: the newest versions pyproject's ranges allow, for every platform.
lock: $(STAMP)
	$(BIN)/pip install --quiet uv
	$(BIN)/uv pip compile pyproject.toml --extra dev --generate-hashes --universal \
		--python-version 3.11 --quiet -o $(LOCK)
	$(BIN)/pip install --quiet --require-hashes -r $(LOCK)

# Compiled once here, not in every process: where PYTHONDONTWRITEBYTECODE is set (this
# machine and CI set it), an editable install compiles flowforge from source at each
# start, and every process pays for it (docs/performance.md, "Design choices that buy the
# speed"). Cheap when up to date.
bytecode: $(STAMP)
	$(BIN)/python -m compileall -q flowforge bench examples tests

## The main job: a real workflow end to end.
demo: bytecode
	$(BIN)/python -m examples.main_job

## The whole test suite (unit, integration, end to end): three at a time (most tests wait
## on servers and processes, so a third runner keeps two cores busy), then the tests that
## stop or restart a shared server, alone (docs/testing.md, "Layout").
test: bytecode
	$(BIN)/python -m pytest -m "not serial" -n 3 --dist worksteal
	$(BIN)/python -m pytest -m serial

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy --strict flowforge tests bench tools
	$(BIN)/lint-imports

## docs/machines.md and docs/workflow-file.md from the code (a test fails when either is stale).
docs: $(STAMP)
	$(BIN)/python -m tools.machine_tables
	$(BIN)/python -m tools.definition_reference

bench: bytecode
	$(BIN)/python -m bench.claim_finish

## End to end with real processes: throughput, ready->claimed latency, a 20-task chain.
## (It compiles flowforge itself before it starts them.)
bench-e2e: $(STAMP)
	$(BIN)/python -m bench.end_to_end

## Mutation testing of the guarantee modules ([tool.mutmut] in pyproject.toml). On demand,
## not in CI: CPU heavy (~15-20 min on 2 cores), so it runs niced. Survivors: docs/testing.md.
mutate: $(STAMP)
	nice -n 10 $(BIN)/mutmut run --max-children 2
	$(BIN)/mutmut results
