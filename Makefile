# The two commands of the README: `make run` and `make test`
# (`make test-postgres`: the same with a throwaway PostgreSQL cluster, as CI runs it).
# Both create .venv (with python3.11, else python3) and install the project into it once:
# `make run` only what running the demo needs (signoff and its `mcp` extra), `make test`
# the whole dev toolchain; a stamp file is refreshed only when pyproject.toml changes.
# `make cli ARGS="tickets"` runs the command line with the settings `make run` uses.

PYTHON ?= $(shell command -v python3.11 2>/dev/null || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.signoff-installed
RUN_STAMP := $(VENV)/.signoff-run-installed
# The demo's second sign-in: a release manager, who may approve the deploys example's
# four-eyes deploy that the operator asked for.
DEMO_TOKENS ?= $(VENV)/signoff-demo-tokens.json

.PHONY: run cli test test-postgres venv clean stress

# The Python example agents plus the MCP demo agent (examples/mcp/agents.toml), unless
# SIGNOFF_APP / SIGNOFF_AGENTS are set; the same for `make run` and `make cli`.
DEMO_ENV = SIGNOFF_APP="$${SIGNOFF_APP:-examples:demo_agents}" \
	SIGNOFF_AGENTS="$${SIGNOFF_AGENTS-examples/mcp/agents.toml}"

# The release manager's token is used unless SIGNOFF_API_TOKENS(_FILE) is set.
run: $(RUN_STAMP) $(DEMO_TOKENS)
	@if [ -z "$${SIGNOFF_API_TOKENS+set}$${SIGNOFF_API_TOKENS_FILE+set}" ]; then \
		export SIGNOFF_API_TOKENS_FILE="$(DEMO_TOKENS)"; \
		echo "make run: a second sign-in, a release manager who may approve the deploys"; \
		echo "  example's four-eyes deploy: $$($(BIN)/python -c 'import json, sys; print(json.load(open(sys.argv[1]))[0]["token"])' "$(DEMO_TOKENS)")"; \
	fi; \
	echo 'make run: in another terminal, `make cli ARGS="tickets"` works on the same runs'; \
	$(DEMO_ENV) exec $(BIN)/signoff serve

cli: $(RUN_STAMP)
	@$(DEMO_ENV) $(BIN)/signoff $(ARGS)

$(DEMO_TOKENS): | $(RUN_STAMP)
	umask 077; $(BIN)/python -c 'import json, secrets; print(json.dumps([{"token": secrets.token_urlsafe(24), "actor": "demo:release-manager", "name": "Release manager (demo)", "groups": ["release-managers"]}]))' > "$@"

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
	touch $(STAMP) $(RUN_STAMP)

# The dev install includes it: after `make test`, `make run` installs nothing more.
$(RUN_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[mcp]'
	touch $(RUN_STAMP)

clean:
	rm -rf $(VENV) *.egg-info .mypy_cache .ruff_cache .pytest_cache
