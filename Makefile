# The two commands of the README: `make run` and `make test`.
# Both create .venv (with python3.11, else python3) and install the project into it once;
# the stamp file is refreshed only when pyproject.toml changes.

PYTHON ?= $(shell command -v python3.11 2>/dev/null || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.signoff-installed

.PHONY: run test venv clean

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

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

clean:
	rm -rf $(VENV) *.egg-info .mypy_cache .ruff_cache .pytest_cache
