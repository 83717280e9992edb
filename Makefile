# Each target bootstraps .venv itself, so on a fresh machine one command is enough.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-legacy lint typecheck bench redis-server clean

# openai 1.x / anthropic 0.x / litellm speak plain httpx and cannot share .venv with
# openai 3.x / anthropic 2.x (httpx2): they get their own venv, rebuilt when pyproject changes.
LEGACY := .venv-legacy
LEGACY_STAMP := $(LEGACY)/.installed

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

$(LEGACY_STAMP): pyproject.toml
	test -x $(LEGACY)/bin/python || $(PYTHON) -m venv $(LEGACY)
	$(LEGACY)/bin/python -m pip install -q --upgrade pip
	$(LEGACY)/bin/python -m pip install -q -e '.[legacy-test]'
	touch $(LEGACY_STAMP)

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

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks

typecheck: $(STAMP)
	$(VENV)/bin/mypy

test: $(STAMP) redis-server
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/mypy
	$(MAKE) --no-print-directory test-legacy
	$(PY) -m pytest -n 2 --dist loadfile -q

# httpx-era SDKs (openai 1.x, anthropic 0.x, litellm) cannot share a venv with the current
# ones. (litellm leaves an aiohttp connector to interpreter teardown, which prints a
# ResourceWarning after the results; the exit code is unaffected.)
test-legacy: $(LEGACY_STAMP)
	$(LEGACY)/bin/python -m pytest tests/http/legacy -q

bench: $(STAMP)
	$(PY) -m pip install -q -e '.[bench]'
	$(PY) benchmarks/run.py

clean:
	rm -rf $(VENV) $(LEGACY) .dejacache build dist
