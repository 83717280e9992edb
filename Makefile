# Each target bootstraps its venv itself, so on a fresh machine one command is enough.
# Every venv is built with uv (installed with pip when missing): it resolves and installs the
# SDK stacks below in seconds where pip takes minutes. A venv is rebuilt when pyproject changes.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
UV = $(shell command -v uv 2>/dev/null || echo "$(PYTHON) -m uv")

.PHONY: demo test test-main checks test-legacy test-gen2 test-scenario test-hermes test-frameworks test-import lint typecheck bench \
	redis-server uv clean chromium docs dist node-deps

# The SDK generations and real clients cannot share one venv; each gets its own:
# .venv          openai 3.x / anthropic 2.x on httpx2, the main suite
# .venv-legacy   openai 1.x / anthropic 0.x / litellm < 1.81 on plain httpx
# .venv-gen2     openai 2.x, current litellm (aiohttp for async), anthropic 0.x on httpx
# .venv-scenario langwatch-scenario (pins openai < 3; ~130 packages)
# .venv-hermes   hermes-agent 0.19 (pins openai 2.x), AgentPool's real client
# .venv-fw3      agent frameworks on openai 3.x: openai-agents, pydantic-ai, langgraph, smolagents, agno
# .venv-fw2      agent frameworks pinned to openai 2.x: dspy, crewai, llama-index
# .venv-import   vcrpy and agentcassette (dejacache import), openai 2.x / anthropic 0.x on httpx
LEGACY := .venv-legacy
GEN2 := .venv-gen2
SCENARIO := .venv-scenario
HERMES := .venv-hermes
DOCS := .venv-docs
FW3 := .venv-fw3
FW2 := .venv-fw2
IMPORT := .venv-import
BENCH := .venv-bench
comma := ,

# Python may write bytecode under every target here, whatever the caller's environment says:
# with PYTHONDONTWRITEBYTECODE set, each of the suites' hundreds of subprocesses compiled
# everything it imported from source again (`import scenario` 32 s against 20 s from its
# .pyc files; compile() was 18 of a scenario project's 47 s pytest run).
unexport PYTHONDONTWRITEBYTECODE

uv:
	@command -v uv >/dev/null 2>&1 || $(PYTHON) -m uv --version >/dev/null 2>&1 \
	  || $(PYTHON) -m pip install -q uv

# $(call venv,DIR,EXTRA): DIR/.installed, an editable dejacache with extra EXTRA.
define venv
$(1)/.installed: pyproject.toml | uv
	test -x $(1)/bin/python || $$(UV) venv -q -p $(PYTHON) $(1)
	$$(UV) pip install -q --python $(1)/bin/python -e '.[$(2)]'
	touch $(1)/.installed
endef

$(eval $(call venv,$(VENV),dev))
$(eval $(call venv,$(DOCS),docs))
$(eval $(call venv,$(LEGACY),legacy-test))
$(eval $(call venv,$(GEN2),gen2-test))
$(eval $(call venv,$(SCENARIO),scenario-test))
$(eval $(call venv,$(HERMES),hermes-test))
$(eval $(call venv,$(FW3),fw3-test))
$(eval $(call venv,$(FW2),fw2-test))
$(eval $(call venv,$(IMPORT),import-test))
$(eval $(call venv,$(BENCH),dev$(comma)bench))

demo: $(STAMP)
	$(VENV)/bin/dejacache demo

# Tests start their own redis-server on a free loopback port; this only makes sure the
# binary exists (Debian's package, installed when we are root and it is missing).
redis-server:
	@command -v redis-server >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Debian's redis-server for the tests"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null) \
	      || echo "could not install redis-server; redis tests will be skipped"; \
	  else echo "redis-server not found and not root: redis tests will be skipped"; fi; }
	@command -v redis-server >/dev/null 2>&1 && redis-server --version || true

# tests/report opens the HTML report in a real headless browser: Debian's chromium, installed
# like redis-server (when we are root and it is missing); the tests skip with the reason
# otherwise.
chromium:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Debian's chromium for the report tests"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	      || echo "could not install chromium; browser tests will be skipped"; \
	  else echo "chromium not found and not root: browser tests will be skipped"; fi; }

# tests/node: the real Node SDKs (openai, @anthropic-ai/sdk, ai + @ai-sdk/openai, the MCP
# TypeScript SDK) and test runners (vitest, jest) that tests/proxying drives through dejacache
# proxy and mcp-proxy.
# npm ci from the lock file, only when the lock changed (its stamp is npm's own hidden lock
# in node_modules): 424 packages, ~60 s from a warm npm cache on the shared 2-core machine at
# load 11 (jest is half of them), nothing on later runs. Without npm the tests skip and say so.
NODE_DEPS := tests/node/node_modules/.package-lock.json
$(NODE_DEPS): tests/node/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
	  cd tests/node && npm ci --prefer-offline --no-audit --no-fund --loglevel=error; \
	else echo "npm not found: the Node SDK tests (tests/proxying) will be skipped"; fi

node-deps: $(NODE_DEPS)

# The documentation site (mkdocs-material, strict: a warning fails the build) into site/.
docs: $(DOCS)/.installed
	NO_MKDOCS_2_WARNING=1 $(DOCS)/bin/mkdocs build --strict

# Packaging check: wheel + sdist, twine check, and the wheel in a fresh venv with no extras
# (tests/test_packaging.py does the same when DEJACACHE_TEST_PACKAGING=1).
dist: $(STAMP)
	rm -rf dist
	$(PY) -m build -q -o dist . >/dev/null
	$(PY) -m twine check --strict dist/*
	DEJACACHE_TEST_PACKAGING=1 $(PY) -m pytest tests/test_packaging.py -q -p no:randomly

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks

typecheck: $(STAMP)
	$(VENV)/bin/mypy

test: $(STAMP) redis-server chromium node-deps
	$(MAKE) --no-print-directory -j2 --keep-going --output-sync=target test-main \
	  $(OTHER_SUITES)

# The main suite (two workers) beside one queue of the checks and the other venvs' suites,
# each taken up as soon as a slot is free, the longest first (the scenario suite, whose
# learn run starts pytest and langwatch-scenario in subprocesses, ~20 s of CPU each) and
# the shortest last, so that no long suite runs alone at the end. One after the other, the
# suites left the cores idle ~10% of the time (waiting on servers, sockets and subprocesses)
# and the whole run took 1,001 s; side by side the cores stay busy and it took 805 s.
OTHER_SUITES := test-scenario test-frameworks checks test-hermes test-gen2 test-legacy test-import

test-main: $(STAMP)
	$(PY) -m pytest -n 2 --dist loadfile -q

checks: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/mypy
	$(MAKE) --no-print-directory docs

# httpx-era SDKs (openai 1.x, anthropic 0.x, litellm) cannot share a venv with the current
# ones. (The litellm tests close the clients litellm caches: left to interpreter teardown,
# their aiohttp sessions and sockets fail the run under pytest 9's -W error.)
test-legacy: $(LEGACY)/.installed
	$(LEGACY)/bin/python -m pytest tests/http/legacy -q

# openai 2.x and litellm's aiohttp transport (tests/http/gen2): litellm streams to Anthropic
# and OpenAI, sync and async, over aiohttp and with DISABLE_AIOHTTP_TRANSPORT.
test-gen2: $(GEN2)/.installed
	$(GEN2)/bin/python -m pytest tests/http/gen2 -q

# The peers get a venv of their own: cassetter's and agentcassette's pytest plugins both add
# --record-mode, so with both installed pytest refuses to start (the test venv stays clean).
bench: $(BENCH)/.installed
	$(BENCH)/bin/python benchmarks/run.py
	$(BENCH)/bin/python benchmarks/render.py

# langwatch-scenario 1.6 with openai 2.x and litellm, against a loopback provider: the
# integration's record / replay / CI-replay runs (tests/integrations/langwatch_scenario).
test-scenario: $(SCENARIO)/.installed
	$(SCENARIO)/bin/python -m pytest tests/integrations/langwatch_scenario -q

# AgentPool with hermes-agent's real AIAgent as the factory, against a loopback provider:
# the gateway agent-cache cases (tests/integrations/hermes).
test-hermes: $(HERMES)/.installed
	$(HERMES)/bin/python -m pytest tests/integrations/hermes -q

# The agent frameworks (issue 11): one small agent with one tool each, recorded live against
# the loopback provider and replayed with the provider gone; their tool decorators stacked
# with dejacache's. Two venvs: the frameworks on openai 3.x and those pinned to 2.x.
test-frameworks: $(FW3)/.installed $(FW2)/.installed
	$(FW3)/bin/python -m pytest tests/integrations/frameworks -q
	$(FW2)/bin/python -m pytest tests/integrations/frameworks -q

# dejacache import (issue 14): recordings written by the real vcrpy (around the real openai 2.x
# and anthropic 0.x SDKs, which it intercepts on plain httpx) and the real agentcassette,
# converted and replayed with the loopback provider stopped (tests/cassettes/importers).
test-import: $(IMPORT)/.installed
	$(IMPORT)/bin/python -m pytest tests/cassettes/importers -q

clean:
	rm -rf $(VENV) $(LEGACY) $(GEN2) $(SCENARIO) $(HERMES) $(FW3) $(FW2) $(IMPORT) $(BENCH) $(DOCS) .dejacache build dist site \
	  tests/node/node_modules benchmarks/node/node_modules
