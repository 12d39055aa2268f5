# The two commands of the README: `make run` and `make test`
# (`make test-postgres`: the same with a throwaway PostgreSQL cluster, as CI runs it).
# Both create .venv (with python3.11, else python3) and install the project into it once;
# the stamp file is refreshed only when pyproject.toml changes.

PYTHON ?= $(shell command -v python3.11 2>/dev/null || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.signoff-installed

.PHONY: run test test-postgres venv clean stress

# The Python example agents plus the MCP demo agent (examples/mcp/agents.toml), unless
# SIGNOFF_APP / SIGNOFF_AGENTS are set.
run: $(STAMP)
	SIGNOFF_APP="$${SIGNOFF_APP:-examples:demo_agents}" \
	SIGNOFF_AGENTS="$${SIGNOFF_AGENTS-examples/mcp/agents.toml}" $(BIN)/signoff serve

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/pytest -q

test-postgres: $(STAMP)
	.ci/with-postgres $(MAKE) test

venv: $(STAMP)

# The suite must pass every time on a loaded machine: ROUNDS rounds of two full pytest
# runs side by side; stops at the first failing round.
ROUNDS ?= 5
stress: $(STAMP)
	@for round in $$(seq 1 $(ROUNDS)); do \
		echo "round $$round of $(ROUNDS): two suites in parallel"; \
		$(BIN)/pytest -q -p no:cacheprovider > .stress-a.log 2>&1 & a=$$!; \
		$(BIN)/pytest -q -p no:cacheprovider > .stress-b.log 2>&1 & b=$$!; \
		wait $$a; ra=$$?; wait $$b; rb=$$?; \
		tail -n 1 .stress-a.log; tail -n 1 .stress-b.log; \
		if [ $$ra -ne 0 ] || [ $$rb -ne 0 ]; then echo "round $$round failed (.stress-*.log)"; exit 1; fi; \
	done; rm -f .stress-a.log .stress-b.log

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

clean:
	rm -rf $(VENV) *.egg-info .mypy_cache .ruff_cache .pytest_cache
